import Foundation
import HTTPTypes
import Haul
import HaulWire
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOFoundationCompat
import NIOSSL
import OpenAPIHummingbird

/// The daemon's routes for one door: the API (generated from `openapi.yaml`), aria2's JSON-RPC at `/jsonrpc` (HTTP
/// POST and WebSocket), `/metrics`, and the web page at `/` with its files and sign-in. Shared by `haul serve` and
/// the tests. `shutdown` stops the daemon (`aria2.shutdown`).
public func buildRouter(
    manager: DownloadManager,
    configuration: DaemonConfiguration,
    door: Door = .network,
    metrics: DaemonMetrics = DaemonMetrics(),
    peerUID: @escaping @Sendable (any Channel) async -> UInt32? = PeerMiddleware.socketPeerUID,
    shutdown: @escaping @Sendable () async -> Void = {}
) throws -> Router<HaulRequestContext> {
    let router = Router(context: HaulRequestContext.self)
    let credentials = Credentials(token: configuration.token)
    router.add(middleware: ErrorMiddleware())
    switch door {
    case .network:
        router.add(
            middleware: NetworkDoorMiddleware(
                door: NetworkDoor(names: configuration.hostNames, credentials: credentials)))
    case .socket:
        router.add(middleware: PeerMiddleware(peerUID: peerUID))
    }
    let handler = APIHandler(manager: manager, configuration: configuration, door: door)
    let table = RouteTable(router: router, wire: APIWire(api: handler))
    router.add(middleware: MethodMiddleware(table: table))
    router.add(middleware: BodyMiddleware())
    // Compact JSON with slashes as they are: listing 20,000 downloads pretty-printed doubled the bytes to write.
    try handler.registerHandlers(
        on: table, serverURL: URL(string: "/api/v1")!,
        configuration: .init(dateTranscoder: APIDateTranscoder(), jsonEncodingOptions: [.withoutEscapingSlashes]))
    let rpc = Aria2RPC(manager: manager, configuration: configuration, door: door, shutdown: shutdown)
    router.post("/jsonrpc") { request, _ -> Response in
        let answer = await rpc.respond(to: Data(buffer: try await APIWire.body(of: request)))
        return Response(
            status: answer.status, headers: [.contentType: "application/json-rpc"],
            body: .init(byteBuffer: ByteBuffer(data: answer.body)))
    }
    router.ws("/jsonrpc") { inbound, outbound, _ in
        try await rpc.serve(inbound: inbound, outbound: outbound)
    }
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

/// An HTTP application serving `router` at `address`, over TLS when `tls` is given, with WebSocket upgrades (for
/// `/jsonrpc`) through the same router, so they pass the same checks. `onRunning` gets the bound channel (its local
/// address tells the port picked for port 0). With `fastDoor` (the network door's), its two requests are answered
/// before the router (see `FastDoor`).
public func buildApplication(
    router: Router<HaulRequestContext>,
    address: BindAddress,
    tls: TLSConfiguration? = nil,
    fastDoor: FastDoor? = nil,
    logger: Logger,
    onRunning: @escaping @Sendable (any Channel) async -> Void = { _ in }
) throws -> some ApplicationProtocol {
    // A call of aria2's JSON-RPC arrives as one frame; a batch adding a few thousand URLs needs more than 16 KiB.
    let configuration = HTTP1WebSocketUpgradeChannel.Configuration(
        http1: .init(additionalChannelHandlers: fastDoor.map { [FastDoorHandler(door: $0)] } ?? []),
        ws: .init(maxFrameSize: Aria2RPC.messageLimit))
    let webSocketResponder = router.buildResponder()
    let http1 = HTTPServerBuilder { responder in
        RefusingUnparsable(
            servesTLS: tls != nil,
            inner: HTTP1WebSocketUpgradeChannel(
                responder: responder, webSocketResponder: webSocketResponder, configuration: configuration))
    }
    let server: HTTPServerBuilder = try tls.map { try .tls(http1, tlsConfiguration: $0) } ?? http1
    return Application(
        router: router, server: server, configuration: .init(address: address, serverName: "haul"),
        onServerRunning: onRunning, logger: logger)
}
