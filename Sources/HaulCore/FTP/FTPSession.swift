import Foundation

/// The control connection of one FTP download request, as a state machine: replies and connection events go in,
/// the commands to send and what to do next come out. The transport performs the actions; this type never touches a
/// socket.
///
/// One session serves one request of the engine (a whole file, a resume from an offset, or one segment):
/// greeting → `AUTH TLS` (explicit FTPS) → `USER`/`PASS` → `PBSZ 0`/`PROT P` (FTPS) → `TYPE I` → `SIZE` → `MDTM` →
/// `REST` (when the request starts past 0 and the file is unchanged) → `EPSV`, or `PASV` when the server does not know
/// `EPSV` → `RETR`. The answer is then described as an HTTP response head (`answer`) so that the engine applies the
/// same resume rules to FTP as to HTTP: `SIZE` and `MDTM` make a strong validator (an `ETag`), a changed one makes the
/// transport answer from byte 0 (as a failed `If-Range` does), and a refused `REST` does too (as a server that ignores
/// `Range` does).
public struct FTPSession: Sendable {
    /// How the control connection is protected.
    public enum Security: Sendable, Equatable {
        /// Plain FTP (`ftp://`).
        case plain
        /// `AUTH TLS` on the plain port, before the credentials are sent (`ftpes://`, RFC 4217).
        case explicit
        /// TLS from the first byte (`ftps://`, port 990); the transport starts it before the greeting.
        case implicit
    }

    /// What the engine asked for, in FTP's terms.
    public struct Request: Sendable, Equatable {
        /// The path to `RETR`, as sent (relative to the login directory unless it starts with `/`).
        public var path: String
        /// The user name; `anonymous` when none was given.
        public var user: String
        /// The password.
        public var password: String
        /// How the connection is protected.
        public var security: Security
        /// The first byte wanted.
        public var start: Int64
        /// The last byte wanted, nil for up to the end.
        public var end: Int64?
        /// The validator the part file was started with (`If-Range`): when the file's differs, the whole file is
        /// sent from 0.
        public var ifRange: String?

        /// Makes a request.
        public init(
            path: String, user: String = "anonymous", password: String = "haul@", security: Security = .plain,
            start: Int64 = 0, end: Int64? = nil, ifRange: String? = nil
        ) {
            self.path = path
            self.user = user
            self.password = password
            self.security = security
            self.start = start
            self.end = end
            self.ifRange = ifRange
        }
    }

    /// What the transport does next.
    public enum Action: Sendable, Equatable {
        /// Send this command line (without CRLF).
        case send(String)
        /// Start TLS on the control connection (after `234`), then call `tlsEstablished()`.
        case startTLS
        /// Open the data connection to this port (on the control connection's host), then call `dataConnected()`.
        case connectData(port: Int)
        /// The transfer has started: answer the engine with this head and stream the data connection's bytes,
        /// at most `limit` of them when set.
        case respond(ResponseHead, limit: Int64?)
        /// The file needs no transfer (a range starting at or past its end): answer with this head and no body.
        case respondWithoutBody(ResponseHead)
        /// The server confirmed the end of the transfer.
        case transferConfirmed
        /// The request failed.
        case fail(DownloadError)
    }

    private enum Phase: Sendable, Equatable {
        case greeting, authTLS, handshaking, user, password, protectionBuffer, protection, type, size, modified
        case restart, extendedPassive, passive, connectingData, retrieve, transferring, done
    }

    /// The request this session serves.
    public let request: Request
    /// The host, as messages name it (`host:port`).
    public let host: String
    private var phase = Phase.greeting
    /// The file's size from `SIZE`, nil when the server did not tell.
    public private(set) var size: Int64?
    /// The file's modification time from `MDTM`, as sent.
    public private(set) var modified: String?
    /// Where the transfer starts: `request.start`, or 0 when the file changed or `REST` was refused.
    public private(set) var offset: Int64 = 0
    private var triedPlainPassive = false

    /// A session for `request` to `host` (named in messages).
    public init(request: Request, host: String) {
        self.request = request
        self.host = host
    }

    /// The validator `SIZE` and `MDTM` make, as an `ETag`: strong, and different whenever either differs. Nil without
    /// `MDTM` (a size alone says too little: a file rewritten with the same length would mix versions).
    public var entityTag: String? {
        guard let modified else { return nil }
        return "\"ftp-\(modified)-\(size.map(String.init) ?? "unknown")\""
    }

    /// A reply arrived on the control connection.
    public mutating func received(_ reply: FTPReply) -> [Action] {
        if reply.isPreliminary, phase != .retrieve {
            // `120 ready in n minutes` before the greeting, or a stray mark: the final reply follows.
            return []
        }
        if reply.code == 421 {
            phase = .done
            // The server closes the connection: too many sessions (a limit per address or in all), or shutting down.
            // A refused connection beside others makes the engine go on with fewer.
            return [.fail(DownloadError(.connectionFailed, "\(host) refused the session: \(reply.shown)"))]
        }
        switch phase {
        case .greeting:
            guard reply.code == 220 else { return unexpected(reply, after: "connecting") }
            if request.security == .explicit {
                phase = .authTLS
                return [.send("AUTH TLS")]
            }
            return sendUser()
        case .authTLS:
            guard reply.code == 234 else {
                return failTLS(
                    "\(host) does not offer TLS (AUTH TLS answered \(reply.shown)); ftp:// without TLS "
                        + "would send the password in clear")
            }
            phase = .handshaking
            return [.startTLS]
        case .handshaking:
            return unexpected(reply, after: "AUTH TLS")
        case .user:
            switch reply.code {
            case 230, 202: return afterLogin()
            case 331:
                phase = .password
                return [.send("PASS \(request.password)")]
            case 332: return failLogin(reply, "asks for an account (ACCT), which Haul does not send")
            case 530: return failLogin(reply, nil)
            default: return unexpected(reply, after: "USER")
            }
        case .password:
            switch reply.code {
            case 230, 202: return afterLogin()
            case 332: return failLogin(reply, "asks for an account (ACCT), which Haul does not send")
            case 530: return failLogin(reply, nil)
            default: return unexpected(reply, after: "PASS")
            }
        case .protectionBuffer:
            guard reply.isCompletion else { return failTLS("\(host) refused PBSZ 0 (\(reply.shown))") }
            phase = .protection
            return [.send("PROT P")]
        case .protection:
            guard reply.isCompletion else {
                return failTLS("\(host) refused to protect the data connection (PROT P answered \(reply.shown))")
            }
            phase = .type
            return [.send("TYPE I")]
        case .type:
            guard reply.isCompletion else { return unexpected(reply, after: "TYPE I") }
            phase = .size
            return [.send("SIZE \(request.path)")]
        case .size:
            // 550 here can mean "no such file" or "not in this mode"; RETR will tell. Other refusals: no SIZE.
            size = reply.size
            phase = .modified
            return [.send("MDTM \(request.path)")]
        case .modified:
            modified = reply.modificationTime?.digits
            return chooseOffset()
        case .restart:
            // 350: the server will start there. Anything else: it cannot; the whole file follows, as an HTTP server
            // that ignores Range would send it.
            if reply.code != 350 { offset = 0 }
            return openPassive()
        case .extendedPassive:
            if let port = reply.extendedPassivePort {
                phase = .connectingData
                return [.connectData(port: port)]
            }
            // 500/501/502: the server does not know EPSV; 522: not for this network protocol. PASV may still work.
            guard !triedPlainPassive else { return unexpected(reply, after: "EPSV") }
            triedPlainPassive = true
            phase = .passive
            return [.send("PASV")]
        case .passive:
            guard let address = reply.passiveAddress else {
                return unexpected(reply, after: "PASV")
            }
            // The address in the reply is not used: servers behind NAT name a private one, and a hostile server
            // could point the data connection anywhere (curl's --ftp-skip-pasv-ip, its default). Only the port.
            phase = .connectingData
            return [.connectData(port: address.port)]
        case .connectingData:
            return unexpected(reply, after: "opening the data connection")
        case .retrieve:
            if reply.isPreliminary {
                phase = .transferring
                return [.respond(answer, limit: limit)]
            }
            if reply.code == 550 {
                phase = .done
                return [
                    .fail(
                        DownloadError(
                            .httpStatus, "\(host) has no file \(request.path) (\(reply.shown))", status: 404,
                            isRetryable: false))
                ]
            }
            return unexpected(reply, after: "RETR")
        case .transferring:
            phase = .done
            if reply.isCompletion { return [.transferConfirmed] }
            if reply.code == 522 {
                // RFC 4217 §10: the data connection's TLS failed. vsftpd says "session reuse required": it wants the
                // data connection to resume the control connection's TLS session, which Haul's TLS cannot do.
                let reuse = reply.text.lowercased().contains("reuse")
                return failTLS(
                    "\(host) refused the protected data connection (\(reply.shown))"
                        + (reuse
                            ? "; it requires TLS session reuse, which Haul does not do (vsftpd: require_ssl_reuse=NO)"
                            : ""))
            }
            // 426 and 451 (aborted, local error) are transient; a 5xx will not change by retrying.
            return [
                .fail(
                    DownloadError(
                        reply.isTransient ? .connectionLost : .invalidResponse,
                        "\(host) ended the transfer with \(reply.shown)", isRetryable: reply.isTransient))
            ]
        case .done:
            return []
        }
    }

    /// TLS is up on the control connection.
    public mutating func tlsEstablished() -> [Action] {
        guard phase == .handshaking else { return [] }
        return sendUser()
    }

    /// The data connection is open (and protected, when the session is).
    public mutating func dataConnected() -> [Action] {
        guard phase == .connectingData else { return [] }
        phase = .retrieve
        return [.send("RETR \(request.path)")]
    }

    /// The engine's response for this transfer: `200` for the whole file, `206` with `Content-Range` for a part.
    /// `Accept-Ranges` only when the size is known (without it a part cannot be described).
    public var answer: ResponseHead {
        var headers: [(name: String, value: String)] = []
        if let entityTag { headers.append(("ETag", entityTag)) }
        guard let size else { return ResponseHead(status: 200, headers: headers) }
        headers.append(("Accept-Ranges", "bytes"))
        let last = min(request.end ?? (size - 1), size - 1)
        if offset == 0, request.end == nil || last == size - 1 {
            headers.append(("Content-Length", String(size)))
            return ResponseHead(status: 200, headers: headers)
        }
        if offset == 0, request.start != 0 {
            // REST refused or the file changed: the whole file, as a 200.
            headers.append(("Content-Length", String(size)))
            return ResponseHead(status: 200, headers: headers)
        }
        headers.append(("Content-Range", "bytes \(offset)-\(last)/\(size)"))
        headers.append(("Content-Length", String(last - offset + 1)))
        return ResponseHead(status: 206, headers: headers)
    }

    /// How many bytes of the data connection the answer covers, nil for all of them.
    var limit: Int64? {
        guard let size else { return nil }
        let head = answer
        guard head.status == 206 else { return nil }
        return min(request.end ?? (size - 1), size - 1) - offset + 1
    }

    private mutating func sendUser() -> [Action] {
        phase = .user
        return [.send("USER \(request.user)")]
    }

    private mutating func afterLogin() -> [Action] {
        if request.security != .plain {
            // RFC 4217 §9: PBSZ 0 then PROT P, so that the data connection is protected as well.
            phase = .protectionBuffer
            return [.send("PBSZ 0")]
        }
        phase = .type
        return [.send("TYPE I")]
    }

    private mutating func chooseOffset() -> [Action] {
        offset = request.start
        if let ifRange = request.ifRange, ifRange != entityTag {
            // The file is not the one the part file holds: all of the new one, from 0.
            offset = 0
        } else if let size, offset > 0, offset >= size {
            phase = .done
            return [
                .respondWithoutBody(
                    ResponseHead(
                        status: 416,
                        headers: [("Content-Range", "bytes */\(size)")] + (entityTag.map { [("ETag", $0)] } ?? [])))
            ]
        }
        if size == nil { offset = 0 }
        guard offset > 0 else { return openPassive() }
        phase = .restart
        return [.send("REST \(offset)")]
    }

    private mutating func openPassive() -> [Action] {
        phase = .extendedPassive
        return [.send("EPSV")]
    }

    private mutating func failLogin(_ reply: FTPReply, _ detail: String?) -> [Action] {
        phase = .done
        let who = request.user == "anonymous" ? "anonymous login" : "the credentials of \(request.user)"
        let text = reply.text.lowercased()
        let hint =
            request.security == .plain && ["encrypt", "tls", "ssl"].contains(where: text.contains)
            ? "; it wants TLS: use ftpes:// (AUTH TLS) or ftps://"
            : request.user == "anonymous"
                ? "; give credentials with --user NAME[:PASSWORD], in the URL or in ~/.netrc" : ""
        return [
            .fail(
                DownloadError(
                    .httpStatus,
                    "\(host) refused \(detail == nil ? who : "\(who): it \(detail!)") (\(reply.shown))\(hint)",
                    status: 401, isRetryable: false))
        ]
    }

    private mutating func failTLS(_ message: String) -> [Action] {
        phase = .done
        return [.fail(DownloadError(.tls, message, isRetryable: false))]
    }

    private mutating func unexpected(_ reply: FTPReply, after step: String) -> [Action] {
        phase = .done
        // 4xx are transient by definition (RFC 959 §4.2); 5xx are permanent.
        let error = DownloadError(
            reply.isTransient ? .connectionLost : .invalidResponse,
            "\(host) answered \(reply.shown) after \(step)", isRetryable: reply.isTransient)
        return [.fail(error)]
    }
}

/// How an `ftp://`, `ftpes://` or `ftps://` URL and the engine's request headers become a session's request.
extension FTPSession.Request {
    /// The security a URL scheme asks for: `ftp` none, `ftpes` `AUTH TLS` (explicit), `ftps` TLS from the start
    /// (implicit, as curl and FileZilla read `ftps://`); nil for another scheme.
    public static func security(scheme: String) -> FTPSession.Security? {
        switch scheme.lowercased() {
        case "ftp": .plain
        case "ftpes": .explicit
        case "ftps": .implicit
        default: nil
        }
    }

    /// The port a scheme uses when the URL names none: 990 for implicit FTPS, else 21.
    public static func defaultPort(_ security: FTPSession.Security) -> Int {
        security == .implicit ? 990 : 21
    }

    /// The request for `url` with the engine's `Range` and `If-Range` values and the login to use.
    ///
    /// The path is the URL's, percent-decoded, relative to the login directory (`ftp://host/dir/f` is `dir/f`, as
    /// curl's `--ftp-method nocwd` sends it; `ftp://host/%2Fsrv/f` is the absolute `/srv/f`); a `;type=` suffix
    /// (RFC 1738) is dropped, transfers are binary. A path with a line break or NUL in it, which would smuggle a
    /// second command onto the control connection, is refused.
    public init(
        url: URL, range: String?, ifRange: String?, user: String?, password: String?
    ) throws(DownloadError) {
        guard let security = Self.security(scheme: url.scheme ?? "") else {
            throw DownloadError(.invalidURL, "'\(url.absoluteString)' is not an FTP URL")
        }
        var encoded = url.path(percentEncoded: true)
        if let type = encoded.lastIndex(of: ";"), encoded[type...].lowercased().hasPrefix(";type=") {
            encoded = String(encoded[..<type])
        }
        if encoded.hasPrefix("/") { encoded.removeFirst() }
        guard let path = encoded.removingPercentEncoding, !path.isEmpty, !path.hasSuffix("/") else {
            throw DownloadError(.invalidURL, "'\(url.absoluteString)' names no file")
        }
        for text in [path, user ?? "", password ?? ""]
        where text.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) {
            throw DownloadError(
                .invalidURL, "'\(url.absoluteString)' has a line break in its path or login, which FTP cannot send")
        }
        let (start, end) = Self.byteRange(range) ?? (0, nil)
        let user = user.flatMap { $0.isEmpty ? nil : $0 } ?? "anonymous"
        self.init(
            path: path, user: user, password: password ?? (user == "anonymous" ? "haul@" : ""), security: security,
            start: start, end: end, ifRange: ifRange)
    }

    /// The first and last byte of a `Range: bytes=FIRST-[LAST]` value, as the engine writes it; nil for anything else.
    public static func byteRange(_ value: String?) -> (start: Int64, end: Int64?)? {
        guard let value, value.hasPrefix("bytes="), !value.contains(",") else { return nil }
        let bounds = value.dropFirst("bytes=".count).split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2, let start = ContentRange.number(bounds[0]) else { return nil }
        if bounds[1].isEmpty { return (start, nil) }
        guard let end = ContentRange.number(bounds[1]), end >= start else { return nil }
        return (start, end)
    }
}
