import AsyncHTTPClient
import Foundation
import HaulCore
import NIOCore
import NIOHTTP1
import NIOPosix

/// The real transport: AsyncHTTPClient with decompression off and redirects followed here, so the `Range` header
/// reaches the final target and the final URL is known (HOSTILE.md 16).
public final class LiveTransport: HTTPTransport {
    private let client: HTTPClient
    /// The longest chain of redirects followed.
    public let maximumRedirects: Int

    /// One client for the whole process, like `HTTPClient.shared`: it is never shut down, so a manager that is
    /// dropped without `shutdown()` cannot trip AsyncHTTPClient's deinit check, and connections are pooled across
    /// managers.
    private static let sharedClient: HTTPClient = {
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: .seconds(10)),
            decompression: .disabled
        )
        // Up to 16 connections per download and several downloads per host: AsyncHTTPClient's default of 8 per host
        // would queue a new segment's request until another segment ends.
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 64)
        // A refused connection fails at once; Haul's retry policy (and its wait for the network) owns the backoff.
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.httpVersion = .http1Only
        // Larger socket reads mean fewer body chunks, and so fewer hops between the event loop and the writing task:
        // a measured difference on fast links. The bound per read keeps memory flat.
        configuration.http1_1ConnectionDebugInitializer = { channel in
            channel.setOption(
                ChannelOptions.recvAllocator,
                value: AdaptiveRecvByteBufferAllocator(minimum: 64 * 1024, initial: 256 * 1024, maximum: 256 * 1024)
            ).flatMap {
                // The end of the server's stream is an event, not a close, so it can wait (see the handler).
                channel.setOption(ChannelOptions.allowRemoteHalfClosure, value: true)
            }.flatMap {
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(EndAfterDrainHandler(), position: .first)
                }
            }
        }
        return HTTPClient(
            eventLoopGroupProvider: .shared(MultiThreadedEventLoopGroup.singleton), configuration: configuration)
    }()

    /// A transport on the process-wide client.
    public init(maximumRedirects: Int = 10) {
        client = Self.sharedClient
        self.maximumRedirects = maximumRedirects
    }

    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        var url = request.url
        var headers = request.headers
        for _ in 0...maximumRedirects {
            let response = try await execute(url: url, headers: headers)
            let status = Int(response.status.code)
            guard [301, 302, 303, 307, 308].contains(status), let location = response.headers.first(name: "Location")
            else {
                let head = ResponseHead(
                    status: status,
                    headers: response.headers.map { (name: $0.name, value: $0.value) }
                )
                return TransportResponse(head: head, finalURL: url, body: response.body)
            }
            guard let next = URL(string: location, relativeTo: url)?.absoluteURL,
                let scheme = next.scheme?.lowercased(), scheme == "http" || scheme == "https"
            else {
                throw DownloadError(.tooManyRedirects, "redirect to an unusable Location '\(location)'")
            }
            if next.host?.lowercased() != url.host?.lowercased() {
                // Credentials are for the host they were given for, never for the one it redirects to.
                headers.removeAll { ["authorization", "cookie"].contains($0.name.lowercased()) }
            }
            // The redirect's own body is not wanted; dropping the response closes or drains it.
            url = next
        }
        throw DownloadError(.tooManyRedirects, "more than \(maximumRedirects) redirects from \(request.url)")
    }

    private func execute(url: URL, headers: [(name: String, value: String)]) async throws -> HTTPClientResponse {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = .GET
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        do {
            return try await client.execute(request, timeout: .hours(24 * 365))
        } catch {
            throw Self.map(error, url: url)
        }
    }

    /// Maps AsyncHTTPClient and NIO errors to `DownloadError`s: failures to connect are `connectionFailed`, anything
    /// later is `connectionLost`.
    static func map(_ error: any Error, url: URL) -> any Error {
        if error is DownloadError || error is CancellationError { return error }
        if let client = error as? HTTPClientError, client == .cancelled { return CancellationError() }
        let text = String(describing: error)
        let host = url.host ?? url.absoluteString
        if error is NIOConnectionError || text.contains("connectTimeout") || text.contains("connect(descriptor")
            || text.contains("Connection refused") || text.contains("connectionRefused")
            || text.contains("No address") || text.contains("resolve")
        {
            return DownloadError(.connectionFailed, "could not connect to \(host)", underlying: error)
        }
        if let client = error as? HTTPClientError,
            client == .invalidURL || client == .emptyHost
                || client == .unsupportedScheme(url.scheme ?? "")
        {
            return DownloadError(.invalidURL, "cannot fetch \(url.absoluteString)", underlying: error)
        }
        return DownloadError(.connectionLost, "connection to \(host) failed", underlying: error)
    }
}

/// Makes AsyncHTTPClient hand on every byte a connection read before the server ended it.
///
/// When a server closes mid-body, NIO reads everything up to the end of the stream at once, although AsyncHTTPClient
/// had stopped asking for bytes (its reader was behind). AsyncHTTPClient keeps the bytes its reader has not asked for
/// in a buffer of its own and passes them to the response's body only when the reader asks for more; the end of the
/// stream fails the request at once, and the buffer is dropped. With a server that cut every answer after 3 MiB, a
/// 16 MiB download fetched 16.8 to 20.1 MiB: each request resumed up to 825 KB before where the server had stopped.
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
