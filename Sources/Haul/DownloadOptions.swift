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
        case maximumAttemptsWithoutProgress, computesSHA256, maxConnectionsPerDownload, minimumSplitSize, tls
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
