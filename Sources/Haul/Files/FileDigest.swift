import Crypto
import Foundation
import HaulCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Digests of a file on disk, read in 1 MiB blocks so memory stays flat.
enum FileDigest {
    /// Hex digests of the open file `descriptor` (from its first byte, whatever its offset) for each algorithm
    /// asked for; `path` names it in errors.
    static func hexDigests(
        of descriptor: Int32, named path: String, algorithms: Set<Checksum.Algorithm>, range: Range<Int64>? = nil
    )
        throws(DownloadError) -> [Checksum.Algorithm: String]
    {
        var sha256 = algorithms.contains(.sha256) ? SHA256() : nil
        var sha512 = algorithms.contains(.sha512) ? SHA512() : nil
        var sha1 = algorithms.contains(.sha1) ? Insecure.SHA1() : nil
        var md5 = algorithms.contains(.md5) ? Insecure.MD5() : nil
        var block = [UInt8](repeating: 0, count: 1 << 20)
        var offset = off_t(range?.lowerBound ?? 0)
        let end = range.map { off_t($0.upperBound) } ?? off_t.max
        while offset < end {
            let want = Int(min(off_t(block.count), end - offset))
            let count = block.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress!, want, offset) }
            if count < 0 {
                if errno == EINTR { continue }
                throw PartFile.fileError(errno, "cannot read \(path) to compute its checksum")
            }
            if count == 0 { break }
            offset += off_t(count)
            block.withUnsafeBytes { bytes in
                let read = UnsafeRawBufferPointer(rebasing: bytes[..<count])
                sha256?.update(bufferPointer: read)
                sha512?.update(bufferPointer: read)
                sha1?.update(bufferPointer: read)
                md5?.update(bufferPointer: read)
            }
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
