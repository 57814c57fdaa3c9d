import Foundation
import HaulCore
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// Reads requests and writes the server's raw answers.
final class FaultHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = ByteBuffer

    private let server: FaultServer
    private var head: HTTPRequestHead?
    private var stalled = false

    init(server: FaultServer) { self.server = server }

    func channelActive(context: ChannelHandlerContext) {
        server.register(context.channel)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        server.unregister(context.channel)
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head): self.head = head
        case .body: break
        case .end:
            guard let head, !stalled else { return }
            self.head = nil
            let path = String(head.uri.split(separator: "?", maxSplits: 1).first ?? "/")
            let answer = server.answer(path: path, headers: head.headers)
            let buffer = context.channel.allocator.buffer(bytes: answer.bytes)
            if let rate = answer.bytesPerSecond, answer.after == .keepAlive || answer.after == .close {
                stalled = true
                Self.writeThrottled(buffer, rate: rate, channel: context.channel) { [server] written in
                    server.recordWritten(answer.logIndex, bodyBytes: written - answer.headLength)
                }
                return
            }
            switch answer.after {
            case .keepAlive:
                context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
            case .close:
                let channel = context.channel
                context.writeAndFlush(wrapOutboundOut(buffer)).whenComplete { _ in channel.close(promise: nil) }
            case .hold(let rest):
                stalled = true
                let stall = answer.stall
                let channel = context.channel
                let rate = answer.bytesPerSecond
                // Held first, told after: a test that releases once told finds the answer held.
                let hold: @Sendable () -> Void = { [server] in
                    server.hold { Self.sendRest(rest, on: channel, rate: rate) }
                    if let stall { server.stalled(stall) }
                }
                if let rate {
                    Self.writeThrottled(buffer, rate: rate, channel: channel, closesAtEnd: false) { written in
                        if written == buffer.readableBytes { hold() }
                    }
                } else {
                    context.writeAndFlush(wrapOutboundOut(buffer)).whenSuccess { hold() }
                }
            case .stall:
                stalled = true
                let stall = answer.stall
                if answer.bytes.isEmpty {
                    if let stall { server.stalled(stall) }
                } else {
                    context.writeAndFlush(wrapOutboundOut(buffer)).whenSuccess { [server] in
                        if let stall { server.stalled(stall) }
                    }
                }
            }
        }
    }

    /// Sends what a held answer held back (at `rate` bytes a second, when given), then closes.
    private static func sendRest(_ rest: [UInt8], on channel: any Channel, rate: Int?) {
        channel.eventLoop.execute {
            let buffer = channel.allocator.buffer(bytes: rest)
            if let rate { return writeThrottled(buffer, rate: rate, channel: channel) { _ in } }
            channel.writeAndFlush(buffer).whenComplete { _ in channel.close(promise: nil) }
        }
    }

    /// Writes `buffer` in slices every 10 ms so that about `rate` bytes go out a second, then closes (one answer per
    /// connection, cut or whole; not with `closesAtEnd` false, for an answer held after it), and tells `ended` how
    /// many bytes went out before the end or the client's close.
    private static func writeThrottled(
        _ buffer: ByteBuffer, rate: Int, channel: any Channel, closesAtEnd: Bool = true,
        ended: @escaping (Int) -> Void
    ) {
        ThrottledWrite(
            remaining: buffer, slice: max(1, rate / 100), channel: channel, closesAtEnd: closesAtEnd, ended: ended
        ).next()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// One throttled write's state, touched only on its channel's event loop (each slice is scheduled there).
private final class ThrottledWrite: @unchecked Sendable {
    private var remaining: ByteBuffer
    private var written = 0
    private let slice: Int
    private let channel: any Channel
    private let closesAtEnd: Bool
    private let ended: (Int) -> Void

    init(remaining: ByteBuffer, slice: Int, channel: any Channel, closesAtEnd: Bool, ended: @escaping (Int) -> Void) {
        self.remaining = remaining
        self.slice = slice
        self.channel = channel
        self.closesAtEnd = closesAtEnd
        self.ended = ended
    }

    /// Writes the next slice and schedules the one after it in 10 ms; tells `ended` at the end or the client's close.
    func next() {
        guard channel.isActive, let piece = remaining.readSlice(length: min(slice, remaining.readableBytes)) else {
            ended(written)
            return
        }
        written += piece.readableBytes
        channel.writeAndFlush(piece, promise: nil)
        if remaining.readableBytes == 0 {
            ended(written)
            if closesAtEnd { channel.close(promise: nil) }
            return
        }
        channel.eventLoop.scheduleTask(in: .milliseconds(10)) { self.next() }
    }
}
