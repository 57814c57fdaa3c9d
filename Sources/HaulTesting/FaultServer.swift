import Foundation
import HaulCore
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// An in-process HTTP/1.1 server on a free loopback port whose answers can break HTTP on demand (HOSTILE.md 1–24).
/// Responses are written as raw bytes, so framing can be as wrong as a real server's.
public final class FaultServer: Sendable {
    /// A file the server serves, and the faults it applies per request.
    public struct Resource: Sendable {
        /// The file's bytes.
        public var body: [UInt8]
        /// The ETag header, sent as is (nil: none).
        public var etag: String?
        /// The Last-Modified header (nil: none).
        public var lastModified: String?
        /// The Date header (nil: none).
        public var date: String?
        /// Whether ranges are honoured and `Accept-Ranges: bytes` is sent.
        public var acceptsRanges: Bool
        /// Sent as `Accept-Ranges: none` when true.
        public var refusesRangesExplicitly: Bool
        /// The Content-Disposition header (nil: none).
        public var contentDisposition: String?
        /// The `Content-Type` of its answers (else `application/octet-stream`).
        public var contentType: String?
        /// Send 206 for a Range request even when If-Range does not match (a broken server).
        public var ignoresIfRange: Bool = false
        /// Limit the body to about this many bytes a second on each connection (nil: as fast as possible).
        public var bytesPerSecond: Int?
        /// The fault for the n-th request (0-based) to this resource, nil for a correct answer.
        public var fault: @Sendable (_ index: Int, _ request: RecordedRequest) -> Fault?

        /// A resource with a strong ETag, a strong Last-Modified and ranges honoured.
        public init(
            body: [UInt8],
            etag: String? = "\"v1\"",
            lastModified: String? = "Mon, 01 Jan 2024 00:00:00 GMT",
            date: String? = "Tue, 02 Jan 2024 00:00:00 GMT",
            acceptsRanges: Bool = true,
            refusesRangesExplicitly: Bool = false,
            contentDisposition: String? = nil,
            ignoresIfRange: Bool = false,
            bytesPerSecond: Int? = nil,
            fault: @escaping @Sendable (_ index: Int, _ request: RecordedRequest) -> Fault? = { _, _ in nil }
        ) {
            self.body = body
            self.etag = etag
            self.lastModified = lastModified
            self.date = date
            self.acceptsRanges = acceptsRanges
            self.refusesRangesExplicitly = refusesRangesExplicitly
            self.contentDisposition = contentDisposition
            self.ignoresIfRange = ignoresIfRange
            self.bytesPerSecond = bytesPerSecond
            self.fault = fault
        }
    }

    /// A way to answer wrongly.
    public enum Fault: Sendable, Equatable {
        /// Answer a Range request with 200 and the whole body.
        case ignoreRange
        /// Answer 206 whose Content-Range starts `shift` bytes away from the requested start.
        case wrongStart(shift: Int)
        /// Answer 206 with this Content-Range value (nil: no Content-Range at all); the body is the requested range.
        case partialWithContentRange(String?)
        /// Answer 206 with a Content-Range whose total is `delta` off.
        case wrongTotal(delta: Int)
        /// Answer with `multipart/byteranges` (boundary text in the body).
        case multipart
        /// Answer 206 even to a request without Range.
        case partialWithoutRange
        /// Answer this status with these headers and a short text body.
        case status(Int, headers: [String: String])
        /// Answer this status with this XML body (a presigned URL host's error document).
        case statusXML(Int, body: String)
        /// Answer 416 with this Content-Range (nil: none).
        case rangeNotSatisfiable(contentRange: String?)
        /// Send the head and this many body bytes, then close (Content-Length framing).
        case cut(afterBytes: Int)
        /// Use chunked framing, send this many body bytes, then close without the last chunk.
        case cutChunked(afterBytes: Int)
        /// Send the head and this many body bytes, then nothing, keeping the connection open.
        case stall(afterBytes: Int)
        /// Use chunked framing, send this many body bytes, then nothing, keeping the connection open.
        case stallChunked(afterBytes: Int)
        /// Send the head, then nothing.
        case stallBeforeHead
        /// Send the head and this many body bytes, then hold the rest back until `release()`; then send it and close.
        /// Told to `onStall` like a stall once the first bytes are out, so a test acts while the download surely runs.
        /// With the resource's `bytesPerSecond`, the bytes before the hold and the rest go at that rate.
        case hold(afterBytes: Int)
        /// Mark the body `Content-Encoding: gzip` (the bytes are the file's, gzipped by nobody).
        case gzipEncoding
        /// Send both Content-Length and chunked framing (chunked is the truth).
        case lengthAndChunked
        /// Send two different Content-Length headers.
        case conflictingLengths
        /// Send a negative Content-Length.
        case negativeLength
        /// Use chunked framing and send `extra` bytes more than the Content-Range announces.
        case longerThanAnnounced(extra: Int)
        /// Redirect (302) to another path on this server.
        case redirect(to: String)
    }

    /// One request as the server saw it, with the body bytes it sent back.
    public struct RecordedRequest: Sendable {
        /// The path.
        public var path: String
        /// The request headers, names lowercased.
        public var headers: [String: String]
        /// The status answered.
        public var status: Int = 0
        /// Body bytes sent in the answer.
        public var bodyBytesSent: Int = 0
        /// The fault applied, if any.
        public var fault: Fault?

        /// The Range header.
        public var range: String? { headers["range"] }
    }

    private struct State {
        var resources: [String: Resource] = [:]
        var counts: [String: Int] = [:]
        var log: [RecordedRequest] = []
        var openChannels: [ObjectIdentifier: any Channel] = [:]
        var peakOpen = 0
        var accepted = 0
    }

    /// An answer that went quiet (`stall`, `stallChunked`, `stallBeforeHead`, `hold`), told once its bytes are sent.
    public struct Stall: Sendable {
        /// The path asked for.
        public var path: String
        /// One past the file offset of the last body byte sent (nil: no body byte, the head was all).
        public var end: Int?
        /// The last body bytes sent (up to 16), to see them land in the client's file.
        public var tail: [UInt8]
    }

    private let state = Mutex(State())
    private let stallHandler = Mutex<(@Sendable (Stall) -> Void)?>(nil)
    private let held = Mutex<[@Sendable () -> Void]>([])
    private let channel = Mutex<(any Channel)?>(nil)
    /// The port the server listens on.
    public let port: Int

    private init(port: Int) { self.port = port }

    /// Starts a server on 127.0.0.1 with a free port (or `port` when given, to restart on the same port).
    public static func start(port: Int = 0) async throws -> FaultServer {
        let holder = Mutex<FaultServer?>(nil)
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    guard let server = holder.withLock({ $0 }) else { return }
                    try child.pipeline.syncOperations.addHandler(
                        ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes))
                    )
                    try child.pipeline.syncOperations.addHandler(FaultHandler(server: server))
                }
            }
        let listener = try await bootstrap.bind(host: "127.0.0.1", port: port).get()
        let server = FaultServer(port: listener.localAddress?.port ?? port)
        holder.withLock { $0 = server }
        server.channel.withLock { $0 = listener }
        return server
    }

    /// Stops listening and closes every open connection.
    public func stop() async {
        let listener = channel.withLock { $0 }
        try? await listener?.close()
        let open = state.withLock { Array($0.openChannels.values) }
        for channel in open { try? await channel.close() }
    }

    /// The URL of `path` on this server.
    public func url(_ path: String) -> URL {
        URL(string: "http://127.0.0.1:\(port)\(path.hasPrefix("/") ? path : "/" + path)")!
    }

    /// Serves `resource` at `path` (replacing what was there, as a changed file would).
    public func serve(_ path: String, _ resource: Resource) {
        state.withLock { $0.resources[path] = resource }
    }

    /// Every request so far, in order.
    public var requests: [RecordedRequest] { state.withLock { $0.log } }

    /// Has `handler` told of every answer that goes quiet, once its bytes are written to the socket (a test moves
    /// its idle clock then, instead of waiting out an idle timeout).
    public func onStall(_ handler: @escaping @Sendable (Stall) -> Void) {
        stallHandler.withLock { $0 = handler }
    }

    func stalled(_ stall: Stall) {
        stallHandler.withLock { $0 }?(stall)
    }

    /// Sends the rest of every answer held back so far (`Fault.hold`).
    public func release() {
        let all = held.withLock { held in
            defer { held.removeAll() }
            return held
        }
        for send in all { send() }
    }

    func hold(_ send: @escaping @Sendable () -> Void) {
        held.withLock { $0.append(send) }
    }

    /// Requests to `path`.
    public func requests(to path: String) -> [RecordedRequest] { requests.filter { $0.path == path } }

    /// Body bytes sent for `path` in all answers.
    public func bodyBytesSent(for path: String) -> Int { requests(to: path).reduce(0) { $0 + $1.bodyBytesSent } }

    // MARK: Serving

    func register(_ channel: any Channel) {
        state.withLock { state in
            state.openChannels[ObjectIdentifier(channel)] = channel
            state.peakOpen = max(state.peakOpen, state.openChannels.count)
            state.accepted += 1
        }
    }

    /// How many connections the server accepted since it started.
    public var acceptedConnections: Int { state.withLock { $0.accepted } }

    /// The most connections open at once since the server started (or since `resetPeakConnections`).
    public var peakConnections: Int { state.withLock { $0.peakOpen } }

    /// Starts counting the peak of open connections afresh.
    public func resetPeakConnections() {
        state.withLock { $0.peakOpen = $0.openChannels.count }
    }

    func unregister(_ channel: any Channel) {
        _ = state.withLock { $0.openChannels.removeValue(forKey: ObjectIdentifier(channel)) }
    }

    /// What to write for a request: the raw bytes and what to do after.
    struct Answer {
        var bytes: [UInt8]
        var after: After
        var bytesPerSecond: Int?
        /// Where the answer is in the log, and how many of `bytes` are the head (for counting what a throttled
        /// answer wrote before the client went away).
        var logIndex = -1
        var headLength = 0
        /// For an answer that stalls: what to tell of it.
        var stall: Stall?
        enum After: Equatable {
            case keepAlive, close, stall
            /// The rest of the answer, sent on `release()`.
            case hold([UInt8])
        }
    }

    /// A throttled answer ended after `bytes` bytes of its body went out (the client may close before the end).
    func recordWritten(_ logIndex: Int, bodyBytes: Int) {
        state.withLock { state in
            guard state.log.indices.contains(logIndex) else { return }
            state.log[logIndex].bodyBytesSent = min(state.log[logIndex].bodyBytesSent, max(0, bodyBytes))
        }
    }

    func answer(path: String, headers: HTTPHeaders) -> Answer {
        var recorded = RecordedRequest(
            path: path,
            headers: Dictionary(
                headers.map { ($0.name.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        )
        let (resource, index) = state.withLock { state -> (Resource?, Int) in
            let index = state.counts[path, default: 0]
            state.counts[path] = index + 1
            return (state.resources[path], index)
        }
        var answer: Answer
        if let resource {
            let fault = resource.fault(index, recorded)
            recorded.fault = fault
            answer = Self.build(resource, request: recorded, fault: fault, sent: &recorded)
            answer.bytesPerSecond = resource.bytesPerSecond
        } else {
            answer = Self.raw(
                status: 404, reason: "Not Found", headers: [("Content-Length", "9")], body: Array("not found".utf8))
            recorded.status = 404
        }
        if answer.after == .stall, answer.stall == nil {
            answer.stall = Stall(path: path, end: nil, tail: [])
        }
        answer.stall?.path = path
        let final = recorded
        answer.logIndex = state.withLock { state in
            state.log.append(final)
            return state.log.count - 1
        }
        answer.headLength = answer.bytes.count - final.bodyBytesSent
        return answer
    }

    private static func raw(
        status: Int, reason: String, headers: [(String, String)], body: [UInt8], after: Answer.After = .keepAlive
    ) -> Answer {
        var text = "HTTP/1.1 \(status) \(reason)\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        text += "\r\n"
        return Answer(bytes: Array(text.utf8) + body, after: after)
    }

    private static func chunked(_ body: ArraySlice<UInt8>, terminate: Bool) -> [UInt8] {
        var out: [UInt8] = []
        var index = body.startIndex
        while index < body.endIndex {
            let end = min(index + 16_384, body.endIndex)
            out += Array(String(end - index, radix: 16).utf8) + [13, 10] + body[index..<end] + [13, 10]
            index = end
        }
        if terminate { out += Array("0\r\n\r\n".utf8) }
        return out
    }

    // swiftlint:disable:next function_body_length cyclomatic_complexity
    private static func build(
        _ resource: Resource, request: RecordedRequest, fault: Fault?, sent: inout RecordedRequest
    ) -> Answer {
        let total = resource.body.count
        var headers: [(String, String)] = [("Content-Type", resource.contentType ?? "application/octet-stream")]
        if let date = resource.date { headers.append(("Date", date)) }
        if let etag = resource.etag { headers.append(("ETag", etag)) }
        if let lastModified = resource.lastModified { headers.append(("Last-Modified", lastModified)) }
        if resource.refusesRangesExplicitly {
            headers.append(("Accept-Ranges", "none"))
        } else if resource.acceptsRanges {
            headers.append(("Accept-Ranges", "bytes"))
        }
        if let disposition = resource.contentDisposition { headers.append(("Content-Disposition", disposition)) }
        // A throttled answer is the last on its connection (`writeThrottled` closes it): say so, as a server does,
        // or the client keeps the connection for its next request and finds it closed.
        if resource.bytesPerSecond != nil { headers.append(("Connection", "close")) }

        // If-Match (RFC 9110 §13.1.1): another version answers 412, without a body.
        if let wanted = request.headers["if-match"], wanted != "*", wanted != resource.etag {
            sent.status = 412
            return raw(
                status: 412, reason: "Precondition Failed", headers: headers + [("Content-Length", "0")], body: [])
        }
        // The requested range, honoured only when the resource accepts ranges and If-Range matches.
        var range: ClosedRange<Int>?
        var unsatisfiable = false
        if resource.acceptsRanges, let header = request.range, header.hasPrefix("bytes=") {
            let spec = header.dropFirst("bytes=".count).split(separator: "-", omittingEmptySubsequences: false)
            let ifRange = request.headers["if-range"]
            let matches =
                resource.ignoresIfRange || ifRange == nil || ifRange == resource.etag
                || (ifRange == resource.lastModified && resource.etag == nil)
            if matches, spec.count == 2, let first = Int(spec[0]) {
                let last = Int(spec[1]).map { min($0, total - 1) } ?? total - 1
                if first >= total { unsatisfiable = true } else if first <= last { range = first...last }
            }
        }

        switch fault {
        case .status(let status, let extra):
            sent.status = status
            let body = Array("status \(status)".utf8)
            return raw(
                status: status, reason: "Fault",
                headers: extra.map { ($0.key, $0.value) } + [("Content-Length", "\(body.count)")], body: body)
        case .statusXML(let status, let text):
            sent.status = status
            let body = Array(text.utf8)
            return raw(
                status: status, reason: "Fault",
                headers: [("Content-Type", "application/xml"), ("Content-Length", "\(body.count)")], body: body)
        case .rangeNotSatisfiable(let contentRange):
            sent.status = 416
            var extra = headers
            if let contentRange { extra.append(("Content-Range", contentRange)) }
            return raw(
                status: 416, reason: "Range Not Satisfiable", headers: extra + [("Content-Length", "0")], body: [])
        case .redirect(let target):
            sent.status = 302
            return raw(
                status: 302, reason: "Found", headers: [("Location", target), ("Content-Length", "0")], body: [])
        case .stallBeforeHead:
            return Answer(bytes: [], after: .stall)
        default:
            break
        }

        if unsatisfiable, fault == nil {
            sent.status = 416
            return raw(
                status: 416, reason: "Range Not Satisfiable",
                headers: headers + [("Content-Range", "bytes */\(total)"), ("Content-Length", "0")], body: [])
        }

        var status = 200
        var slice = resource.body[...]
        switch fault {
        case .ignoreRange:
            break
        case .partialWithoutRange:
            status = 206
            headers.append(("Content-Range", "bytes 0-\(total - 1)/\(total)"))
        case .wrongStart(let shift):
            let requested = range ?? 0...(total - 1)
            let first = max(0, min(total - 1, requested.lowerBound + shift))
            status = 206
            slice = resource.body[first...]
            headers.append(("Content-Range", "bytes \(first)-\(total - 1)/\(total)"))
        case .partialWithContentRange(let value):
            let requested = range ?? 0...(total - 1)
            status = 206
            slice = resource.body[requested]
            if let value { headers.append(("Content-Range", value)) }
        case .wrongTotal(let delta):
            let requested = range ?? 0...(total - 1)
            status = 206
            slice = resource.body[requested]
            headers.append(("Content-Range", "bytes \(requested.lowerBound)-\(requested.upperBound)/\(total + delta)"))
        case .multipart:
            let requested = range ?? 0...(total - 1)
            status = 206
            let boundary = "HAUL_BOUNDARY"
            let partHead =
                "--\(boundary)\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes \(requested.lowerBound)-\(requested.upperBound)/\(total)\r\n\r\n"
            let bodyBytes = Array(partHead.utf8) + resource.body[requested] + Array("\r\n--\(boundary)--\r\n".utf8)
            headers.removeAll { $0.0 == "Content-Type" }
            headers.append(("Content-Type", "multipart/byteranges; boundary=\(boundary)"))
            sent.status = 206
            sent.bodyBytesSent = bodyBytes.count
            return raw(
                status: 206, reason: "Partial Content", headers: headers + [("Content-Length", "\(bodyBytes.count)")],
                body: bodyBytes)
        default:
            if let range {
                status = 206
                slice = resource.body[range]
                headers.append(("Content-Range", "bytes \(range.lowerBound)-\(range.upperBound)/\(total)"))
            }
        }
        sent.status = status
        let reason = status == 206 ? "Partial Content" : "OK"
        if fault == .gzipEncoding { headers.append(("Content-Encoding", "gzip")) }

        switch fault {
        case .cut(let count):
            let sentBytes = slice.prefix(count)
            sent.bodyBytesSent = sentBytes.count
            return raw(
                status: status, reason: reason, headers: headers + [("Content-Length", "\(slice.count)")],
                body: Array(sentBytes), after: .close)
        case .cutChunked(let count):
            let sentBytes = slice.prefix(count)
            sent.bodyBytesSent = sentBytes.count
            return raw(
                status: status, reason: reason, headers: headers + [("Transfer-Encoding", "chunked")],
                body: chunked(sentBytes, terminate: false), after: .close)
        case .stallChunked(let count):
            let sentBytes = slice.prefix(count)
            sent.bodyBytesSent = sentBytes.count
            var answer = raw(
                status: status, reason: reason, headers: headers + [("Transfer-Encoding", "chunked")],
                body: chunked(sentBytes, terminate: false), after: .stall)
            answer.stall = Stall(path: "", end: sentBytes.endIndex, tail: Array(sentBytes.suffix(16)))
            return answer
        case .hold(let count):
            let sentBytes = slice.prefix(count)
            // Counted whole: the rest goes out on `release()`.
            sent.bodyBytesSent = slice.count
            var answer = raw(
                status: status, reason: reason, headers: headers + [("Content-Length", "\(slice.count)")],
                body: Array(sentBytes), after: .hold(Array(slice.dropFirst(count))))
            answer.stall = Stall(path: "", end: sentBytes.endIndex, tail: Array(sentBytes.suffix(16)))
            return answer
        case .stall(let count):
            let sentBytes = slice.prefix(count)
            sent.bodyBytesSent = sentBytes.count
            var answer = raw(
                status: status, reason: reason, headers: headers + [("Content-Length", "\(slice.count)")],
                body: Array(sentBytes), after: .stall)
            answer.stall = Stall(path: "", end: sentBytes.endIndex, tail: Array(sentBytes.suffix(16)))
            return answer
        case .lengthAndChunked:
            sent.bodyBytesSent = slice.count
            return raw(
                status: status, reason: reason,
                headers: headers + [("Content-Length", "\(slice.count / 2)"), ("Transfer-Encoding", "chunked")],
                body: chunked(slice, terminate: true))
        case .conflictingLengths:
            sent.bodyBytesSent = slice.count
            return raw(
                status: status, reason: reason,
                headers: headers + [("Content-Length", "\(slice.count)"), ("Content-Length", "\(slice.count + 1)")],
                body: Array(slice), after: .close)
        case .negativeLength:
            sent.bodyBytesSent = slice.count
            return raw(
                status: status, reason: reason, headers: headers + [("Content-Length", "-\(slice.count)")],
                body: Array(slice), after: .close)
        case .longerThanAnnounced(let extra):
            let bodyBytes = Array(slice) + [UInt8](repeating: 0x58, count: extra)
            sent.bodyBytesSent = bodyBytes.count
            return raw(
                status: status, reason: reason, headers: headers + [("Transfer-Encoding", "chunked")],
                body: chunked(bodyBytes[...], terminate: true))
        default:
            sent.bodyBytesSent = slice.count
            return raw(
                status: status, reason: reason, headers: headers + [("Content-Length", "\(slice.count)")],
                body: Array(slice))
        }
    }
}
