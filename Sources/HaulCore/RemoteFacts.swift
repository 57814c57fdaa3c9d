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

    /// Makes a request description.
    public init(offset: Int64, overlap: Int64 = 0, ifRange: String? = nil) {
        self.offset = offset
        self.overlap = overlap
        self.ifRange = ifRange
    }

    /// A request for the whole file with no `Range` header.
    public static let whole = RangeRequest(offset: 0)

    /// The first byte asked for, nil when no `Range` header is sent.
    public var rangeStart: Int64? { offset > 0 ? offset - overlap : nil }

    /// The `Range` header value, nil for a whole-file request.
    public var rangeHeader: String? { rangeStart.map { "bytes=\($0)-" } }
}
