import NIOCore
import NIOHTTP1
import Synchronization

/// Tells when the connection of an answer whose body the engine left before its end is done with it.
///
/// AsyncHTTPClient closes such a connection when the body's reader goes away, on the connection's event loop, a
/// moment after the reader stopped; it says nothing of it to the reader. A limit of connections to a host
/// (`HostConnections`) must count the connection until then: were its slot freed when the reader stopped, the next
/// connection could open while the server still has the old one, one more than the limit. So each request carries a
/// token in a header of its own (`header`), which `ConnectionWatchHandler` takes out of the request in the
/// connection's pipeline, and the token is in flight until the connection finishes the answer or closes (`settled`).
final class ConnectionWatch: Sendable {
    static let shared = ConnectionWatch()

    /// The request header that carries a token to `ConnectionWatchHandler`; it never leaves the process.
    static let header = "X-Haul-Watch"

    private struct State {
        var lastToken: UInt64 = 0
        /// The requests sent and not yet settled, by token, each with whoever waits for it to settle: nearly always
        /// no one (only a reader that left an answer before its end waits), so nothing is made for a wait until one
        /// begins.
        var inFlight: [UInt64: [CheckedContinuation<Void, Never>]] = [:]
    }

    private let state = Mutex(State())

    /// A token for one request.
    func token() -> UInt64 {
        state.withLock { state in
            state.lastToken += 1
            return state.lastToken
        }
    }

    /// The request of `token` goes out.
    func began(_ token: UInt64) {
        state.withLock { $0.inFlight[token] = [] }
    }

    /// The connection of `token`'s request finished its answer or closed.
    func ended(_ token: UInt64) {
        for waiter in state.withLock({ $0.inFlight.removeValue(forKey: token) }) ?? [] { waiter.resume() }
    }

    /// Whether `token`'s request was sent and is not yet settled.
    func isInFlight(_ token: UInt64) -> Bool { state.withLock { $0.inFlight[token] != nil } }

    /// How many wait for `token`'s request to settle (for tests).
    func waiting(_ token: UInt64) -> Int { state.withLock { $0.inFlight[token]?.count ?? 0 } }

    /// Returns once `token`'s request is settled: at once when it is (or was never sent). Not cancellable: a
    /// cancelled task waits for the close it caused.
    func settled(_ token: UInt64) async {
        guard isInFlight(token) else { return }
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let waits = state.withLock { state in
                guard state.inFlight[token] != nil else { return false }
                state.inFlight[token]?.append(waiter)
                return true
            }
            // Settled meanwhile.
            if !waits { waiter.resume() }
        }
    }
}

/// Takes the token out of each request head (`ConnectionWatch.header`) and tells `ConnectionWatch` when the request
/// is settled: its answer ended, or its connection closed. Sits between AsyncHTTPClient's response decoder and its
/// connection handler, where requests and answers are HTTP parts; AsyncHTTPClient sends one request at a time on a
/// connection.
final class ConnectionWatchHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias InboundOut = HTTPClientResponsePart
    typealias OutboundIn = HTTPClientRequestPart
    typealias OutboundOut = HTTPClientRequestPart

    private let watch: ConnectionWatch
    private var inFlight: UInt64?

    init(watch: ConnectionWatch = .shared) { self.watch = watch }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .head(var head) = unwrapOutboundIn(data),
            let value = head.headers.first(name: ConnectionWatch.header)
        else {
            context.write(data, promise: promise)
            return
        }
        head.headers.remove(name: ConnectionWatch.header)
        settle()
        if let token = UInt64(value) {
            inFlight = token
            watch.began(token)
        }
        context.write(wrapOutboundOut(.head(head)), promise: promise)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .end = unwrapInboundIn(data) { settle() }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        settle()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        settle()
    }

    private func settle() {
        guard let token = inFlight else { return }
        inFlight = nil
        watch.ended(token)
    }
}
