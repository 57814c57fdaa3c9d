import Foundation
import HaulCore

/// How one download is fetched and where it may write.
public struct DownloadOptions: Codable, Sendable, Equatable {
    /// One request header.
    public typealias Header = RequestHeader

    /// Extra request headers.
    public var headers: [Header]
    /// The `User-Agent`; Haul's own when nil.
    public var userAgent: String?
    /// The expected checksum of the finished file.
    public var checksum: Checksum?
    /// Replace a file at the destination that Haul did not create.
    public var overwrite: Bool
    /// Adopt a file at the destination as a partial download (after comparing an overlap with the server).
    public var continuePartial: Bool
    /// Seconds without a byte before the connection is abandoned and retried.
    public var idleTimeoutSeconds: Double
    /// Failed attempts in a row without progress before giving up.
    public var maximumAttemptsWithoutProgress: Int
    /// Whether to compute the SHA-256 of the finished file for the result (also done whenever a checksum is given).
    public var computesSHA256: Bool
    /// The most connections one download opens (1...16). Haul begins with one and adds more only while they make
    /// the download faster; 1 means exactly one.
    public var maxConnectionsPerDownload: Int
    /// No segment smaller than this many bytes is started by splitting (at least 1 MiB for the command line).
    public var minimumSplitSize: Int64
    /// How HTTPS servers are trusted, and the client certificate to show them.
    public var tls: TLSOptions = TLSOptions()
    /// Proxies, credentials, `.netrc` and cookies (the secrets among them are never encoded).
    public var network: NetworkOptions = NetworkOptions()

    /// The default of `maxConnectionsPerDownload`.
    public static let defaultMaxConnections = 4
    /// The upper bound of `maxConnectionsPerDownload`.
    public static let connectionLimit = 16
    /// The default of `minimumSplitSize`: 4 MiB.
    public static let defaultMinimumSplitSize: Int64 = 4 << 20

    /// Options with the defaults of the `haul get` command.
    public init(
        headers: [Header] = [],
        userAgent: String? = nil,
        checksum: Checksum? = nil,
        overwrite: Bool = false,
        continuePartial: Bool = false,
        idleTimeoutSeconds: Double = 30,
        maximumAttemptsWithoutProgress: Int = 5,
        computesSHA256: Bool = false,
        maxConnectionsPerDownload: Int = DownloadOptions.defaultMaxConnections,
        minimumSplitSize: Int64 = DownloadOptions.defaultMinimumSplitSize
    ) {
        self.headers = headers
        self.userAgent = userAgent
        self.checksum = checksum
        self.overwrite = overwrite
        self.continuePartial = continuePartial
        self.idleTimeoutSeconds = idleTimeoutSeconds
        self.maximumAttemptsWithoutProgress = maximumAttemptsWithoutProgress
        self.computesSHA256 = computesSHA256
        self.maxConnectionsPerDownload = min(max(1, maxConnectionsPerDownload), Self.connectionLimit)
        self.minimumSplitSize = max(1, minimumSplitSize)
    }

    private enum CodingKeys: String, CodingKey {
        case headers, userAgent, checksum, overwrite, continuePartial, idleTimeoutSeconds
        case maximumAttemptsWithoutProgress, computesSHA256, maxConnectionsPerDownload, minimumSplitSize, tls, network
    }

    /// Decodes stored options; fields added after a record was written take their defaults.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            headers: try container.decodeIfPresent([Header].self, forKey: .headers) ?? [],
            userAgent: try container.decodeIfPresent(String.self, forKey: .userAgent),
            checksum: try container.decodeIfPresent(Checksum.self, forKey: .checksum),
            overwrite: try container.decodeIfPresent(Bool.self, forKey: .overwrite) ?? false,
            continuePartial: try container.decodeIfPresent(Bool.self, forKey: .continuePartial) ?? false,
            idleTimeoutSeconds: try container.decodeIfPresent(Double.self, forKey: .idleTimeoutSeconds) ?? 30,
            maximumAttemptsWithoutProgress: try container.decodeIfPresent(
                Int.self, forKey: .maximumAttemptsWithoutProgress) ?? 5,
            computesSHA256: try container.decodeIfPresent(Bool.self, forKey: .computesSHA256) ?? false,
            maxConnectionsPerDownload: try container.decodeIfPresent(Int.self, forKey: .maxConnectionsPerDownload)
                ?? Self.defaultMaxConnections,
            minimumSplitSize: try container.decodeIfPresent(Int64.self, forKey: .minimumSplitSize)
                ?? Self.defaultMinimumSplitSize
        )
        tls = try container.decodeIfPresent(TLSOptions.self, forKey: .tls) ?? TLSOptions()
        network = try container.decodeIfPresent(NetworkOptions.self, forKey: .network) ?? NetworkOptions()
    }
}

/// How HTTPS servers are trusted, beyond the system's roots (and `SSL_CERT_FILE`/`SSL_CERT_DIR`, which replace them
/// as in OpenSSL-based tools), and the client certificate to show them. Paths, never secrets, are stored.
public struct TLSOptions: Sendable, Codable, Hashable {
    /// A PEM bundle of CA certificates trusted in addition to the system's (`--cacert`).
    public var caCertificates: String?
    /// A folder of PEM CA certificates trusted in addition (`--capath`).
    public var caDirectory: String?
    /// Skip verifying the server's certificate (`--insecure`): the connection is encrypted but the server unproven.
    public var insecure: Bool
    /// A PEM client certificate (`--cert`), with its key in `clientKey` (`--key`) or in the same file.
    public var clientCertificate: String?
    /// The PEM private key of the client certificate.
    public var clientKey: String?

    /// Options; the defaults trust the system's roots only.
    public init(
        caCertificates: String? = nil, caDirectory: String? = nil, insecure: Bool = false,
        clientCertificate: String? = nil, clientKey: String? = nil
    ) {
        self.caCertificates = caCertificates
        self.caDirectory = caDirectory
        self.insecure = insecure
        self.clientCertificate = clientCertificate
        self.clientKey = clientKey
    }

    /// Whether nothing differs from the defaults.
    public var isDefault: Bool { self == TLSOptions() }
}

/// How a download reaches its server beyond TLS: the proxy rules, credentials, `.netrc` and cookies.
///
/// What is secret (the credentials, `--cookie` data and a proxy URL's user and password) is kept in memory only and
/// never encoded: the store, logs, `haul ls` and the API never see it. A download resumed by a later process has
/// the proxy, the `.netrc` file and the cookie file again, but not the secrets: it asks for them anew (a server that
/// wants them answers 401, and the error says so).
public struct NetworkOptions: Sendable, Codable, Hashable {
    /// `--proxy` and `--noproxy`; the environment's `*_proxy` variables apply when neither is set.
    public var proxy: ProxyRules
    /// `--user` or a URL's `user:password@`: for the download's own host only, never for a host it redirects to.
    public var credentials: Credentials?
    /// The `.netrc` file to read when a server asks for credentials; nil for `~/.netrc`.
    public var netrcFile: String?
    /// Whether `.netrc` is read at all.
    public var usesNetrc: Bool
    /// A Netscape cookie file whose cookies go to their domains and paths (`--load-cookies`).
    public var cookieFile: String?
    /// `--cookie name=value; …`: sent to the download's own host only.
    public var cookies: String?

    /// Makes options; the defaults read the environment's proxies and `~/.netrc`.
    public init(
        proxy: ProxyRules = ProxyRules(), credentials: Credentials? = nil, netrcFile: String? = nil,
        usesNetrc: Bool = true, cookieFile: String? = nil, cookies: String? = nil
    ) {
        self.proxy = proxy
        self.credentials = credentials
        self.netrcFile = netrcFile
        self.usesNetrc = usesNetrc
        self.cookieFile = cookieFile
        self.cookies = cookies
    }

    /// Whether nothing differs from the defaults.
    public var isDefault: Bool { self == NetworkOptions() }

    private enum CodingKeys: String, CodingKey {
        case proxy, noProxy, netrcFile, usesNetrc, cookieFile
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            proxy: ProxyRules(
                proxy: try container.decodeIfPresent(String.self, forKey: .proxy),
                noProxy: try container.decodeIfPresent(String.self, forKey: .noProxy)),
            netrcFile: try container.decodeIfPresent(String.self, forKey: .netrcFile),
            usesNetrc: try container.decodeIfPresent(Bool.self, forKey: .usesNetrc) ?? true,
            cookieFile: try container.decodeIfPresent(String.self, forKey: .cookieFile))
    }

    /// Encodes what is not secret: the proxy URL without its user and password.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(proxy.proxy.map(ProxyEndpoint.withoutCredentials), forKey: .proxy)
        try container.encodeIfPresent(proxy.noProxy, forKey: .noProxy)
        try container.encodeIfPresent(netrcFile, forKey: .netrcFile)
        if !usesNetrc { try container.encode(usesNetrc, forKey: .usesNetrc) }
        try container.encodeIfPresent(cookieFile, forKey: .cookieFile)
    }
}
