import Foundation
import HaulCore

/// Who added a download: the way in it came through.
public enum DownloadOrigin: String, Sendable, Codable, CaseIterable {
    /// A program using the library directly.
    case library
    /// `haul get` without a daemon.
    case commandLine = "cli"
    /// The daemon's HTTP API over TCP (token required, folders confined).
    case api
    /// The daemon's Unix socket (the local user's own `haul` commands).
    case socket

    /// Whether a download from here is confined to the manager's allowed folders: its folder is opened beneath the
    /// allowed folder its path lies in, at every start. Only the network door's are: anyone with the token may add
    /// them, while the other origins are the user's own.
    public var isConfined: Bool { self == .api }
}

/// A download as it is now: what the store holds, with the live speed, connections and bytes of a running one.
public struct DownloadSnapshot: Sendable, Equatable, Codable {
    /// The download.
    public var id: DownloadID
    /// The URL asked for.
    public var url: String
    /// The final destination, once known (a folder download learns its name from the first answer).
    public var path: String?
    /// For a folder download: the folder.
    public var directory: String?
    /// The state.
    public var state: DownloadState
    /// Its priority in the queue.
    public var priority: DownloadPriority
    /// Its place in the queue: downloads start by priority (high first), then by position (lower first). Moving a
    /// download changes its own position only.
    public var position: Double
    /// Bytes held (live while running).
    public var receivedBytes: Int64
    /// The full length, when known.
    public var totalBytes: Int64?
    /// Current speed (0 when not running).
    public var bytesPerSecond: Double
    /// Time left at the current speed, when known.
    public var secondsRemaining: Double?
    /// Connections open right now (0 when not running).
    public var connections: Int
    /// The segments of a download fetched over several connections, nil for one connection.
    public var segments: [Segment]?
    /// While it runs with mirrors: each server's state and speed, `url` first, then `options.mirrors` in order.
    public var mirrors: [MirrorStatus]?
    /// The downloads it waits for.
    public var after: [DownloadID]
    /// The last error: why it failed, or what it is retrying after.
    public var error: DownloadError?
    /// Whether a pause keeps the bytes (false: the server ignores ranges and a pause restarts); nil before the first
    /// answer.
    public var isResumable: Bool?
    /// When it was added.
    public var createdAt: Date
    /// When it completed.
    public var completedAt: Date?
    /// How it is fetched.
    public var options: DownloadOptions
    /// Its own rate limit in bytes a second, nil for none.
    public var rateLimit: Int64?
    /// Who added it.
    public var origin: DownloadOrigin
    /// The SHA-256 of the finished file, when this process computed it (`computesSHA256` or a sha256 checksum).
    public var sha256: String?
    /// The worker that runs it, nil while none does: in a fleet, the name of the `haul serve` that holds its lease;
    /// on one machine, the host's name while it runs.
    public var worker: String?

    /// Makes a snapshot (for a program that learns of downloads another way, such as a daemon's client).
    public init(
        id: DownloadID, url: String, path: String?, directory: String?, state: DownloadState,
        priority: DownloadPriority, position: Double, receivedBytes: Int64, totalBytes: Int64?, bytesPerSecond: Double,
        secondsRemaining: Double?, connections: Int, segments: [Segment]?, after: [DownloadID], error: DownloadError?,
        isResumable: Bool?, createdAt: Date, completedAt: Date?, options: DownloadOptions, rateLimit: Int64?,
        origin: DownloadOrigin, sha256: String? = nil, worker: String? = nil
    ) {
        self.id = id
        self.url = url
        self.path = path
        self.directory = directory
        self.state = state
        self.priority = priority
        self.position = position
        self.receivedBytes = receivedBytes
        self.totalBytes = totalBytes
        self.bytesPerSecond = bytesPerSecond
        self.secondsRemaining = secondsRemaining
        self.connections = connections
        self.segments = segments
        self.after = after
        self.error = error
        self.isResumable = isResumable
        self.createdAt = createdAt
        self.completedAt = completedAt
        self.options = options
        self.rateLimit = rateLimit
        self.origin = origin
        self.sha256 = sha256
        self.worker = worker
    }

    /// The destination, once known (the same as `path`).
    public var destination: String? { path }
    /// The last error's message.
    public var lastError: String? { error?.message }
}

/// Speed and counts over all downloads of a manager.
public struct DownloadStats: Sendable, Equatable, Codable {
    /// All running downloads together, bytes a second.
    public var bytesPerSecond: Double
    /// How many downloads are in each state (every state present, 0 when none).
    public var counts: [DownloadState: Int]

    /// Makes stats.
    public init(bytesPerSecond: Double, counts: [DownloadState: Int]) {
        self.bytesPerSecond = bytesPerSecond
        self.counts = counts
    }
}

/// The settings of a manager that can change while it runs.
public struct ManagerSettings: Sendable, Equatable, Codable {
    /// Downloads running at once.
    public var maxConcurrentDownloads: Int
    /// A limit on all downloads together, bytes a second; nil for none.
    public var rateLimit: Int64?
    /// The most connections a new download opens when it does not say (1...16).
    public var connectionsPerDownload: Int
    /// The most connections to one host across all downloads (a fleet's workers together); nil for no limit.
    /// Counted as servers count them (nginx's `limit_conn`): connections with a request or its body in flight.
    public var maxConnectionsPerHost: Int?
    /// The most downloads of one host (the host of a download's URL) transferring at once; nil for no limit. A
    /// fleet's workers each keep it for themselves.
    public var maxDownloadsPerHost: Int?
    /// Rules that sort downloads into folders beneath their folder (`SortRules`), in order.
    public var sortRules: [String] = []
    /// Rules that change `maxConcurrentDownloads` and `rateLimit` by the local time (`Schedule`), in order.
    public var schedule: [String]
    /// The schedule's rules that hold now, as written (`Schedule.Effect.rule`): what the manager reports, never
    /// stored.
    public var scheduleInForce: String?

    /// Makes settings.
    public init(
        maxConcurrentDownloads: Int = 3, rateLimit: Int64? = nil,
        connectionsPerDownload: Int = DownloadOptions.defaultMaxConnections, maxConnectionsPerHost: Int? = nil,
        maxDownloadsPerHost: Int? = nil, schedule: [String] = []
    ) {
        self.maxDownloadsPerHost = maxDownloadsPerHost
        self.maxConcurrentDownloads = maxConcurrentDownloads
        self.rateLimit = rateLimit
        self.connectionsPerDownload = connectionsPerDownload
        self.maxConnectionsPerHost = maxConnectionsPerHost
        self.schedule = schedule
    }

    private enum CodingKeys: String, CodingKey {
        case maxConcurrentDownloads, rateLimit, connectionsPerDownload, maxConnectionsPerHost, schedule
        case maxDownloadsPerHost, sortRules
    }

    /// Settings stored before schedules existed have none.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        maxConcurrentDownloads = try container.decode(Int.self, forKey: .maxConcurrentDownloads)
        rateLimit = try container.decodeIfPresent(Int64.self, forKey: .rateLimit)
        connectionsPerDownload = try container.decode(Int.self, forKey: .connectionsPerDownload)
        maxConnectionsPerHost = try container.decodeIfPresent(Int.self, forKey: .maxConnectionsPerHost)
        maxDownloadsPerHost = try container.decodeIfPresent(Int.self, forKey: .maxDownloadsPerHost)
        sortRules = try container.decodeIfPresent([String].self, forKey: .sortRules) ?? []
        schedule = try container.decodeIfPresent([String].self, forKey: .schedule) ?? []
    }
}

/// The wall time and the time zone a schedule is read in: the system's, or a test's.
public protocol CalendarClock: Sendable {
    /// Now, and the time zone of the wall clock.
    var now: (date: Date, timeZone: TimeZone) { get }
}

/// The system's clock and its time zone (`TZ`, else `/etc/localtime`), read anew each time.
public struct SystemCalendar: CalendarClock {
    public init() {}

    public var now: (date: Date, timeZone: TimeZone) { (Date(), TimeZone.current) }
}

/// Everything a subscriber needs to start from: every download, the totals and the settings.
public struct ManagerSnapshot: Sendable, Equatable, Codable {
    /// Every download, in queue order.
    public var downloads: [DownloadSnapshot]
    /// The totals.
    public var stats: DownloadStats
    /// The settings.
    public var settings: ManagerSettings

    /// Makes a snapshot.
    public init(downloads: [DownloadSnapshot], stats: DownloadStats, settings: ManagerSettings) {
        self.downloads = downloads
        self.stats = stats
        self.settings = settings
    }
}

/// One download to add, with everything `DownloadManager.add(_:)` needs.
public struct DownloadRequest: Sendable {
    /// The http or https URL.
    public var url: URL
    /// Where it goes.
    public var destination: DownloadManager.Destination
    /// How it is fetched.
    public var options: DownloadOptions
    /// Its priority.
    public var priority: DownloadPriority
    /// Downloads that must complete first.
    public var after: [DownloadID]
    /// Its own rate limit, bytes a second (nil: none).
    public var rateLimit: Int64?
    /// Whether it is added paused (it starts on `resume`).
    public var isPaused: Bool
    /// Who adds it.
    public var origin: DownloadOrigin

    /// Makes a request.
    public init(
        url: URL,
        destination: DownloadManager.Destination,
        options: DownloadOptions = DownloadOptions(),
        priority: DownloadPriority = .normal,
        after: [DownloadID] = [],
        rateLimit: Int64? = nil,
        isPaused: Bool = false,
        origin: DownloadOrigin = .library
    ) {
        // A URL's `user:password@` becomes the download's credentials (unless some were given), so the URL that is
        // stored, logged and shown carries none.
        var options = options
        if let (bare, credentials) = Self.splitCredentials(url) {
            self.url = bare
            if options.network.credentials == nil { options.network.credentials = credentials }
        } else {
            self.url = url
        }
        self.destination = destination
        self.options = options
        self.priority = priority
        self.after = after
        self.rateLimit = rateLimit
        self.isPaused = isPaused
        self.origin = origin
    }

    /// The URL without its user information, and the credentials it held (percent-decoded); nil when it has none.
    static func splitCredentials(_ url: URL) -> (URL, Credentials)? {
        // User information needs an `@`: most URLs are passed without taking them apart.
        guard url.absoluteString.utf8.contains(UInt8(ascii: "@")) else { return nil }
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false),
            let user = components.user, !user.isEmpty || components.password != nil
        else { return nil }
        let credentials = Credentials(user: user, password: components.password ?? "")
        components.user = nil
        components.password = nil
        guard let bare = components.url else { return nil }
        return (bare, credentials)
    }
}
