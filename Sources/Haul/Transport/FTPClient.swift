import AsyncAlgorithms
import Foundation
import HaulCore
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS

/// FTP for the engine: each request (a whole file, a resume, one segment) is one FTP session on SwiftNIO, driven by
/// `FTPSession`, and answered as an HTTP-like response so that the engine's resume rules, checkpoints, segments and
/// rate limits apply unchanged (see `FTPSession`).
///
/// Decisions:
/// - Passive mode only (`EPSV`, then `PASV`), binary; the data connection goes to the control connection's address,
///   never to the one a `PASV` reply names.
/// - FTP connects directly: `--proxy` with an `ftp://` URL is refused, and `ftp_proxy`/`all_proxy` are not read (an
///   HTTP proxy cannot carry FTP's second connection).
/// - Credentials: `--user`, the URL's, then `.netrc`'s entry for the host; else `anonymous`.
/// - FTPS protects the data connection with a new TLS session: servers that insist it resume the control
///   connection's session (vsftpd's `require_ssl_reuse`, on by default) refuse it, and the message says so.
enum FTPClient {
    /// Sends `request` (an `ftp://`, `ftpes://` or `ftps://` URL) and answers once the transfer has started.
    static func send(_ request: TransportRequest, environment: [String: String]) async throws -> TransportResponse {
        let url = request.url
        guard let security = FTPSession.Request.security(scheme: url.scheme ?? ""), let host = url.host,
            !host.isEmpty
        else {
            throw DownloadError(.invalidURL, "cannot fetch \(url.absoluteString)")
        }
        let port = url.port ?? FTPSession.Request.defaultPort(security)
        let shown = url.port.map { "\(host):\($0)" } ?? host
        if let proxy = request.network.proxy.proxy, !proxy.trimmingCharacters(in: .whitespaces).isEmpty {
            let exclusions =
                request.network.proxy.noProxy ?? environment["no_proxy"] ?? environment["NO_PROXY"] ?? ""
            if !NoProxyList(exclusions).matches(host: host) {
                throw DownloadError(
                    .invalidArgument,
                    "Haul does not send FTP through a proxy; \(url.absoluteString) needs a direct connection "
                        + "(--noproxy \(host), or --proxy \"\")")
            }
        }
        let credentials = try LiveTransport.credentials(
            for: url, network: request.network, isOwnHost: url.host?.lowercased() == request.credentialsHost)
        let ftpRequest = try FTPSession.Request(
            url: url, range: request.value("Range"), ifRange: request.value("If-Range"), user: credentials?.user,
            password: credentials?.password)
        let context: NIOSSLContext?
        if security == .plain {
            context = nil
        } else {
            let configuration =
                try LiveTransport.tlsConfiguration(request.tls, environment: environment)
                ?? TLSConfiguration.makeClientConfiguration()
            context = try NIOSSLContext(configuration: configuration)
        }
        let target = Target(
            host: host, port: port, shown: shown, serverName: IPAddress(host) == nil ? host : nil, tls: context,
            url: url)
        let body = AsyncThrowingChannel<ByteBuffer, any Error>()
        let head = MultiThreadedEventLoopGroup.singleton.any().makePromise(of: ResponseHead.self)
        let session = FTPSession(request: ftpRequest, host: shown)
        let task = Task { await run(session, target, head: head, body: body) }
        let answer = try await withTaskCancellationHandler {
            try await head.futureResult.get()
        } onCancel: {
            task.cancel()
        }
        return TransportResponse(head: answer, finalURL: url, body: FTPBody(channel: body, transfer: Transfer(task)))
    }

    /// Where a session connects, and how.
    struct Target: Sendable {
        var host: String
        var port: Int
        var shown: String
        var serverName: String?
        var tls: NIOSSLContext?
        var url: URL
    }

    /// The whole session: connect, log in, negotiate, answer `head`, then stream the data connection into `body`.
    private static func run(
        _ session: FTPSession, _ target: Target, head: EventLoopPromise<ResponseHead>,
        body: AsyncThrowingChannel<ByteBuffer, any Error>
    ) async {
        var session = session
        var responded = false
        do {
            let control = try await connectControl(target, implicitTLS: session.request.security == .implicit)
            try await control.executeThenClose { inbound, outbound in
                var replies = inbound.makeAsyncIterator()
                var pending: [FTPSession.Action] = []
                // Performs the actions that only talk to the server; returns the first that needs more.
                func nextAction() async throws -> FTPSession.Action {
                    while true {
                        if pending.isEmpty {
                            guard let reply = try await replies.next() else {
                                throw DownloadError(
                                    .connectionLost, "\(target.shown) closed the FTP control connection")
                            }
                            pending = session.received(reply)
                            continue
                        }
                        switch pending.removeFirst() {
                        case .send(let line):
                            try await outbound.write(ByteBuffer(string: line + "\r\n"))
                        case .startTLS:
                            guard let tls = target.tls else { throw DownloadError(.tls, "no TLS context") }
                            let channel = control.channel
                            // Nothing more is written until the handshake has ended, so a refused certificate is
                            // reported as such, not as the reset the server answers the alert with (which a
                            // command already queued behind the handshake would meet first).
                            let handshake = channel.eventLoop.makePromise(of: Void.self)
                            try await channel.eventLoop.submit {
                                let ssl = try NIOSSLClientHandler(context: tls, serverHostname: target.serverName)
                                try channel.pipeline.syncOperations.addHandler(ssl, position: .first)
                                try channel.pipeline.syncOperations.addHandler(
                                    TLSHandshakeWaiter(promise: handshake), position: .after(ssl))
                            }.get()
                            try await handshake.futureResult.get()
                            pending += session.tlsEstablished()
                        case let action:
                            return action
                        }
                    }
                }
                switch try await nextAction() {
                case .connectData(let port):
                    guard let address = control.channel.remoteAddress, let ip = address.ipAddress else {
                        throw DownloadError(.connectionLost, "\(target.shown) closed the FTP control connection")
                    }
                    let data = try await connectData(
                        try SocketAddress(ipAddress: ip, port: port), target,
                        protected: session.request.security != .plain)
                    try await data.executeThenClose { dataInbound, _ in
                        pending += session.dataConnected()
                        switch try await nextAction() {
                        case .respond(let answer, let limit):
                            responded = true
                            head.succeed(answer)
                            let ending = await stream(dataInbound, limit: limit, into: body)
                            if case .stopped = ending {
                                body.finish()
                                return
                            }
                            // The data connection ended or broke: the control connection's reply says whether all of
                            // the file came, or why not (a refused protection, an aborted transfer).
                            switch try await nextAction() {
                            case .transferConfirmed:
                                if case .broken(let error) = ending { throw error }
                                try? await outbound.write(ByteBuffer(string: "QUIT\r\n"))
                            case .fail(let error): throw error
                            default: throw unexpected(target)
                            }
                            body.finish()
                        case .fail(let error): throw error
                        default: throw unexpected(target)
                        }
                    }
                case .respondWithoutBody(let answer):
                    responded = true
                    head.succeed(answer)
                    body.finish()
                    try? await outbound.write(ByteBuffer(string: "QUIT\r\n"))
                case .fail(let error): throw error
                default: throw unexpected(target)
                }
            }
        } catch {
            let mapped = error is DownloadError ? error : LiveTransport.map(error, url: target.url)
            if responded { body.fail(mapped) } else { head.fail(mapped) }
        }
    }

    /// How the data connection's stream ended.
    private enum Ending {
        /// Haul stopped: the limit was reached, or the transfer was cancelled.
        case stopped
        /// The server closed it.
        case ended
        /// It failed with this error.
        case broken(any Error)
    }

    /// Streams the data connection into `body`, at most `limit` bytes.
    private static func stream(
        _ inbound: NIOAsyncChannelInboundStream<ByteBuffer>, limit: Int64?,
        into body: AsyncThrowingChannel<ByteBuffer, any Error>
    ) async -> Ending {
        var remaining = limit
        do {
            for try await chunk in inbound {
                var chunk = chunk
                if let left = remaining {
                    if Int64(chunk.readableBytes) >= left {
                        chunk = chunk.getSlice(at: chunk.readerIndex, length: Int(left)) ?? chunk
                        await body.send(chunk)
                        return .stopped
                    }
                    remaining = left - Int64(chunk.readableBytes)
                }
                await body.send(chunk)
                if Task.isCancelled { return .stopped }
            }
        } catch NIOSSLError.uncleanShutdown {
            // Servers commonly close a protected data connection without TLS's close_notify; the control reply
            // that follows (226 or an error) is what proves the transfer whole.
        } catch {
            return .broken(error)
        }
        return .ended
    }

    private static func unexpected(_ target: Target) -> DownloadError {
        DownloadError(.invalidResponse, "\(target.shown) answered out of order on the FTP control connection")
    }

    private static func connectControl(_ target: Target, implicitTLS: Bool) async throws
        -> NIOAsyncChannel<FTPReply, ByteBuffer>
    {
        try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(10))
            .connect(host: target.host, port: target.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    if implicitTLS, let tls = target.tls {
                        try pipeline.addHandler(
                            try NIOSSLClientHandler(context: tls, serverHostname: target.serverName))
                    }
                    try pipeline.addHandler(ByteToMessageHandler(FTPReplyDecoder()))
                    return try NIOAsyncChannel<FTPReply, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
    }

    private static func connectData(_ address: SocketAddress, _ target: Target, protected: Bool) async throws
        -> NIOAsyncChannel<ByteBuffer, Never>
    {
        try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(10))
            // Large reads, as for HTTP: fewer chunks to hand to the writing task; from 64 KiB, growing as reads fill.
            .channelOption(
                ChannelOptions.recvAllocator,
                value: AdaptiveRecvByteBufferAllocator(minimum: 64 * 1024, initial: 64 * 1024, maximum: 256 * 1024)
            )
            .connect(to: address) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if protected, let tls = target.tls {
                        try channel.pipeline.syncOperations.addHandler(
                            try NIOSSLClientHandler(context: tls, serverHostname: target.serverName))
                    }
                    return try NIOAsyncChannel<ByteBuffer, Never>(wrappingChannelSynchronously: channel)
                }
            }
    }
}

/// Completes its promise when the TLS handshake before it in the pipeline ends: with success, or with the first error
/// (NIOSSL reports a refused certificate before it closes the connection).
final class TLSHandshakeWaiter: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    private let promise: EventLoopPromise<Void>
    private var isDone = false

    init(promise: EventLoopPromise<Void>) { self.promise = promise }

    private func finish(_ result: Result<Void, any Error>) {
        guard !isDone else { return }
        isDone = true
        promise.completeWith(result)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent {
            finish(.success(()))
            context.pipeline.syncOperations.removeHandler(self, promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        finish(.failure(error))
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish(.failure(ChannelError.eof))
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        finish(.failure(ChannelError.eof))
    }
}

/// Cuts the control connection's bytes into `FTPReply`s.
struct FTPReplyDecoder: ByteToMessageDecoder {
    typealias InboundOut = FTPReply
    private var parser = FTPReplyParser()

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let bytes = buffer.readBytes(length: buffer.readableBytes), !bytes.isEmpty else { return .needMoreData }
        for reply in try parser.feed(bytes) { context.fireChannelRead(wrapInboundOut(reply)) }
        return .needMoreData
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws
        -> DecodingState
    {
        try decode(context: context, buffer: &buffer)
    }
}

/// The session's task: cancelled when the body is dropped, which closes both connections.
final class Transfer: Sendable {
    private let task: Task<Void, Never>

    init(_ task: Task<Void, Never>) { self.task = task }

    deinit { task.cancel() }
}

/// A transfer's bytes as the engine reads them.
struct FTPBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let channel: AsyncThrowingChannel<ByteBuffer, any Error>
    let transfer: Transfer

    func makeAsyncIterator() -> Iterator {
        Iterator(base: channel.makeAsyncIterator(), transfer: transfer)
    }

    struct Iterator: AsyncIteratorProtocol {
        var base: AsyncThrowingChannel<ByteBuffer, any Error>.Iterator
        let transfer: Transfer

        mutating func next() async throws -> ByteBuffer? {
            try await base.next()
        }
    }
}
