import Crypto
import Foundation
import HTTPTypes
import Haul
import HaulAPI
import HaulCore
import HaulWire
import Hummingbird
import HummingbirdWebSocket
import NIOCore
import OpenAPIHummingbird
import OpenAPIRuntime
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The request context of the daemon: Hummingbird's, with the connection (for the Unix socket's peer check).
public struct HaulRequestContext: RequestContext, WebSocketRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The connection the request came on.
    public let channel: any Channel
    /// The WebSocket handler a `/jsonrpc` upgrade hands to the server.
    public let webSocket: WebSocketHandlerReference<HaulRequestContext>

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
        webSocket = .init()
    }

    /// The API takes lists of thousands of downloads: 8 MiB, as the body middleware enforces.
    public var maxUploadSize: Int { BodyMiddleware.limit }
}

extension APIError {
    /// The error as a response.
    var response: Response {
        Response(
            status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(data: body))
        )
    }

    /// The answer for an error Hummingbird or a middleware raised.
    static func from(http error: any Error) -> APIError {
        if let error = error as? APIError { return error }
        if let error = error as? any HTTPResponseError {
            switch error.status {
            case .contentTooLarge:
                return APIError(.contentTooLarge, "payloadTooLarge", "the body is over \(BodyMiddleware.limit) bytes")
            case .notFound:
                return APIError(.notFound, "notFound", "no such path")
            case .methodNotAllowed:
                return APIError(.methodNotAllowed, "methodNotAllowed", "this path does not take that method")
            default:
                return APIError(error.status, "badRequest", "\(error)")
            }
        }
        return APIError.from(error, body: nil)
    }

    /// The answer for any error, with the request's body known (to tell a list from an object).
    static func from(any error: any Error, body: ByteBuffer?) -> APIError {
        if error is APIError || error is DownloadError || error is ServerError || error is DecodingError {
            return from(error, body: body)
        }
        return from(http: error)
    }
}

/// Outermost: every error a request meets becomes `{"error": {...}}` with the right status, never a bare 500.
struct ErrorMiddleware: RouterMiddleware {
    typealias Context = HaulRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        do {
            var response = try await next(request, context)
            // The generated code writes header values percent-encoded as URI components; a Location is a path.
            if let location = response.headers[.location], location.hasPrefix("%2F") {
                response.headers[.location] = location.removingPercentEncoding ?? location
            }
            return response
        } catch {
            let answer = APIError.from(http: error)
            if answer.status == .internalServerError {
                context.logger.error("\(request.method) \(request.uri.path): \(answer.message)")
            }
            return answer.response
        }
    }
}

/// Reads a request's body (at most 8 MiB: 413 beyond) before the handlers, which take it from the request, and keeps
/// it for describing a decoding error of a generated route.
struct BodyMiddleware: RouterMiddleware {
    typealias Context = HaulRequestContext
    static let limit = APILimits.requestBody

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        guard request.method.changesState else { return try await next(request, context) }
        if let length = request.headers[.contentLength].flatMap(Int.init), length > Self.limit {
            throw APIError(
                .contentTooLarge, "payloadTooLarge",
                "the body is \(length) bytes; a request takes at most \(Self.limit) (8 MiB): send a longer list in parts"
            )
        }
        var request = request
        let buffer: ByteBuffer
        do { buffer = try await request.collectBody(upTo: Self.limit) } catch {
            throw APIError(
                .contentTooLarge, "payloadTooLarge",
                "the body is over \(Self.limit) bytes (8 MiB), the most a request takes: send a longer list in parts")
        }
        do {
            return try await next(request, context)
        } catch let error as HTTPError {
            // The router's own (no route): the outer middleware answer those.
            throw error
        } catch {
            // Described here, where the body is known (to tell a list from an object).
            return APIError.from(any: error, body: buffer).response
        }
    }
}

extension HTTPRequest.Method {
    /// POST, PUT, PATCH or DELETE: a method that may change the daemon's state.
    var changesState: Bool { self == .post || self == .put || self == .patch || self == .delete }
}

/// The network door's checks, in this order, in one layer (each layer of middleware costs every request a little):
///
/// - DNS rebinding: a request whose `Host` is not a loopback name or address, the listen address, or an allowed
///   name gets 403.
/// - CSRF: a POST, PATCH, PUT or DELETE, or a WebSocket upgrade (browsers let any page open one), whose `Origin` is
///   present and not the daemon's own gets 403.
/// - Every `/api` and `/metrics` request needs the token, as a bearer token or as the session cookie; else 401.
struct NetworkDoorMiddleware: RouterMiddleware {
    typealias Context = HaulRequestContext
    let door: NetworkDoor

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        try door.check(request.head, path: request.uri.path)
        return try await next(request, context)
    }
}

/// The checks of the network door (see `NetworkDoorMiddleware`), on a request's head; shared by the middleware and
/// the `FastDoorHandler`, which answers only requests they let in.
struct NetworkDoor: Sendable {
    let names: Set<String>
    let credentials: Credentials
    /// `Host` values accepted before, exactly as sent (a client sends the same one every time): one lookup instead
    /// of lowering and splitting it on every request. A few dozen at most.
    private let accepted = AcceptedHosts()

    init(names: Set<String>, credentials: Credentials) {
        self.names = names
        self.credentials = credentials
    }

    /// Throws the 403 or 401 the request gets at this door; returns when it may go on. `path` is the request
    /// target's path, as Hummingbird's `URI` reads it.
    func check(_ head: HTTPRequest, path: String) throws(APIError) {
        let host = head.authority ?? ""
        try checkHost(host)
        if head.method.changesState || head.headerFields[.upgrade] != nil, let origin = head.headerFields[.origin] {
            let own = ["http://" + host, "https://" + host].map { $0.lowercased() }
            guard own.contains(origin.lowercased()) else {
                throw APIError(
                    .forbidden, "forbiddenOrigin", "a request from the page at \(origin) may not change this daemon")
            }
        }
        if path.hasPrefix("/api/") || path == "/api" || path == "/metrics" { try authenticate(head.headerFields) }
    }

    private func checkHost(_ host: String) throws(APIError) {
        if accepted.set.withLock({ $0.contains(host) }) { return }
        guard names.contains(Self.name(of: host)) else {
            throw APIError(
                .forbidden, "forbiddenHost",
                "Host '\(host)' is not this daemon's name; start it with --allow-host NAME to answer to it")
        }
        accepted.set.withLock { if $0.count < 64 { $0.insert(host) } }
    }

    private func authenticate(_ fields: HTTPFields) throws(APIError) {
        if var authorization = fields[.authorization], authorization.withUTF8(credentials.isBearerToken) {
            return
        }
        if fields[.cookie] != nil, let session = Cookies(from: fields[values: .cookie])[Credentials.cookieName]?.value,
            credentials.isSession(session)
        {
            return
        }
        throw APIError(
            .unauthorized, "unauthorized",
            "send 'Authorization: Bearer TOKEN' (the token is in the state folder's serve.json) or open the URL "
                + "haul serve printed")
    }

    /// The host name of a `Host` value, without the port, lowercased (`[::1]:7165` gives `[::1]`).
    static func name(of host: String) -> String {
        let lowered = host.lowercased()
        if lowered.hasPrefix("[") { return lowered.split(separator: "]").first.map { $0 + "]" } ?? lowered }
        return lowered.split(separator: ":", maxSplits: 1).first.map(String.init) ?? lowered
    }
}

/// The `Host` values a `NetworkDoor` accepted.
private final class AcceptedHosts: Sendable {
    let set = Mutex<Set<String>>([])
}

/// The Unix socket: a request is served only when the process at the other end runs as this daemon's user.
public struct PeerMiddleware: RouterMiddleware {
    public typealias Context = HaulRequestContext
    let peerUID: @Sendable (any Channel) async -> UInt32?

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        let uid = await peerUID(context.channel)
        guard let uid, uid == getuid() else {
            throw APIError(
                .forbidden, "forbiddenPeer",
                "this socket serves user \(getuid()) only, not \(uid.map(String.init) ?? "an unknown user")")
        }
        return try await next(request, context)
    }

    /// The user id of the process at the other end of a Unix socket (`SO_PEERCRED`), nil when it cannot be read.
    @Sendable public static func socketPeerUID(_ channel: any Channel) async -> UInt32? {
        guard let provider = channel as? any SocketOptionProvider else { return nil }
        do {
            let credentials: PeerCredentials = try await provider.unsafeGetSocketOption(
                level: SocketOptionLevel(SOL_SOCKET), name: PeerCredentials.option
            ).get()
            return credentials.uid
        } catch {
            return nil
        }
    }
}

/// Linux's `struct ucred`, which Swift's Glibc module does not export (it is behind `_GNU_SOURCE`).
struct PeerCredentials: Sendable {
    var pid: Int32
    var uid: UInt32
    var gid: UInt32

    /// `SO_PEERCRED` (asm-generic/socket.h; the same on x86_64 and arm64).
    static let option: SocketOptionName = 17
}

/// The token and the session value derived from it, compared in constant time.
public struct Credentials: Sendable {
    /// The session cookie's name.
    public static let cookieName = "haul_session"
    let token: [UInt8]
    /// The cookie's value: the SHA-256 of the token, so the token itself never sits in a cookie.
    public let session: String

    /// Credentials for `token`.
    public init(token: String) {
        self.token = Array(token.utf8)
        session = SHA256.hash(data: Array(token.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    func isToken(_ candidate: String) -> Bool { Self.equal(Array(candidate.utf8), token) }

    /// Whether an `Authorization` value is `Bearer` (any case) and the token, with spaces or tabs around it. Read on
    /// the value's bytes: every request of a client that sends its token carries it.
    func isBearerToken(_ value: UnsafeBufferPointer<UInt8>) -> Bool {
        let scheme = "bearer ".utf8
        guard value.count > scheme.count, value[..<scheme.count].equalsIgnoringASCIICase(scheme) else { return false }
        return Self.equal(value[scheme.count...].trimmingHTTPSpace, token)
    }
    func isSession(_ candidate: String) -> Bool { Self.equal(Array(candidate.utf8), Array(session.utf8)) }

    /// Compares without stopping at the first difference, so the time taken does not tell how much matched.
    static func equal(_ lhs: some RandomAccessCollection<UInt8>, _ rhs: [UInt8]) -> Bool {
        var difference = UInt8(lhs.count == rhs.count ? 0 : 1)
        let count = max(lhs.count, rhs.count)
        for index in 0..<count {
            let a = index < lhs.count ? lhs[lhs.index(lhs.startIndex, offsetBy: index)] : 0
            let b = index < rhs.count ? rhs[index] : 0
            difference |= a ^ b
        }
        return difference == 0
    }
}

/// The API's routes as the generated code registers them, recorded on their way to the router: which methods each
/// path takes, so that another method gets 405 with `Allow` instead of 404. The three operations `APIWire` serves
/// are registered with its codec in place of the generated one; every other with the generated code.
final class RouteTable: ServerTransport, @unchecked Sendable {
    private let router: Router<HaulRequestContext>
    private let wire: APIWire
    private(set) var routes: [(template: [Substring], methods: Set<HTTPRequest.Method>)] = []

    init(router: Router<HaulRequestContext>, wire: APIWire) {
        self.router = router
        self.wire = wire
    }

    func register(
        _ handler:
            @Sendable @escaping (HTTPRequest, HTTPBody?, ServerRequestMetadata) async throws -> (
                HTTPResponse, HTTPBody?
            ),
        method: HTTPRequest.Method,
        path: String
    ) throws {
        let template = path.split(separator: "/")
        if let index = routes.firstIndex(where: { $0.template == template }) {
            routes[index].methods.insert(method)
        } else {
            routes.append((template, [method]))
        }
        if wire.register(method, path, on: router) { return }
        router.register(handler, method: method, path: path)
    }

    /// The methods the path takes, nil when it is not an API path.
    func methods(for path: String) -> Set<HTTPRequest.Method>? {
        let segments = path.split(separator: "/")
        return routes.first { route in
            route.template.count == segments.count
                && zip(route.template, segments).allSatisfy { $0.hasPrefix("{") || $0 == $1 }
        }?.methods
    }
}

/// A method a path does not take: 405 with the methods it does take in `Allow`.
struct MethodMiddleware: RouterMiddleware {
    typealias Context = HaulRequestContext
    let table: RouteTable

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            // Only a request no route took: is it a path the API has, with another method?
            guard let methods = table.methods(for: request.uri.path), !methods.contains(request.method) else {
                throw error
            }
            var response = APIError(
                .methodNotAllowed, "methodNotAllowed",
                "\(request.uri.path) does not take \(request.method); it takes "
                    + methods.map(\.rawValue).sorted().joined(separator: ", ")
            ).response
            response.headers[.allow] = methods.map(\.rawValue).sorted().joined(separator: ", ")
            return response
        }
    }
}
