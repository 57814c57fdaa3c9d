/// Classifies the answer to one segment's request (`Range: bytes=start-(end-1)` with `If-Range`) before any byte of it
/// touches the disk. The rules are DESIGN.md's, per segment: the answer must start where the segment does, announce
/// the same total, and carry the same version as the first answer. Versions are never mixed, and a 200 is never
/// written at a segment's offset.
public struct SegmentValidator: Sendable {
    /// What to do with the answer.
    public enum Decision: Equatable, Sendable {
        /// Write the body at the segment's offset; it holds `length` bytes (ending at `start + length`).
        case write(length: Int64)
        /// The remote file changed: discard every segment and start the whole download again.
        case versionChanged(reason: String)
        /// The server does not serve this range as asked (a 200 for the same version, a wrong start, multipart,
        /// a broken Content-Range): the download goes on with one connection, from the start.
        case oneConnection(reason: String)
        /// This attempt fails with the error (which says whether a retry may help).
        case fail(DownloadError)
    }

    /// Makes a validator.
    public init() {}

    /// Decides for `head`, the answer to a request for `start..<end` of the version `known`.
    public func decide(start: Int64, end: Int64, head: ResponseHead, known: RemoteFacts) -> Decision {
        let validators = head.validators
        let changed = validators.isChanged(comparedTo: known.validators)
        switch head.status {
        case 200:
            if changed {
                return .versionChanged(reason: "a segment's answer carries different validators (the file changed)")
            }
            if case .length(let length) = head.contentLength, let total = known.totalLength, length != total {
                return .versionChanged(reason: "the remote length changed from \(total) to \(length)")
            }
            return .oneConnection(reason: "server answered 200 to the range request for bytes \(start)-\(end - 1)")
        case 206:
            if let coding = head.contentEncoding {
                return .fail(
                    DownloadError(
                        .contentEncoding,
                        "server sent a segment with Content-Encoding \(coding) although identity was asked for"
                    )
                )
            }
            if head.isMultipart { return .oneConnection(reason: "multipart/byteranges answer to a single range") }
            guard case .satisfied(let first, let last, let total) = head.contentRange else {
                let raw = head.value("Content-Range") ?? "none"
                return .oneConnection(reason: "206 with an unusable Content-Range (\(raw))")
            }
            if let total, let known = known.totalLength, total != known {
                return .versionChanged(reason: "the remote length changed from \(known) to \(total)")
            }
            if changed { return .versionChanged(reason: "the remote file changed (validators differ)") }
            guard first == start else {
                return .oneConnection(reason: "206 starts at byte \(first), not at the requested \(start)")
            }
            switch head.contentLength {
            case .length(let length) where length != last - first + 1:
                return .oneConnection(
                    reason: "206 Content-Length \(length) disagrees with Content-Range \(first)-\(last)")
            case .invalid(let why):
                return .fail(DownloadError(.invalidResponse, "invalid response: \(why)"))
            default:
                break
            }
            return .write(length: last - first + 1)
        case 416:
            return .versionChanged(reason: "server answered 416 to bytes \(start)-\(end - 1) of a known length")
        case 300...399:
            return .fail(DownloadError(.tooManyRedirects, "server answered \(head.status) without a usable Location"))
        default:
            return .fail(LinkExpiry.error(for: head) ?? .httpStatus(head.status, retryAfter: head.retryAfter))
        }
    }
}
