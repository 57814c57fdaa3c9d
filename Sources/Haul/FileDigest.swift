import Crypto
import Foundation
import HaulCore

/// Digests of a file on disk, read in 1 MiB blocks so memory stays flat.
enum FileDigest {
    /// Hex digests of the file at `path` for each algorithm asked for.
    static func hexDigests(of path: String, algorithms: Set<Checksum.Algorithm>) throws(DownloadError) -> [Checksum
        .Algorithm: String]
    {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw DownloadError(.fileSystem, "cannot read \(path) to compute its checksum")
        }
        defer { try? handle.close() }
        var sha256 = algorithms.contains(.sha256) ? SHA256() : nil
        var sha512 = algorithms.contains(.sha512) ? SHA512() : nil
        var sha1 = algorithms.contains(.sha1) ? Insecure.SHA1() : nil
        var md5 = algorithms.contains(.md5) ? Insecure.MD5() : nil
        while true {
            let block: Data
            do { block = try handle.read(upToCount: 1 << 20) ?? Data() } catch {
                throw DownloadError(.fileSystem, "cannot read \(path) to compute its checksum", underlying: error)
            }
            if block.isEmpty { break }
            sha256?.update(data: block)
            sha512?.update(data: block)
            sha1?.update(data: block)
            md5?.update(data: block)
        }
        var result: [Checksum.Algorithm: String] = [:]
        result[.sha256] = sha256.map { hex($0.finalize()) }
        result[.sha512] = sha512.map { hex($0.finalize()) }
        result[.sha1] = sha1.map { hex($0.finalize()) }
        result[.md5] = md5.map { hex($0.finalize()) }
        return result
    }

    private static func hex<D: Sequence>(_ digest: D) -> String where D.Element == UInt8 {
        digest.map { String(format: "%02x", $0) }.joined()
    }
}
