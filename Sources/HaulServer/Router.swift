import Foundation
import HTTPTypes
import Haul
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import NIOSSL
import OpenAPIHummingbird

/// The daemon's routes for one door: the API (generated from `openapi.yaml`), `/metrics`, and `/` (sign-in for the
/// browser, and later the web page). Shared by `haul serve` and the tests.
public func buildRouter(
    manager: DownloadManager,
    configuration: DaemonConfiguration,
    door: Door = .network,
    metrics: DaemonMetrics = DaemonMetrics(),
    peerUID: @escaping @Sendable (any Channel) async -> UInt32? = PeerMiddleware.socketPeerUID
) throws -> Router<HaulRequestContext> {
    let router = Router(context: HaulRequestContext.self)
    let credentials = Credentials(token: configuration.token)
    router.add(middleware: ErrorMiddleware())
    switch door {
    case .network:
        router.add(middleware: HostMiddleware(names: configuration.hostNames))
        router.add(middleware: OriginMiddleware())
        router.add(middleware: AuthMiddleware(credentials: credentials))
    case .socket:
        router.add(middleware: PeerMiddleware(peerUID: peerUID))
    }
    let table = RouteTable(router: router)
    // The most frequent read first, past as few layers as possible.
    router.add(middleware: DownloadReadMiddleware(manager: manager))
    router.add(middleware: MethodMiddleware(table: table))
    router.add(middleware: ListBodyMiddleware())
    router.add(middleware: BodyMiddleware())
    let handler = APIHandler(manager: manager, configuration: configuration, door: door)
    // Compact JSON with slashes as they are: listing 20,000 downloads pretty-printed doubled the bytes to write.
    try handler.registerHandlers(
        on: table, serverURL: URL(string: "/api/v1")!,
        configuration: .init(dateTranscoder: APIDateTranscoder(), jsonEncodingOptions: [.withoutEscapingSlashes]))
    router.get("/metrics") { _, _ -> Response in
        let text = await metrics.render(manager: manager)
        return Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: text)))
    }
    router.get("/") { request, _ -> Response in
        SignIn.answer(request, credentials: credentials, secure: configuration.usesTLS)
    }
    return router
}

/// An HTTP application serving `router` at `address`, over TLS when `tls` is given. `onRunning` gets the bound
/// channel (its local address tells the port picked for port 0).
public func buildApplication(
    router: Router<HaulRequestContext>,
    address: BindAddress,
    tls: TLSConfiguration? = nil,
    logger: Logger,
    onRunning: @escaping @Sendable (any Channel) async -> Void = { _ in }
) throws -> some ApplicationProtocol {
    let server: HTTPServerBuilder = try tls.map { try .tls(.http1(), tlsConfiguration: $0) } ?? .http1()
    return Application(
        router: router, server: server, configuration: .init(address: address, serverName: "haul"),
        onServerRunning: onRunning, logger: logger)
}

/// `GET /`: signing in with the token from the URL that `haul serve` prints, and what a browser sees meanwhile.
enum SignIn {
    static func answer(_ request: Request, credentials: Credentials, secure: Bool) -> Response {
        if let token = request.uri.queryParameters.get("token") {
            guard credentials.isToken(token) else {
                return page(.unauthorized, signInForm(message: "That token is not this daemon's."))
            }
            var response = Response(status: .seeOther, headers: [.location: "/"])
            response.setCookie(
                Cookie(
                    name: Credentials.cookieName, value: credentials.session, path: "/", secure: secure,
                    httpOnly: true, sameSite: .strict))
            return response
        }
        if let session = request.cookies[Credentials.cookieName]?.value, credentials.isSession(session) {
            return page(
                .ok,
                """
                <h1>Haul</h1>
                <p>Signed in. The daemon's API is at <a href="/api/v1/downloads">/api/v1/downloads</a>, described by \
                <a href="/api/v1/openapi.yaml">/api/v1/openapi.yaml</a>; live events at \
                <a href="/api/v1/events">/api/v1/events</a>.</p>
                """)
        }
        return page(.ok, signInForm(message: nil))
    }

    private static func signInForm(message: String?) -> String {
        """
        <h1>Haul</h1>
        \(message.map { "<p role=\"alert\">\($0)</p>" } ?? "")
        <form method="get" action="/">
        <label for="token">Token</label>
        <input id="token" name="token" type="password" autocomplete="current-password" required>
        <button type="submit">Sign in</button>
        </form>
        <p>The token is in <code>serve.json</code> in Haul's state folder; <code>haul serve</code> prints a URL that \
        signs in at once.</p>
        """
    }

    private static func page(_ status: HTTPResponse.Status, _ body: String) -> Response {
        let html = """
            <!doctype html><html lang="en"><head><meta charset="utf-8">\
            <meta name="viewport" content="width=device-width, initial-scale=1"><title>Haul</title></head>\
            <body>\(body)</body></html>
            """
        return Response(
            status: status,
            headers: [.contentType: "text/html; charset=utf-8", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(string: html)))
    }
}
