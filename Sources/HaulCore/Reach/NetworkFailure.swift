/// What went wrong reaching a server, told as one plain sentence naming the host and the cause, with whether trying
/// again can help. The engine classifies what the network library reports (resolver codes, socket errors, TLS
/// failures) into one of these; no internal type name, error-set dump or build path reaches the user.
public enum NetworkFailure: Sendable, Equatable {
    /// The name does not exist (NXDOMAIN, `EAI_NONAME`): trying again cannot help.
    case hostNotFound
    /// The resolver could not answer for now (`EAI_AGAIN`): tried again.
    case resolverUnavailable
    /// Nothing listens on that port.
    case refused
    /// No route to the network or the host.
    case unreachable
    /// The connection was not established in time.
    case connectTimedOut
    /// The server (or something between) reset an established connection.
    case reset
    /// The server's TLS certificate could not be verified (untrusted, expired, or for another name; `detail` says
    /// which when known).
    case certificateRejected(detail: String?)
    /// The server's certificate, looked at, showed this problem (at `now`, seconds since 1970).
    case certificateInvalid(CertificateProblem, now: Int64)
    /// The TLS handshake failed for another reason (no common protocol or cipher, a client certificate refused).
    case handshakeFailed(detail: String?)
    /// Anything else, in plain words.
    case other(String)

    /// Classifies a resolver (`getaddrinfo`) result code, as glibc numbers them.
    public static func resolver(code: Int) -> NetworkFailure {
        switch code {
        case -3: .resolverUnavailable  // EAI_AGAIN: temporary failure in name resolution
        case -11: .resolverUnavailable  // EAI_SYSTEM: the resolver itself failed (no file descriptors, ...)
        default: .hostNotFound  // EAI_NONAME, EAI_NODATA, EAI_FAIL, EAI_ADDRFAMILY: the name has no address
        }
    }

    /// Classifies the `errno` of a failed connect, read or write.
    public static func socket(errno: Int32, connecting: Bool) -> NetworkFailure {
        switch errno {
        case 111: .refused  // ECONNREFUSED
        case 101, 113: .unreachable  // ENETUNREACH, EHOSTUNREACH
        case 110: connecting ? .connectTimedOut : .reset  // ETIMEDOUT
        case 104, 32, 103: .reset  // ECONNRESET, EPIPE, ECONNABORTED
        default: .other(connecting ? "the connection failed (errno \(errno))" : "the connection broke (errno \(errno))")
        }
    }

    /// Whether the failure happened before the server answered anything (the engine then waits for the network
    /// when the server answered before).
    public var isConnectFailure: Bool {
        switch self {
        case .hostNotFound, .resolverUnavailable, .refused, .unreachable, .connectTimedOut: true
        default: false
        }
    }

    /// Whether trying again can help: not for a name that does not exist, nor for a certificate or a handshake
    /// that will fail the same way.
    public var isRetryable: Bool {
        switch self {
        case .hostNotFound, .certificateRejected, .certificateInvalid, .handshakeFailed: false
        default: true
        }
    }

    /// The sentence for `host`.
    public func message(host: String) -> String {
        switch self {
        case .hostNotFound: "could not resolve host \(host)"
        case .resolverUnavailable: "could not resolve host \(host) (temporary failure in name resolution)"
        case .refused: "could not connect to \(host): connection refused"
        case .unreachable: "could not connect to \(host): no route to the host or its network"
        case .connectTimedOut: "could not connect to \(host): timed out"
        case .reset: "the connection to \(host) was reset"
        case .certificateRejected(let detail):
            "the TLS certificate of \(host) \(detail ?? "could not be verified") "
                + "(--cacert FILE trusts the CA that signed it; --insecure skips the check)"
        case .certificateInvalid(let problem, let now):
            "the TLS certificate of \(host) \(problem.detail(now: now)) ("
                + (problem == .untrusted ? "--cacert FILE trusts the CA that signed it; " : "")
                + "--insecure skips the check)"
        case .handshakeFailed(let detail):
            "the TLS handshake with \(host) failed" + (detail.map { " (\($0))" } ?? "")
        case .other(let text): "\(host): \(text)"
        }
    }

    /// The engine's error for `host`: connect failures are `connectionFailed` (a server that answered before then
    /// makes the download wait for the network), TLS failures `tls`, the rest `connectionLost`.
    public func error(host: String) -> DownloadError {
        let code: DownloadError.Code =
            switch self {
            case .certificateRejected, .certificateInvalid, .handshakeFailed: .tls
            default: isConnectFailure ? .connectionFailed : .connectionLost
            }
        return DownloadError(code, message(host: host), isRetryable: isRetryable)
    }
}
