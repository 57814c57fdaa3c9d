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

/// The daemon's routes for one door: the API (generated from `openapi.yaml`), `/metrics`, and the web page at `/`
/// with its files and sign-in. Shared by `haul serve` and the tests.
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
        router.add(middleware: NetworkDoorMiddleware(names: configuration.hostNames, credentials: credentials))
    case .socket:
        router.add(middleware: PeerMiddleware(peerUID: peerUID))
    }
    let table = RouteTable(router: router)
    let handler = APIHandler(manager: manager, configuration: configuration, door: door)
    // The most frequent read and write first, past as few layers as possible.
    router.add(middleware: DownloadReadMiddleware(manager: manager))
    router.add(middleware: AddDownloadMiddleware(handler: handler))
    router.add(middleware: MethodMiddleware(table: table))
    router.add(middleware: ListBodyMiddleware())
    router.add(middleware: BodyMiddleware())
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
    router.post("/") { request, _ -> Response in
        try await SignIn.answerForm(request, credentials: credentials, secure: configuration.usesTLS)
    }
    for path in WebAsset.all.keys where path != "/" {
        router.get(RouterPath(path)) { request, _ -> Response in WebAsset.all[path]!.response(to: request) }
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
