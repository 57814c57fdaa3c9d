import Foundation
import HaulCore

/// `--checksum auto` and `--checksum-url`: the checksum a mirror or a release page publishes beside a file, fetched
/// before the download so that the file is verified as with `--checksum` (`ChecksumList` reads it).
public enum ChecksumSidecar {
    /// A checksum found, and the URL it came from.
    public struct Found: Sendable, Equatable {
        public var checksum: Checksum
        public var source: String
    }

    /// The largest checksum file read (a SHA256SUMS of a large release is a few hundred KiB).
    static let largest = 1 << 20

    /// The checksum of `url`'s file: from `list` when given (a checksum file that names it, or holds one digest),
    /// else from the first of `ChecksumList.sidecars(of:)` that answers 200 and has it. Nil when no sidecar has it.
    /// A `list` the user named is asked for on purpose: one that cannot be read, or that has no checksum for the
    /// file, throws, saying which, rather than leave the file unverified. The requests go out with `options`'
    /// proxies, TLS and credentials, as the download's would.
    public static func find(
        for url: String, list: String? = nil, options: DownloadOptions = DownloadOptions(),
        transport: any HTTPTransport = LiveTransport()
    ) async throws(DownloadError) -> Found? {
        let name = fileName(of: url)
        if let list {
            let text: String
            switch await fetch(list, options: options, transport: transport) {
            case .success(let body): text = body
            case .failure(let unreadable):
                throw DownloadError(.invalidArgument, "the checksum list \(list) cannot be read \(unreadable.reason)")
            }
            guard let checksum = ChecksumList.checksum(in: text, for: name, algorithm: nil, isList: false) else {
                throw DownloadError(.invalidArgument, "the checksum list \(list) has no checksum for \(name)")
            }
            return Found(checksum: checksum, source: list)
        }
        for candidate in ChecksumList.sidecars(of: url) {
            guard case .success(let text) = await fetch(candidate.url, options: options, transport: transport),
                let checksum = ChecksumList.checksum(
                    in: text, for: name, algorithm: candidate.algorithm, isList: candidate.isList)
            else { continue }
            return Found(checksum: checksum, source: candidate.url)
        }
        return nil
    }

    /// The file's name as a checksum file names it: the URL path's last component, percent-decoded.
    public static func fileName(of url: String) -> String {
        let path = URL(string: url)?.path ?? ""
        return (path as NSString).lastPathComponent
    }

    /// The body of a 200 answer to `url`, at most `largest` bytes; otherwise why not, in words that follow "cannot be
    /// read".
    private static func fetch(
        _ url: String, options: DownloadOptions, transport: any HTTPTransport
    ) async -> Result<String, Unreadable> {
        guard let target = URL(string: url) else { return .failure(Unreadable("(not a URL)")) }
        var headers: [(name: String, value: String)] = [("Accept-Encoding", "identity")]
        if let agent = options.userAgent { headers.append(("User-Agent", agent)) }
        headers += options.headers.map { ($0.name, $0.value) }
        let request = TransportRequest(
            url: target, headers: headers, tls: options.tls, network: options.network, ownHost: target.host)
        do {
            let response = try await transport.send(request)
            guard response.head.status == 200 else { return .failure(Unreadable("(HTTP \(response.head.status))")) }
            var bytes: [UInt8] = []
            for try await chunk in response.body {
                bytes += chunk.readableBytesView
                if bytes.count > largest { return .failure(Unreadable("(larger than 1 MiB)")) }
            }
            return .success(String(decoding: bytes, as: UTF8.self))
        } catch {
            return .failure(Unreadable("(\((error as? DownloadError)?.message ?? String(describing: error)))"))
        }
    }

    /// Why a checksum file cannot be read.
    struct Unreadable: Error {
        let reason: String
        init(_ reason: String) { self.reason = reason }
    }
}
