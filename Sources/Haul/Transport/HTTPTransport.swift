import Foundation
import HaulCore
import NIOCore

/// One GET as the engine sends it.
public struct TransportRequest: Sendable {
    /// Where to send it.
    public var url: URL
    /// Header fields, in order.
    public var headers: [(name: String, value: String)]
    /// How an HTTPS server is trusted.
    public var tls: TLSOptions
    /// Proxies, credentials and cookies.
    public var network: NetworkOptions
    /// The host the download's credentials, `--cookie` data and `Authorization` and `Cookie` headers belong to; nil:
    /// `url`'s. A request to another host (a mirror's, or a redirect's target) gets none of them.
    public var ownHost: String?

    /// Makes a request.
    public init(
        url: URL, headers: [(name: String, value: String)], tls: TLSOptions = TLSOptions(),
        network: NetworkOptions = NetworkOptions(), ownHost: String? = nil
    ) {
        self.url = url
        self.headers = headers
        self.tls = tls
        self.network = network
        self.ownHost = ownHost
    }

    /// `ownHost`, lowercased.
    var credentialsHost: String? { (ownHost ?? url.host)?.lowercased() }

    /// The first value of a header, case-insensitively.
    public func value(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }
}

/// The answer: the head, the URL that answered after redirects, and the body as it arrives.
public struct TransportResponse: Sendable {
    /// Status and headers.
    public var head: ResponseHead
    /// The URL that produced this answer, after redirects.
    public var finalURL: URL
    /// The body chunks, in order; throws when the connection breaks.
    public var body: any AsyncSequence<ByteBuffer, any Error> & Sendable
    /// For a body left before its end (its iterator dropped): returns once the transport has closed the connection
    /// that carried it, or that connection finished the answer after all. A limit of connections to a host counts
    /// the connection until then (`HostConnections`): the server still has it open. Nil when the transport has no
    /// connection to wait for.
    public var settled: (@Sendable () async -> Void)?

    /// Makes a response.
    public init(
        head: ResponseHead, finalURL: URL, body: any AsyncSequence<ByteBuffer, any Error> & Sendable,
        settled: (@Sendable () async -> Void)? = nil
    ) {
        self.head = head
        self.finalURL = finalURL
        self.body = body
        self.settled = settled
    }
}

/// How the engine talks to the network: request head in, response head and body chunks out. Redirects are the
/// transport's job; everything else (ranges, validation, retries) is the engine's.
public protocol HTTPTransport: Sendable {
    /// Sends `request` and returns once the final response head has arrived. Errors are `DownloadError`s
    /// (`connectionFailed`, `connectionLost`, `tls`, `tooManyRedirects`, `invalidURL`) or `CancellationError`.
    func send(_ request: TransportRequest) async throws -> TransportResponse
}
