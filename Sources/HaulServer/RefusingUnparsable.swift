import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOHTTP1

/// The daemon's HTTP/1 channel (WebSocket upgrades included), answering a first request that is not HTTP with
/// `400 Bad Request` and closing, as nginx does. Until the first request's head is read, the upgrade handler of the
/// channel decides whether it is a WebSocket upgrade, and a parse error then reached no one: the connection stayed
/// open and silent until the client gave up (a TLS client at a plain daemon waited out its handshake timeout). After
/// the first request, the HTTP server answers parse errors itself.
///
/// Served over TLS (`servesTLS`, inside the TLS channel), a connection that starts with plain HTTP is told so in plain
/// HTTP, as nginx tells it, instead of being closed without a word (`PlainHTTPAtTLS`).
struct RefusingUnparsable: ServerChildChannel {
    let servesTLS: Bool
    let inner: HTTP1WebSocketUpgradeChannel

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<HTTP1WebSocketUpgradeChannel.Value> {
        inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
            // Behind the upgrade handler: what it passes on (a request it does not upgrade) marks a request read.
            try channel.pipeline.syncOperations.addHandler(UnparsableFirstRequest())
            // Before the TLS handler, which the TLS channel added before this setup ran.
            if servesTLS { try channel.pipeline.syncOperations.addHandler(PlainHTTPAtTLS(), position: .first) }
            return value
        }
    }

    func handle(value: HTTP1WebSocketUpgradeChannel.Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }
}

/// Answers an HTTP parse error that comes before any request was read with 400 and closes the connection; passes
/// everything else on, and leaves the pipeline with the first request.
final class UnparsableFirstRequest: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    typealias OutboundOut = HTTPServerResponsePart

    private var hasAnswered = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.fireChannelRead(data)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard !hasAnswered, error is HTTPParserError else {
            context.fireErrorCaught(error)
            return
        }
        hasAnswered = true
        let head = HTTPResponseHead(
            version: .http1_1, status: .badRequest, headers: ["Connection": "close", "Content-Length": "0"])
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }
}

/// The first handler of a TLS connection: when its first bytes are a letter (an HTTP method) rather than a TLS record
/// (`0x16`, a handshake), answers in plain HTTP that this address speaks HTTPS, and closes (what else arrives before
/// the close is dropped). Otherwise removes itself after the first read.
final class PlainHTTPAtTLS: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private var hasAnswered = false

    static let answer: String = {
        let text = "This is haul serve over HTTPS: ask for https:// at this address.\n"
        return "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
            + "Content-Length: \(text.utf8.count)\r\n\r\n" + text
    }()

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !hasAnswered else { return }
        let bytes = unwrapInboundIn(data)
        guard let first = bytes.getInteger(at: bytes.readerIndex, as: UInt8.self), (0x41...0x5A).contains(first) else {
            context.fireChannelRead(data)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        hasAnswered = true
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: Self.answer))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}
