/// The one error type of Haul: a code, a message for people, the cause, and whether retrying can help.
public struct DownloadError: Error, Sendable, Equatable, CustomStringConvertible, Codable {
    /// What kind of failure this is. A struct over a private enum, so codes can be added without breaking callers.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case invalidURL, invalidArgument, httpStatus, invalidResponse, contentEncoding, tooManyRedirects
            case connectionFailed, connectionLost, idleTimeout, bodyTooShort, bodyTooLong, tls
            case checksumMismatch, diskFull, fileSystem, destinationExists, destinationNotWritable
            case locked, store, cancelled, retriesExhausted, illegalTransition, notFound, untrustedFile
            case linkExpired
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// A URL that Haul cannot fetch (bad syntax, unsupported scheme, no host).
        public static let invalidURL = Code(.invalidURL)
        /// A flag or an argument with a value Haul cannot use.
        public static let invalidArgument = Code(.invalidArgument)
        /// The server answered with a status that ends the download (e.g. 404).
        public static let httpStatus = Code(.httpStatus)
        /// The server's answer breaks HTTP in a way Haul refuses to write to disk.
        public static let invalidResponse = Code(.invalidResponse)
        /// The server encoded the body although `identity` was asked for.
        public static let contentEncoding = Code(.contentEncoding)
        /// Redirects went on for too long, or a redirect had no usable `Location`.
        public static let tooManyRedirects = Code(.tooManyRedirects)
        /// No connection could be made (refused, unreachable, name resolution).
        public static let connectionFailed = Code(.connectionFailed)
        /// The connection broke while the answer was arriving.
        public static let connectionLost = Code(.connectionLost)
        /// The server's TLS certificate could not be verified, or the TLS handshake failed: not retried.
        public static let tls = Code(.tls)
        /// Nothing arrived for the idle timeout.
        public static let idleTimeout = Code(.idleTimeout)
        /// The body ended before the length the server announced.
        public static let bodyTooShort = Code(.bodyTooShort)
        /// The body went on past the length the server announced.
        public static let bodyTooLong = Code(.bodyTooLong)
        /// The finished file does not match the checksum the user gave.
        public static let checksumMismatch = Code(.checksumMismatch)
        /// The disk is full.
        public static let diskFull = Code(.diskFull)
        /// Any other failure of the local file system.
        public static let fileSystem = Code(.fileSystem)
        /// A file Haul did not create is at the destination.
        public static let destinationExists = Code(.destinationExists)
        /// The destination folder is missing or cannot be written.
        public static let destinationNotWritable = Code(.destinationNotWritable)
        /// Something on disk that Haul will not write through: a symbolic link, a hard link, a FIFO, a socket or a
        /// device where its part file should be, another user's file, a part file it has no record of making, or a
        /// folder that leads outside the allowed ones or is not the one the download was added to.
        public static let untrustedFile = Code(.untrustedFile)
        /// Another process holds the part file.
        public static let locked = Code(.locked)
        /// The state database failed (locked by another process, unreadable, corrupt).
        public static let store = Code(.store)
        /// The download was paused or cancelled.
        public static let cancelled = Code(.cancelled)
        /// Automatic retries ran out without progress.
        public static let retriesExhausted = Code(.retriesExhausted)
        /// A command that the download's state does not allow (e.g. resuming a completed download).
        public static let illegalTransition = Code(.illegalTransition)
        /// No download with that id.
        public static let notFound = Code(.notFound)
        /// The URL stopped working for good after bytes came from it, or its server says it expired (a signed,
        /// temporary link): a new link is needed (`LinkExpiry`).
        public static let linkExpired = Code(.linkExpired)

        public var description: String { base.rawValue }

        /// The code whose name is `name` (as `description` writes it), nil for a name this version does not know.
        public init?(named name: String) {
            guard let base = Base(rawValue: name) else { return nil }
            self.base = base
        }
    }

    /// The kind of failure.
    public var code: Code
    /// A sentence for people that names the problem.
    public var message: String
    /// The HTTP status, when the failure is about one.
    public var status: Int?
    /// A description of the underlying error, when there is one.
    public var underlying: String?
    /// Whether an automatic retry can help.
    public var isRetryable: Bool
    /// How long the server asked us to wait before retrying (`Retry-After`).
    public var retryAfter: Duration?

    /// Makes an error; `isRetryable` defaults to what the code implies.
    public init(
        _ code: Code,
        _ message: String,
        status: Int? = nil,
        underlying: (any Error)? = nil,
        isRetryable: Bool? = nil,
        retryAfter: Duration? = nil
    ) {
        self.code = code
        self.message = message
        self.status = status
        self.underlying = underlying.map { String(describing: $0) }
        self.isRetryable = isRetryable ?? Self.defaultRetryable(code)
        self.retryAfter = retryAfter
    }

    private static func defaultRetryable(_ code: Code) -> Bool {
        switch code {
        case .connectionFailed, .connectionLost, .idleTimeout, .bodyTooShort: true
        default: false
        }
    }

    public var description: String {
        if let underlying, !message.contains(underlying) { return "\(message) (\(underlying))" }
        return message
    }

    /// The error for an HTTP status that ends or delays the download.
    public static func httpStatus(_ status: Int, reason: String? = nil, retryAfter: Duration? = nil) -> DownloadError {
        let retryable = RetryPolicy.isRetryableStatus(status)
        let text = (reason ?? standardReason(status)).map { "HTTP \(status) \($0)" } ?? "HTTP \(status)"
        let hint =
            switch status {
            case 401: ": it asks for credentials (--user NAME[:PASSWORD], user:password@ in the URL, or ~/.netrc)"
            case 407: ": the proxy asks for credentials (http://USER:PASSWORD@HOST:PORT as the proxy)"
            default: ""
            }
        return DownloadError(
            .httpStatus,
            "server answered \(text)\(hint)",
            status: status,
            isRetryable: retryable,
            retryAfter: retryAfter
        )
    }

    /// The reason phrase RFC 9110 gives a status that ends or delays a download, as wget and browsers show it
    /// ("404 Not Found"): the number alone leaves many readers to look it up.
    static func standardReason(_ status: Int) -> String? {
        switch status {
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 402: "Payment Required"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 406: "Not Acceptable"
        case 407: "Proxy Authentication Required"
        case 408: "Request Timeout"
        case 409: "Conflict"
        case 410: "Gone"
        case 411: "Length Required"
        case 412: "Precondition Failed"
        case 413: "Content Too Large"
        case 414: "URI Too Long"
        case 415: "Unsupported Media Type"
        case 416: "Range Not Satisfiable"
        case 421: "Misdirected Request"
        case 425: "Too Early"
        case 426: "Upgrade Required"
        case 428: "Precondition Required"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 451: "Unavailable For Legal Reasons"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        case 505: "HTTP Version Not Supported"
        case 507: "Insufficient Storage"
        case 511: "Network Authentication Required"
        default: nil
        }
    }

    private enum CodingKeys: String, CodingKey {
        case code, message, status, underlying, isRetryable
    }

    /// Decodes an error; a code this version does not know becomes `invalidResponse`, keeping the message.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let name = try container.decode(String.self, forKey: .code)
        self.init(
            Code(named: name) ?? .invalidResponse,
            try container.decode(String.self, forKey: .message),
            status: try container.decodeIfPresent(Int.self, forKey: .status),
            isRetryable: try container.decodeIfPresent(Bool.self, forKey: .isRetryable)
        )
        underlying = try container.decodeIfPresent(String.self, forKey: .underlying)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(code.description, forKey: .code)
        try container.encode(message, forKey: .message)
        try container.encodeIfPresent(status, forKey: .status)
        try container.encodeIfPresent(underlying, forKey: .underlying)
        try container.encode(isRetryable, forKey: .isRetryable)
    }
}
