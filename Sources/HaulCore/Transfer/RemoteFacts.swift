/// What Haul knows about the remote file: its length, its version, and whether it serves byte ranges.
public struct RemoteFacts: Hashable, Sendable, Codable {
    /// The full length, when known.
    public var totalLength: Int64?
    /// The version's validators.
    public var validators: Validators
    /// Whether the server honours byte ranges; false means a pause restarts the download.
    public var isResumable: Bool

    /// Makes facts from their parts.
    public init(totalLength: Int64?, validators: Validators, isResumable: Bool) {
        self.totalLength = totalLength
        self.validators = validators
        self.isResumable = isResumable
    }
}

/// One request of a download: where the trusted bytes end, how many bytes before that are fetched again to compare,
/// and the `If-Range` validator.
public struct RangeRequest: Hashable, Sendable {
    /// Bytes already held and trusted; writing continues here.
    public var offset: Int64
    /// Bytes before `offset` requested again and compared with the part file before anything is appended.
    public var overlap: Int64
    /// The strong validator to send in `If-Range`, if any.
    public var ifRange: String?
    /// Send `ifRange` as a precondition instead (`If-Match`, `If-Unmodified-Since`): another version answers 412 and
    /// no body, where `If-Range` would bring the whole new file (a replaced link's first requests).
    public var requiresSame = false
    /// One past the last byte asked for (a segment: `Range: bytes=offset-(end-1)`); nil for the rest of the file.
    public var end: Int64?
    /// Where it is sent: 0 for the URL the user gave, `n` for the download's n-th mirror.
    public var source: Int

    /// Makes a request description.
    public init(offset: Int64, overlap: Int64 = 0, ifRange: String? = nil, end: Int64? = nil, source: Int = 0) {
        self.offset = offset
        self.overlap = overlap
        self.ifRange = ifRange
        self.end = end
        self.source = source
    }

    /// A request for the whole file with no `Range` header.
    public static let whole = RangeRequest(offset: 0)

    /// The first byte asked for, nil when no `Range` header is sent.
    public var rangeStart: Int64? { offset > 0 || end != nil ? offset - overlap : nil }

    /// The `Range` header value, nil for a whole-file request.
    public var rangeHeader: String? {
        guard let start = rangeStart else { return nil }
        return end.map { "bytes=\(start)-\($0 - 1)" } ?? "bytes=\(start)-"
    }
}
