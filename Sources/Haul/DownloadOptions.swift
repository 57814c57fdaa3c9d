import Foundation
import HaulCore

/// How one download is fetched and where it may write.
///
/// A value type whose fields live in one shared, copy-on-write storage: a record, its snapshots and its events share
/// it, and the manager gives downloads added with equal options one storage (`sharingStorage(with:)`), so a daemon
/// holding tens of thousands of downloads does not hold their options once each.
public struct DownloadOptions: Codable, Sendable, Equatable {
    /// One request header.
    public typealias Header = RequestHeader

    /// The fields.
    fileprivate struct Values: Equatable {
        var headers: [Header]
        var userAgent: String?
        var checksum: Checksum?
        var overwrite: Bool
        var continuePartial: Bool
        var idleTimeoutSeconds: Double
        var maximumAttemptsWithoutProgress: Int
        var computesSHA256: Bool
        var maxConnectionsPerDownload: Int
        var minimumSplitSize: Int64
        var tls = TLSOptions()
        var network = NetworkOptions()
        var mirrors: [String] = []
        var pieces: Metalink.Pieces?
        var preferredName: String?
        var followedMetalink = false
        var expectedLength: Int64?
        var linkReplaced = false
        var streamVariant: String?
        var streamMux = false
    }

    /// Written only while uniquely referenced (`change`), so sharing it between threads is safe.
    private final class Storage: @unchecked Sendable {
        var values: Values
        init(_ values: Values) { self.values = values }
    }

    private var storage: Storage

    private mutating func change(_ body: (inout Values) -> Void) {
        if !isKnownUniquelyReferenced(&storage) { storage = Storage(storage.values) }
        body(&storage.values)
    }

    /// Extra request headers. An add refuses one that `DownloadRules.checkHeader` refuses: Haul's own (`Range`,
    /// `If-Range`, …) and an `Accept-Encoding` other than `identity`.
    public var headers: [Header] {
        get { storage.values.headers }
        set { change { $0.headers = newValue } }
    }
    /// The `User-Agent`; Haul's own when nil.
    public var userAgent: String? {
        get { storage.values.userAgent }
        set { change { $0.userAgent = newValue } }
    }
    /// The expected checksum of the finished file.
    public var checksum: Checksum? {
        get { storage.values.checksum }
        set { change { $0.checksum = newValue } }
    }
    /// Replace a file at the destination that Haul did not create.
    public var overwrite: Bool {
        get { storage.values.overwrite }
        set { change { $0.overwrite = newValue } }
    }
    /// Adopt a file at the destination as a partial download (after comparing an overlap with the server).
    public var continuePartial: Bool {
        get { storage.values.continuePartial }
        set { change { $0.continuePartial = newValue } }
    }
    /// Seconds without a byte before the connection is abandoned and retried.
    public var idleTimeoutSeconds: Double {
        get { storage.values.idleTimeoutSeconds }
        set { change { $0.idleTimeoutSeconds = newValue } }
    }
    /// Failed attempts in a row without progress before giving up.
    public var maximumAttemptsWithoutProgress: Int {
        get { storage.values.maximumAttemptsWithoutProgress }
        set { change { $0.maximumAttemptsWithoutProgress = newValue } }
    }
    /// Whether to compute the SHA-256 of the finished file for the result (also done whenever a checksum is given).
    public var computesSHA256: Bool {
        get { storage.values.computesSHA256 }
        set { change { $0.computesSHA256 = newValue } }
    }
    /// The most connections one download opens (1...16). Haul begins with one and adds more only while they make
    /// the download faster; 1 means exactly one.
    public var maxConnectionsPerDownload: Int {
        get { storage.values.maxConnectionsPerDownload }
        set { change { $0.maxConnectionsPerDownload = newValue } }
    }
    /// No segment smaller than this many bytes is started by splitting (at least 1 MiB for the command line).
    public var minimumSplitSize: Int64 {
        get { storage.values.minimumSplitSize }
        set { change { $0.minimumSplitSize = newValue } }
    }
    /// How HTTPS servers are trusted, and the client certificate to show them.
    public var tls: TLSOptions {
        get { storage.values.tls }
        set { change { $0.tls = newValue } }
    }
    /// Proxies, credentials, `.netrc` and cookies (the secrets among them are never encoded).
    public var network: NetworkOptions {
        get { storage.values.network }
        set { change { $0.network = newValue } }
    }
    /// Other URLs of the same file, fetched from at once beside the download's own URL. A mirror's bytes count only
    /// once it agrees with the first answer on the size and sends the same last 64 KiB (`TransferMachine`); each
    /// opens at most `maxConnectionsPerDownload` connections.
    public var mirrors: [String] {
        get { storage.values.mirrors }
        set { change { $0.mirrors = newValue } }
    }

    /// The hashes of the file's pieces (from a Metalink): each piece is checked as it completes, and one that does not
    /// match is fetched again, from another server when there is one.
    public var pieces: Metalink.Pieces? {
        get { storage.values.pieces }
        set { change { $0.pieces = newValue } }
    }

    /// For a download into a folder: the name its file takes there instead of the server's (a Metalink's name for
    /// it), made safe the same way, and `name (1)` … when taken. A Metalink's name may hold folders (`docs/a.txt`):
    /// they are made beneath the download's folder when missing, each name made safe.
    public var preferredName: String? {
        get { storage.values.preferredName }
        set { change { $0.preferredName = newValue } }
    }

    /// The file's length when it is known before the first answer (a Metalink's `<size>`): an answer with another
    /// length ends the run before any byte of it is written.
    public var expectedLength: Int64? {
        get { storage.values.expectedLength }
        set { change { $0.expectedLength = newValue } }
    }

    /// Whether the download's URL answered a Metalink that it now follows: a Metalink that answers with a Metalink
    /// again is not followed twice.
    public var followedMetalink: Bool {
        get { storage.values.followedMetalink }
        set { change { $0.followedMetalink = newValue } }
    }

    /// Whether the download's URL was replaced (`DownloadManager.replaceURL`) while it held bytes: the new link's first
    /// answer must show the same strong validator, or the held bytes before each offset are compared, before anything
    /// is appended; a 200 or other validators lead to that comparison instead of a restart.
    public var linkReplaced: Bool {
        get { storage.values.linkReplaced }
        set { change { $0.linkReplaced = newValue } }
    }

    /// Which variant of an HLS master playlist to download (`--variant`): a resolution (`1280x720`), a height
    /// (`720p`), a bandwidth, or part of its URI; nil: the highest bandwidth.
    public var streamVariant: String? {
        get { storage.values.streamVariant }
        set { change { $0.streamVariant = newValue } }
    }

    /// Whether a DASH stream's video and audio become one file (`--mux`), when `ffmpeg` is on the PATH; without it,
    /// or without this, they are two files.
    public var streamMux: Bool {
        get { storage.values.streamMux }
        set { change { $0.streamMux = newValue } }
    }

    /// The URL of server `index` of a download whose own URL is `own`: 0 is `own`, then the mirrors in order.
    func server(_ index: Int, own: String) -> String {
        index > 0 && index <= mirrors.count ? mirrors[index - 1] : own
    }

    /// The default of `maxConnectionsPerDownload`.
    public static let defaultMaxConnections = 4
    /// The upper bound of `maxConnectionsPerDownload` (`DownloadRules.connections`).
    public static let connectionLimit = DownloadRules.connections.upperBound
    /// The default of `minimumSplitSize`: 4 MiB.
    public static let defaultMinimumSplitSize: Int64 = 4 << 20
    /// Every field at its default, which the encoding leaves out.
    private static let defaults = DownloadOptions().storage.values

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
        storage = Storage(
            Values(
                headers: headers, userAgent: userAgent, checksum: checksum, overwrite: overwrite,
                continuePartial: continuePartial, idleTimeoutSeconds: idleTimeoutSeconds,
                maximumAttemptsWithoutProgress: maximumAttemptsWithoutProgress, computesSHA256: computesSHA256,
                maxConnectionsPerDownload: maxConnectionsPerDownload, minimumSplitSize: minimumSplitSize))
    }

    public static func == (left: DownloadOptions, right: DownloadOptions) -> Bool {
        left.storage === right.storage || left.storage.values == right.storage.values
    }

    /// These options, sharing `other`'s storage when they are equal (for the many downloads added alike).
    public func sharingStorage(with other: DownloadOptions) -> DownloadOptions {
        self == other ? other : self
    }

    /// Whether both share one storage (for tests).
    func sharesStorage(with other: DownloadOptions) -> Bool { storage === other.storage }

    private enum CodingKeys: String, CodingKey {
        case headers, userAgent, checksum, overwrite, continuePartial, idleTimeoutSeconds
        case maximumAttemptsWithoutProgress, computesSHA256, maxConnectionsPerDownload, minimumSplitSize, tls, network
        case mirrors, pieces, preferredName, followedMetalink, expectedLength, linkReplaced, streamVariant, streamMux
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
        mirrors = try container.decodeIfPresent([String].self, forKey: .mirrors) ?? []
        pieces = try container.decodeIfPresent(Metalink.Pieces.self, forKey: .pieces)
        preferredName = try container.decodeIfPresent(String.self, forKey: .preferredName)
        followedMetalink = try container.decodeIfPresent(Bool.self, forKey: .followedMetalink) ?? false
        expectedLength = try container.decodeIfPresent(Int64.self, forKey: .expectedLength)
        linkReplaced = try container.decodeIfPresent(Bool.self, forKey: .linkReplaced) ?? false
        streamVariant = try container.decodeIfPresent(String.self, forKey: .streamVariant)
        streamMux = try container.decodeIfPresent(Bool.self, forKey: .streamMux) ?? false
    }

    /// Encodes the fields that differ from the defaults (`init()`'s): the decoder gives a missing field its default,
    /// and rows written with every field read back alike. Each stored row holds its download's options, and the
    /// defaults written out were most of a row's bytes; with fewer bytes a row, more rows share a page, and the store
    /// writes fewer pages with each commit.
    public func encode(to encoder: any Encoder) throws {
        let values = storage.values
        let defaults = Self.defaults
        var container = encoder.container(keyedBy: CodingKeys.self)
        if !values.headers.isEmpty { try container.encode(values.headers, forKey: .headers) }
        try container.encodeIfPresent(values.userAgent, forKey: .userAgent)
        try container.encodeIfPresent(values.checksum, forKey: .checksum)
        if values.overwrite { try container.encode(true, forKey: .overwrite) }
        if values.continuePartial { try container.encode(true, forKey: .continuePartial) }
        if values.idleTimeoutSeconds != defaults.idleTimeoutSeconds {
            try container.encode(values.idleTimeoutSeconds, forKey: .idleTimeoutSeconds)
        }
        if values.maximumAttemptsWithoutProgress != defaults.maximumAttemptsWithoutProgress {
            try container.encode(values.maximumAttemptsWithoutProgress, forKey: .maximumAttemptsWithoutProgress)
        }
        if values.computesSHA256 { try container.encode(true, forKey: .computesSHA256) }
        if values.maxConnectionsPerDownload != defaults.maxConnectionsPerDownload {
            try container.encode(values.maxConnectionsPerDownload, forKey: .maxConnectionsPerDownload)
        }
        if values.minimumSplitSize != defaults.minimumSplitSize {
            try container.encode(values.minimumSplitSize, forKey: .minimumSplitSize)
        }
        if !values.tls.isDefault { try container.encode(values.tls, forKey: .tls) }
        if !values.network.isDefault { try container.encode(values.network, forKey: .network) }
        if !values.mirrors.isEmpty { try container.encode(values.mirrors, forKey: .mirrors) }
        try container.encodeIfPresent(values.pieces, forKey: .pieces)
        try container.encodeIfPresent(values.preferredName, forKey: .preferredName)
        if values.followedMetalink { try container.encode(true, forKey: .followedMetalink) }
        try container.encodeIfPresent(values.expectedLength, forKey: .expectedLength)
        if values.linkReplaced { try container.encode(true, forKey: .linkReplaced) }
        try container.encodeIfPresent(values.streamVariant, forKey: .streamVariant)
        if values.streamMux { try container.encode(true, forKey: .streamMux) }
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
