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
import Tracing

/// The real transport: AsyncHTTPClient with decompression off and redirects followed here, so the `Range` header
/// reaches the final target and the final URL is known (HOSTILE.md 16).
public final class LiveTransport: HTTPTransport {
    private let client: HTTPClient
    /// The longest chain of redirects followed.
    public let maximumRedirects: Int

    /// One client for the whole process, like `HTTPClient.shared`: it is never shut down, so a manager that is
    /// dropped without `shutdown()` cannot trip AsyncHTTPClient's deinit check, and connections are pooled across
    /// managers.
    private static let sharedClient = HTTPClient(
        eventLoopGroupProvider: .shared(MultiThreadedEventLoopGroup.singleton), configuration: baseConfiguration())

    /// Whether the clients may use HTTP/2 (`HAUL_HTTP_VERSION=2`, for the benchmark): then one connection carries
    /// several requests, and no request is watched (`ConnectionWatch`).
    static let usesHTTP2 = ProcessInfo.processInfo.environment["HAUL_HTTP_VERSION"] == "2"

    /// The configuration of every client of the process (the shared one and one per tunnelling proxy).
    static func baseConfiguration() -> HTTPClient.Configuration {
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
        // Spans only for a tracer the program bootstrapped: with the global no-op one, every request still built
        // its span's attributes (method, URL, sizes) for nothing.
        if InstrumentationSystem.tracer is NoOpTracer { configuration.tracing.tracer = nil }
        // HTTP/1.1: several connections per file mean several TCP connections, each with its own window; with
        // HTTP/2, AsyncHTTPClient multiplexes every request to a host onto one connection, and measured slower
        // (bench/http2.sh, README "Networks"). `HAUL_HTTP_VERSION=2` turns it on, for that benchmark.
        configuration.httpVersion = usesHTTP2 ? .automatic : .http1Only
        // Larger socket reads mean fewer body chunks, and so fewer hops between the event loop and the writing task:
        // a measured difference on fast links. The bound per read keeps memory flat. A connection starts at 64 KiB
        // and doubles after each read that fills its buffer: every buffer NIO's pool adds is copied once as it is
        // first written (the pool holds a second reference), so a connection that only ever reads a small file
        // must not pay for fresh 256 KiB buffers.
        configuration.http1_1ConnectionDebugInitializer = { channel in
            channel.setOption(
                ChannelOptions.recvAllocator,
                value: AdaptiveRecvByteBufferAllocator(minimum: 64 * 1024, initial: 64 * 1024, maximum: 256 * 1024)
            ).flatMap {
                // The end of the server's stream is an event, not a close, so it can wait (see the handler).
                channel.setOption(ChannelOptions.allowRemoteHalfClosure, value: true)
            }.flatMap {
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    try pipeline.addHandler(EndAfterDrainHandler(), position: .first)
                    // Between AsyncHTTPClient's request writer and the encoder: the plain-proxy route's target.
                    let encoder = try pipeline.handler(type: HTTPRequestEncoder.self)
                    try pipeline.addHandler(ProxyTargetHandler(), position: .after(encoder))
                    // Where requests and answers are HTTP parts: when each request is settled.
                    let decoder = try pipeline.handler(type: ByteToMessageHandler<HTTPResponseDecoder>.self)
                    try pipeline.addHandler(ConnectionWatchHandler(), position: .after(decoder))
                }
            }
        }
        return configuration
    }

    /// A transport on the process-wide client.
    public init(maximumRedirects: Int = 10) {
        client = Self.sharedClient
        self.maximumRedirects = maximumRedirects
    }

    /// The `Digest` and `Basic` challenges answered per origin (`scheme://host:port`), so that the next request
    /// (another segment, a retry) answers at once instead of taking a 401 first.
    private let answered = Mutex<[String: RememberedChallenge]>([:])

    private struct RememberedChallenge {
        var challenge: AuthChallenge
        var count: Int
    }

    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        var url = request.url
        var headers = request.headers
        let environment = ProcessEnvironment.variables
        if FTPSession.Request.security(scheme: url.scheme ?? "") != nil {
            return try await FTPClient.send(request, environment: environment)
        }
        let ownHost = request.credentialsHost
        for _ in 0...maximumRedirects {
            // Read once: `URL.host` parses and decodes each time it is asked.
            let host = url.host
            let isOwnHost = host?.lowercased() == ownHost
            if !isOwnHost {
                // Credentials are for the host they were given for, never for a mirror or a redirect's target.
                headers.removeAll { headerNamesEqual($0.name, "authorization") || headerNamesEqual($0.name, "cookie") }
            }
            let (response, watched) = try await exchange(
                url: url, host: host ?? "", headers: headers, tls: request.tls, network: request.network,
                isOwnHost: isOwnHost, environment: environment)
            let status = Int(response.status.code)
            guard [301, 302, 303, 307, 308].contains(status), let location = response.headers.first(name: "Location")
            else {
                var head = ResponseHead(
                    status: status,
                    headers: response.headers.map { (name: $0.name, value: $0.value) }
                )
                if LinkExpiry.readsBody(status: status) { head.errorText = await Self.errorText(of: response) }
                var settled: (@Sendable () async -> Void)?
                if let watched { settled = { await ConnectionWatch.shared.settled(watched) } }
                return TransportResponse(head: head, finalURL: url, body: response.body, settled: settled)
            }
            guard let next = URL(string: location, relativeTo: url)?.absoluteURL,
                let scheme = next.scheme?.lowercased(), scheme == "http" || scheme == "https"
            else {
                throw DownloadError(.tooManyRedirects, "redirect to an unusable Location '\(location)'")
            }
            // The redirect's own body is not wanted; dropping the response closes or drains it.
            url = next
        }
        throw DownloadError(.tooManyRedirects, "more than \(maximumRedirects) redirects from \(request.url)")
    }

    /// The start of an error answer's body, for `LinkExpiry`: at most `LinkExpiry.bodyPrefix` bytes, and nothing from
    /// a body that does not arrive within five seconds (the download fails on its status then).
    static func errorText(of response: HTTPClientResponse) async -> String? {
        await withTaskGroup(of: String?.self) { group in
            group.addTask {
                var bytes: [UInt8] = []
                do {
                    for try await chunk in response.body {
                        bytes += chunk.readableBytesView.prefix(LinkExpiry.bodyPrefix - bytes.count)
                        if bytes.count >= LinkExpiry.bodyPrefix { break }
                    }
                } catch {}
                return String(decoding: bytes, as: UTF8.self)
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(5))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    /// One request to `url` (no redirect followed): through the proxy the rules choose, with the cookies that match,
    /// answering the server's challenge with the download's credentials (only on its own host) or `.netrc`'s. Returns
    /// the answer and the token its request was watched under (`ConnectionWatch`).
    private func exchange(
        url: URL, host: String, headers: [(name: String, value: String)], tls options: TLSOptions,
        network: NetworkOptions, isOwnHost: Bool, environment: [String: String]
    ) async throws -> (HTTPClientResponse, watched: UInt64?) {
        let scheme = url.scheme?.lowercased() ?? "http"
        // Only a TLS connection reads the roots: on plain HTTP (as curl does) no certificate is loaded, and the
        // request's configuration stays nil, which AsyncHTTPClient would otherwise hash into the connection pool's
        // key on every request (with `SSL_CERT_FILE` set, every certificate of the bundle).
        let tls = scheme == "https" ? try Self.tlsConfiguration(options, environment: environment) : nil
        let proxy =
            network.proxy.isDefault && !ProcessEnvironment.namesProxy
            ? nil : try network.proxy.proxy(scheme: scheme, host: host, environment: environment)
        var headers = headers
        if let cookies = try Self.cookieHeader(url: url, network: network, isOwnHost: isOwnHost) {
            if let index = headers.firstIndex(where: { headerNamesEqual($0.name, "cookie") }) {
                headers[index].value += "; " + cookies
            } else {
                headers.append(("Cookie", cookies))
            }
        }
        let userAuthorizes = headers.contains { headerNamesEqual($0.name, "authorization") }
        let origin = "\(scheme)://\(host.lowercased()):\(url.port ?? (scheme == "https" ? 443 : 80))"
        // Credentials (and `.netrc`) are looked up only for a server that asks, or asked before.
        let remembered = !userAuthorizes && answered.withLock { $0[origin] != nil }
        var credentials = remembered ? try Self.credentials(for: url, network: network, isOwnHost: isOwnHost) : nil
        var lookedUp = remembered
        var retries = 0
        while true {
            var sent = headers
            var answeredChallenge = false
            if let credentials, let authorization = authorization(origin: origin, url: url, credentials: credentials) {
                sent.append(("Authorization", authorization))
                answeredChallenge = true
            }
            let (response, watched) = try await execute(url: url, headers: sent, tls: tls, proxy: proxy)
            if response.status.code == 407, let proxy, proxy.kind == .http, scheme == "http" {
                throw Self.proxyAuthenticationError(proxy)
            }
            guard response.status.code == 401, !userAuthorizes, retries < 2 else { return (response, watched) }
            if !lookedUp {
                credentials = try Self.credentials(for: url, network: network, isOwnHost: isOwnHost)
                lookedUp = true
            }
            guard let credentials else { return (response, watched) }
            let challenges = AuthChallenge.parse(response.headers["WWW-Authenticate"])
            guard let chosen = HTTPAuthentication.choose(challenges) else { return (response, watched) }
            let stale = chosen.parameters["stale"]?.lowercased() == "true"
            if answeredChallenge, !stale {
                throw DownloadError(
                    .httpStatus,
                    "\(host) refused the credentials of \(credentials.user.isEmpty ? "the empty user" : credentials.user) "
                        + "(HTTP 401 Unauthorized)", status: 401, isRetryable: false)
            }
            answered.withLock { $0[origin] = RememberedChallenge(challenge: chosen, count: 0) }
            retries += 1
        }
    }

    /// The `Authorization` value answering the challenge remembered for `origin`, nil when none is.
    private func authorization(origin: String, url: URL, credentials: Credentials) -> String? {
        guard
            let (challenge, count) = answered.withLock({ state -> (AuthChallenge, Int)? in
                guard var remembered = state[origin] else { return nil }
                remembered.count += 1
                state[origin] = remembered
                return (remembered.challenge, remembered.count)
            })
        else { return nil }
        if challenge.scheme == "basic" { return HTTPAuthentication.basic(credentials) }
        var target = url.path(percentEncoded: true)
        if target.isEmpty { target = "/" }
        if let query = url.query(percentEncoded: true) { target += "?" + query }
        let cnonce = (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        return HTTPAuthentication.digest(
            challenge, credentials: credentials, method: "GET", uri: target, cnonce: cnonce, count: count,
            hash: Self.digestHash)
    }

    static let digestHash: HTTPAuthentication.Hash = { algorithm, text in
        switch algorithm {
        case .md5: Insecure.MD5.hash(data: Data(text.utf8)).hexString
        case .sha256: SHA256.hash(data: Data(text.utf8)).hexString
        }
    }

    private static func proxyAuthenticationError(_ proxy: ProxyEndpoint) -> DownloadError {
        DownloadError(
            .httpStatus,
            "the proxy \(proxy.display) asks for credentials (HTTP 407)"
                + (proxy.user == nil
                    ? "; give them in the proxy URL, http://USER:PASSWORD@HOST:PORT" : " and refused these"),
            status: 407, isRetryable: false)
    }

    /// The header through which the plain-proxy route tells `ProxyTargetHandler` the absolute URL to request.
    static let proxyTargetHeader = "X-Haul-Proxy-Target"

    private func execute(
        url: URL, headers: [(name: String, value: String)], tls: TLSConfiguration?, proxy: ProxyEndpoint?
    )
        async throws -> (HTTPClientResponse, watched: UInt64?)
    {
        var request: HTTPClientRequest
        var client = self.client
        if let proxy, proxy.kind == .http, url.scheme?.lowercased() == "http" {
            // A plain request to the proxy with the absolute URL as its target (RFC 9112 §3.2.2): AsyncHTTPClient
            // would open a CONNECT tunnel, which proxies commonly allow to port 443 only.
            var components = URLComponents(url: url, resolvingAgainstBaseURL: false)!
            components.scheme = "http"
            components.host = HostAndPort.shown(proxy.host)
            components.port = proxy.port
            request = HTTPClientRequest(url: components.url!.absoluteString)
            request.headers.add(name: "Host", value: url.port.map { "\(url.host ?? ""):\($0)" } ?? (url.host ?? ""))
            request.headers.add(name: Self.proxyTargetHeader, value: url.absoluteString)
            if let user = proxy.user {
                request.headers.add(
                    name: "Proxy-Authorization",
                    value: HTTPAuthentication.basic(Credentials(user: user, password: proxy.password ?? "")))
            }
        } else {
            request = HTTPClientRequest(url: url.absoluteString)
            if let proxy { client = Self.proxyClient(proxy) }
        }
        request.method = .GET
        request.tlsConfiguration = tls
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        let watched = Self.usesHTTP2 ? nil : ConnectionWatch.shared.token()
        if let watched { request.headers.add(name: ConnectionWatch.header, value: String(watched)) }
        do {
            return (try await client.execute(request, timeout: .hours(24 * 365)), watched)
        } catch {
            if proxy == nil, url.scheme?.lowercased() == "https", let host = url.host,
                case .certificateRejected = Self.classify(error, connecting: true),
                let problem = await CertificateProbe.problem(host: host, port: url.port ?? 443, configuration: tls)
            {
                // Say which: expired, for other names, or signed by a CA not trusted here.
                throw NetworkFailure.certificateInvalid(problem, now: Int64(Date().timeIntervalSince1970))
                    .error(host: HostAndPort.shown(host, port: url.port))
            }
            throw Self.map(error, url: url, proxy: proxy)
        }
    }

    /// The client for connections through `proxy` (a `CONNECT` tunnel or SOCKS5), one per proxy for the process.
    private static func proxyClient(_ proxy: ProxyEndpoint) -> HTTPClient {
        proxyClients.withLock { clients in
            if let known = clients[proxy] { return known }
            var configuration = baseConfiguration()
            switch proxy.kind {
            case .http:
                configuration.proxy = .server(
                    host: proxy.host, port: proxy.port,
                    authorization: proxy.user.map { .basic(username: $0, password: proxy.password ?? "") })
            case .socks5, .socks5h:
                configuration.proxy = .socksServer(host: proxy.host, port: proxy.port)
            }
            let client = HTTPClient(
                eventLoopGroupProvider: .shared(MultiThreadedEventLoopGroup.singleton), configuration: configuration)
            clients[proxy] = client
            return client
        }
    }

    private static let proxyClients = Mutex<[ProxyEndpoint: HTTPClient]>([:])

    /// Maps AsyncHTTPClient and NIO errors to `DownloadError`s with one plain sentence each (`NetworkFailure`):
    /// failures to connect are `connectionFailed`, TLS failures `tls`, anything later `connectionLost`.
    static func map(_ error: any Error, url: URL, proxy: ProxyEndpoint? = nil) -> any Error {
        if error is DownloadError || error is CancellationError { return error }
        let target = url.host.map { HostAndPort.shown($0, port: url.port) } ?? url.absoluteString
        if let proxy {
            if let client = error as? HTTPClientError {
                if client == .proxyAuthenticationRequired { return proxyAuthenticationError(proxy) }
                if client == .invalidProxyResponse {
                    return DownloadError(
                        .connectionFailed, "the proxy \(proxy.display) refused to open a tunnel to \(target)")
                }
                if client == .socksHandshakeTimeout {
                    return DownloadError(.connectionFailed, "the SOCKS proxy \(proxy.display) did not answer in time")
                }
            }
            if error is SOCKSError.ConnectionFailed {
                return DownloadError(
                    .connectionFailed, "the SOCKS proxy \(proxy.display) could not connect to \(target)")
            }
            if String(reflecting: type(of: error)).contains("SOCKSError") {
                return DownloadError(
                    .connectionFailed, "the SOCKS proxy \(proxy.display) answered in a way Haul does not understand",
                    isRetryable: false)
            }
            let failure = classify(error, connecting: true)
            if failure.isConnectFailure {
                // The proxy itself could not be reached.
                return failure.error(host: "the proxy " + HostAndPort.shown(proxy.host, port: proxy.port))
            }
        }
        if let client = error as? HTTPClientError, client == .cancelled { return CancellationError() }
        let host = url.host ?? url.absoluteString
        if let client = error as? HTTPClientError,
            client == .invalidURL || client == .emptyHost
                || client == .unsupportedScheme(url.scheme ?? "")
        {
            return DownloadError(.invalidURL, "cannot fetch \(url.absoluteString)", underlying: error)
        }
        return classify(error, connecting: true).error(host: HostAndPort.shown(host, port: url.port))
    }

    /// The `errno` of a failed socket call inside `error` (the first of a connection's attempts), if it is one.
    package static func errno(of error: any Error) -> Int32? {
        if let failure = error as? NIOConnectionError, let attempt = failure.connectionErrors.first {
            return errno(of: attempt.error)
        }
        return (error as? IOError)?.errnoCode
    }

    /// What a network error of AsyncHTTPClient, NIO or NIOSSL was, in `NetworkFailure`'s plain terms.
    package static func classify(_ error: any Error, connecting: Bool) -> NetworkFailure {
        if let failure = error as? NIOConnectionError {
            // Every address failed: the first socket error tells why; without one, the resolver's answer does.
            if let attempt = failure.connectionErrors.first { return classify(attempt.error, connecting: true) }
            for resolverError in [failure.dnsAError, failure.dnsAAAAError].compactMap({ $0 }) {
                if let unknown = resolverError as? SocketAddressError.UnknownHost {
                    return .resolver(code: unknown.errorCode)
                }
            }
            return .other("the connection failed")
        }
        if let unknown = error as? SocketAddressError.UnknownHost { return .resolver(code: unknown.errorCode) }
        if let io = error as? IOError { return .socket(errno: io.errnoCode, connecting: connecting) }
        if let client = error as? HTTPClientError {
            if client == .connectTimeout { return .connectTimedOut }
            if client == .remoteConnectionClosed { return .reset }
            if client == .readTimeout || client == .deadlineExceeded { return .other("no answer in time") }
        }
        if let channel = error as? ChannelError {
            switch channel {
            case .connectTimeout: return .connectTimedOut
            case .eof, .ioOnClosedChannel, .alreadyClosed, .outputClosed, .inputClosed: return .reset
            default: break
            }
        }
        if let extra = error as? NIOSSLExtraError, extra == .failedToValidateHostname {
            return .certificateRejected(detail: "is for another name")
        }
        if let ssl = error as? NIOSSLError {
            let text = String(describing: ssl)
            if text.contains("CERTIFICATE_VERIFY_FAILED") || text.contains("certificate verify failed") {
                return .certificateRejected(
                    detail: "could not be verified: not signed by a trusted CA, expired, or issued for another name")
            }
            if case .uncleanShutdown = ssl { return .reset }
            return .handshakeFailed(detail: Self.reason(text))
        }
        if let boring = error as? BoringSSLError {
            return .handshakeFailed(detail: Self.reason(String(describing: boring)))
        }
        return .other(connecting ? "the connection failed" : "the connection broke")
    }

    /// The reason words of a BoringSSL error text (`error:…:SSL routines:OPENSSL_internal:NO_SHARED_CIPHER at …` →
    /// "no shared cipher"): the first field that is a code alone (capitals, digits and underscores), so that neither
    /// the library's `OPENSSL_internal` nor a path is taken for it. A plain-HTTP server answering a TLS hello is the
    /// common case of `WRONG_VERSION_NUMBER`, said as such, as curl's words alone leave the user guessing; a server
    /// that closes instead (BoringSSL's "EOF during handshake") is said to have closed.
    static func reason(_ text: String) -> String? {
        if text.contains("EOF during handshake") { return "the server closed the connection during it" }
        let isCode: (Substring) -> Bool = { field in
            field.count > 3 && field.contains("_")
                && field.allSatisfy { ($0.isASCII && $0.isUppercase) || $0 == "_" || $0.isNumber }
        }
        guard let code = text.split(whereSeparator: { ":[]() ".contains($0) }).first(where: isCode) else { return nil }
        if code == "WRONG_VERSION_NUMBER" {
            return "wrong version number: the server does not speak TLS there; is the URL meant to be http://?"
        }
        return code.replacingOccurrences(of: "_", with: " ").lowercased()
    }
}
