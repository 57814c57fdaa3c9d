import AsyncHTTPClient
import Crypto
import Foundation
import HaulCore
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSOCKS
import NIOSSL
import Synchronization

/// Makes AsyncHTTPClient hand on every byte a connection read before the server ended it.
///
/// When a server closes mid-body, NIO reads everything up to the end of the stream at once, although AsyncHTTPClient
/// had stopped asking for bytes (its reader was behind). AsyncHTTPClient keeps the bytes its reader has not asked for
/// in a buffer of its own and passes them to the response's body only when the reader asks for more; the end of the
/// stream fails the request at once, and the buffer is dropped: the next request would fetch those bytes again.
///
/// With remote half-closure allowed, the end of the server's stream arrives as an event (`inputClosed`) and the
/// channel stays open. This handler, first in the pipeline, holds that event while bytes may be buffered above: it
/// ends the read in progress and asks for more, as the channel would (AsyncHTTPClient passes such a request down only
/// once its buffer is empty and its reader wants bytes). When a request comes down, it ends a read again, so anything
/// left goes to the body, passes the event on (the response decoder then reports the short body) and closes the
/// channel, as NIO would have at the end of the stream. The body delivers every byte before its error.
final class EndAfterDrainHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// Bytes came up since the last end of a read.
    private var hasUnfinishedRead = false
    /// A request for bytes went down and none came up since: nothing is buffered above.
    private var isWaitingForBytes = false
    /// The server's stream ended and the event waits for the handlers above to take their bytes.
    private var isHoldingEnd = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        hasUnfinishedRead = true
        isWaitingForBytes = false
        context.fireChannelRead(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        hasUnfinishedRead = false
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let event = event as? ChannelEvent, event == .inputClosed else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        guard !isHoldingEnd else { return }
        if isWaitingForBytes {
            passEnd(context)
            return
        }
        isHoldingEnd = true
        if hasUnfinishedRead {
            hasUnfinishedRead = false
            context.fireChannelReadComplete()
        }
        // As the channel would after a read: ask for more, through the handlers above (they decide when).
        context.pipeline.read()
    }

    func read(context: ChannelHandlerContext) {
        if isHoldingEnd {
            isHoldingEnd = false
            passEnd(context)
            return
        }
        isWaitingForBytes = true
        context.read()
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        isHoldingEnd = false
        context.close(mode: mode, promise: promise)
    }

    /// Ends the read (what is buffered above goes to the body), tells the handlers above that the stream ended, and
    /// closes the channel.
    private func passEnd(_ context: ChannelHandlerContext) {
        context.fireChannelReadComplete()
        context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        context.close(promise: nil)
    }
}

/// Rewrites the request line of the plain-proxy route to the absolute URL (`GET http://host/path HTTP/1.1`) that an
/// HTTP proxy expects; every other request passes untouched.
final class ProxyTargetHandler: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = HTTPClientRequestPart
    typealias OutboundOut = HTTPClientRequestPart

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .head(var head) = unwrapOutboundIn(data),
            let target = head.headers.first(name: LiveTransport.proxyTargetHeader)
        else {
            context.write(data, promise: promise)
            return
        }
        head.headers.remove(name: LiveTransport.proxyTargetHeader)
        head.uri = target
        context.write(wrapOutboundOut(.head(head)), promise: promise)
    }
}

extension Sequence<UInt8> {
    /// Lower-case hex.
    var hexString: String {
        let digits = Array("0123456789abcdef".utf8)
        var bytes: [UInt8] = []
        for byte in self {
            bytes.append(digits[Int(byte >> 4)])
            bytes.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
