import Foundation
import HTTPTypes
import Haul
import HaulAPI
import HaulWire
import Hummingbird
import HummingbirdCore
import NIOCore
import NIOHTTPTypes
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The network door's pipeline fast path for the two most frequent requests: reading one download
/// (`GET /api/v1/downloads/{id}`) and adding (`POST /api/v1/downloads`). It is not a second implementation: it
/// carries the request straight to the functions the router's route calls (`APIWire`, the operation's one handler and
/// HaulWire's codec), past the router's layers.
///
/// Through the router, a request crosses NIO's async channel, a task of its own, the router and its middleware, and
/// the async response writer, which costs more than the read itself. The `FastDoorHandler` sits in the channel's
/// pipeline after HTTP decoding and takes a request only when it is plainly one of these two and passes the network
/// door's checks (`NetworkDoor`: the same code as the middleware). Everything else goes on to the router unchanged,
/// and so does an add whose body `AddDownloadJSON` declines (the router reads it with the body middleware's checks),
/// a `Connection` header other than `keep-alive`, an `Expect` or `Upgrade` header, a body without `Content-Length`,
/// and a request the door refuses (the router answers its 401 or 403). The answers are the router's, byte for byte in
/// the body, with the same `Content-Type`, `Location`, `Date` and `Server`; `FastDoorTests` compares the two.
public struct FastDoor: Sendable {
    let door: NetworkDoor
    let wire: APIWire
    /// Where the answering tasks run: the event loop that read the request, as every request of the daemon.
    let executor: (any TaskExecutor)?
    /// How many requests the fast path answered (the tests tell which path answered by it).
    let answered = Tally()

    final class Tally: Sendable {
        let count = Atomic<Int>(0)
    }

    /// The fast path of the network door of a daemon with `manager` and `configuration`; its tasks prefer
    /// `executor`.
    public init(manager: DownloadManager, configuration: DaemonConfiguration, executor: (any TaskExecutor)? = nil) {
        door = NetworkDoor(names: configuration.hostNames, credentials: Credentials(token: configuration.token))
        wire = APIWire(api: APIHandler(manager: manager, configuration: configuration, door: .network))
        self.executor = executor
    }

    /// The body a fast add reads at most; a longer one (a list of many) goes to the router.
    static let bodyLimit = 64 << 10
    private static let readPrefix = "/api/v1/downloads/"

    /// A request the fast path takes.
    enum Route: Sendable {
        case read(DownloadID)
        case add
    }

    /// An answer, or nil to hand the request to the router.
    struct Answer: Sendable {
        var status: HTTPResponse.Status
        var location: String?
        var preferenceApplied: String?
        var contentType: String
        var body: [UInt8]
    }

    /// The route of a request the fast path may take, from its head alone; nil sends it to the router.
    func route(_ head: HTTPRequest) -> Route? {
        let fields = head.headerFields
        // A `Connection` header other than keep-alive (a close, an upgrade) is the router's to honour.
        guard fields[.connection].map({ $0.lowercased() == "keep-alive" }) ?? true, fields[.expect] == nil,
            fields[.upgrade] == nil,
            fields[.transferEncoding] == nil, let target = head.path, target.utf8.first == UInt8(ascii: "/"),
            !target.utf8.contains(UInt8(ascii: "?")), !target.utf8.contains(UInt8(ascii: "#")),
            DownloadJSON.isAccepted(fields[.accept])
        else { return nil }
        let route: Route
        switch head.method {
        case .get:
            guard target.hasPrefix(Self.readPrefix), fields[.contentLength] == nil || fields[.contentLength] == "0"
            else { return nil }
            let id = target.utf8.dropFirst(Self.readPrefix.utf8.count)
            guard !id.isEmpty, !id.contains(UInt8(ascii: "/")), !id.contains(UInt8(ascii: "%")) else { return nil }
            route = .read(DownloadID(String(Substring(id))))
        case .post:
            guard target == "/api/v1/downloads", let type = fields[.contentType], APIWire.isJSON(type),
                let length = fields[.contentLength].flatMap(Int.init), (1...Self.bodyLimit).contains(length)
            else { return nil }
            route = .add
        default:
            return nil
        }
        do { try door.check(head, path: target) } catch { return nil }
        return route
    }

    /// The answer to a request of `route` with `body`, through the operation's one implementation and HaulWire's
    /// codec (`APIWire`, as the router's route); nil hands the request to the router: a body `AddDownloadJSON`
    /// declines, which the router reads with the body middleware's checks.
    func answer(_ route: Route, head: HTTPRequest, body: ByteBuffer?) async -> Answer? {
        let fields = head.headerFields
        let answer: APIWire.Answer
        do {
            switch route {
            case .read(let id):
                answer = try await wire.getDownload(id: id.rawValue, accept: fields[.accept])
            case .add:
                guard let body, let parsed = body.withUnsafeReadableBytes({ AddDownloadJSON.parse($0) }) else {
                    return nil
                }
                let payload: Operations.AddDownloads.Input.Body.JsonPayload
                switch consume parsed {
                case .one(let item): payload = .AddDownload(item)
                case .list(let items): payload = .case2(items)
                }
                answer = try await wire.addDownloads(consume payload, accept: fields[.accept], prefer: fields[.prefer])
            }
        } catch {
            return Answer(status: error.status, contentType: "application/json", body: Array(error.body))
        }
        let bytes: [UInt8]
        switch answer.body {
        case .bytes(let written):
            bytes = written
        case .page(let ids, let nextCursor):
            // The full answer to a list small enough for this path (its body is at most `bodyLimit`).
            var written: [UInt8] = []
            let wire = wire
            try? await DownloadJSON.list(ids: ids, nextCursor: nextCursor) { chunk in
                await wire.downloads(chunk)
            } emit: { chunk in
                written += chunk
            }
            bytes = written
        }
        return Answer(
            status: answer.status, location: answer.location, preferenceApplied: answer.preferenceApplied,
            contentType: APIWire.Answer.contentType, body: bytes)
    }
}

/// The channel handler of the `FastDoor`, after HTTP decoding and before Hummingbird's async channel.
///
/// Requests on one connection are answered in order, as HTTP/1.1 asks (the pipeline has no pipelining assistance
/// with WebSocket upgrades enabled): while a request is being answered, here or by the router, whatever the client
/// sends after it waits in a queue, and the channel reads no more until the queue is empty.
final class FastDoorHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let door: FastDoor

    private enum State {
        case idle
        /// A request the router answers: its parts go on; the connection is idle again once both the request and
        /// the response ended.
        case passing(requestEnded: Bool, responseEnded: Bool)
        /// A fast request whose body is arriving.
        case reading(FastDoor.Route, HTTPRequest, ByteBuffer?)
        /// A fast request being answered.
        case answering
    }

    private enum Inbound {
        case part(HTTPRequestPart)
        case event(Any)
    }

    private var state = State.idle
    private var queue = CircularBuffer<Inbound>()
    private var readHeld = false
    private var isActive = true

    init(door: FastDoor) {
        self.door = door
    }

    /// Whether what arrives now must wait: a request ahead of it is still being answered.
    private var isBusy: Bool {
        switch state {
        case .answering: true
        case .passing(let requestEnded, let responseEnded): requestEnded && !responseEnded
        case .idle, .reading: false
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if isBusy || !queue.isEmpty {
            queue.append(.part(part))
            return
        }
        take(part, context: context)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // An end of input (a half-closed connection) reaches the router after the requests before it.
        if isBusy || !queue.isEmpty {
            queue.append(.event(event))
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        isActive = false
        queue.removeAll()
        context.fireChannelInactive()
    }

    func read(context: ChannelHandlerContext) {
        // Held only once something waits: a client that waits for each answer never stops the channel's reading
        // (each stop and start is an epoll_ctl).
        if !queue.isEmpty {
            readHeld = true
            return
        }
        context.read()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        context.write(data, promise: promise)
        guard case .end = unwrapOutboundIn(data), case .passing(let requestEnded, _) = state else { return }
        state = requestEnded ? .idle : .passing(requestEnded: false, responseEnded: true)
        if requestEnded {
            // Not from inside the router's write: the next request is taken once this call returned.
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.execute {
                let (handler, context) = bound.value
                handler.drain(context: context)
            }
        }
    }

    /// One part of a request, with nothing ahead of it.
    private func take(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        switch (state, part) {
        case (.idle, .head(let head)):
            if let route = door.route(head) {
                state = .reading(route, head, nil)
            } else {
                state = .passing(requestEnded: false, responseEnded: false)
                context.fireChannelRead(wrapInboundOut(part))
            }
        case (.reading(let route, let head, var body), .body(var chunk)):
            if body == nil {
                body = chunk
            } else {
                body!.writeBuffer(&chunk)
            }
            if body!.readableBytes > FastDoor.bodyLimit {
                // Never with a Content-Length within the limit (HTTP decoding frames the body by it); kept so that
                // what is held stays bounded whatever arrives. The router answers it.
                state = .passing(requestEnded: false, responseEnded: false)
                context.fireChannelRead(wrapInboundOut(.head(head)))
                context.fireChannelRead(wrapInboundOut(.body(body!)))
            } else {
                state = .reading(route, head, body)
            }
        case (.reading(let route, let head, let body), .end):
            state = .answering
            answer(route, head: head, body: body, context: context)
        case (.passing(_, let responseEnded), .end):
            state = responseEnded ? .idle : .passing(requestEnded: true, responseEnded: false)
            context.fireChannelRead(wrapInboundOut(part))
        default:
            // The rest of a request the router answers (or anything unexpected, which the router refuses).
            context.fireChannelRead(wrapInboundOut(part))
        }
    }

    private func answer(_ route: FastDoor.Route, head: HTTPRequest, body: ByteBuffer?, context: ChannelHandlerContext) {
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let loop = context.eventLoop
        let door = door
        Task(executorPreference: door.executor) {
            let answer = await door.answer(route, head: head, body: body)
            if loop.inEventLoop {
                let (handler, context) = bound.value
                handler.finish(answer, head: head, body: body, context: context)
            } else {
                loop.execute {
                    let (handler, context) = bound.value
                    handler.finish(answer, head: head, body: body, context: context)
                }
            }
        }
    }

    private func finish(
        _ answer: FastDoor.Answer?, head: HTTPRequest, body: ByteBuffer?, context: ChannelHandlerContext
    ) {
        guard isActive else { return }
        guard let answer else {
            // The router answers it, from its head.
            state = .passing(requestEnded: true, responseEnded: false)
            context.fireChannelRead(wrapInboundOut(.head(head)))
            if let body { context.fireChannelRead(wrapInboundOut(.body(body))) }
            context.fireChannelRead(wrapInboundOut(.end(nil)))
            context.fireChannelReadComplete()
            return
        }
        var fields = HTTPFields()
        fields.reserveCapacity(5)
        fields[.contentType] = answer.contentType
        if let location = answer.location { fields[.location] = location }
        if let applied = answer.preferenceApplied { fields[.preferenceApplied] = applied }
        fields[.contentLength] = String(answer.body.count)
        fields[.date] = HTTPDateNow.value
        fields[.server] = "haul"
        door.answered.count.add(1, ordering: .relaxed)
        context.write(wrapOutboundOut(.head(HTTPResponse(status: answer.status, headerFields: fields))), promise: nil)
        context.write(wrapOutboundOut(.body(context.channel.allocator.buffer(bytes: answer.body))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        state = .idle
        drain(context: context)
    }

    /// Takes what waited while a request was answered, up to the next request that must wait in turn; then lets
    /// the channel read again.
    private func drain(context: ChannelHandlerContext) {
        var forwarded = false
        while !isBusy, isActive, let next = queue.popFirst() {
            switch next {
            case .part(let part):
                take(part, context: context)
                forwarded = true
            case .event(let event):
                context.fireUserInboundEventTriggered(event)
            }
        }
        if forwarded { context.fireChannelReadComplete() }
        if queue.isEmpty, readHeld {
            readHeld = false
            context.read()
        }
    }
}

/// The `Date` header's value for now, made once a second.
enum HTTPDateNow {
    private static let cache = Mutex<(second: Int, value: String)>((-1, ""))

    static var value: String {
        let now = time(nil)
        return cache.withLock { cache in
            if cache.second == now { return cache.value }
            var parts = tm()
            var seconds = now
            gmtime_r(&seconds, &parts)
            let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
            let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
            func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
            let text =
                "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) "
                + "\(parts.tm_year + 1900) \(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
            cache = (now, text)
            return text
        }
    }
}
