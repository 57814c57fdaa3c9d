import Foundation
import HaulCore
import Logging
import Synchronization

extension DownloadManager {
    /// How the manager behaves.
    public struct Configuration: Sendable {
        /// Settings every runner reads.
        public struct Engine: Sendable {
            /// Backoff between retries.
            public var retryPolicy = RetryPolicy()
            /// Time between checkpoints while bytes arrive.
            public var checkpointInterval: Duration = .seconds(1)
            /// Bytes between checkpoints.
            public var checkpointBytes: Int64 = 16 << 20
            /// Time between progress events of one download.
            public var progressInterval: Duration = .milliseconds(100)
            /// The User-Agent when a download sets none.
            public var userAgent = "haul/\(HaulVersion.current)"
            /// How long the connection ramp measures throughput before it judges an added connection.
            public var connectionRampWindow: Duration = .milliseconds(
                ProcessEnvironment.variables["HAUL_RAMP_MS"].flatMap { Int64($0) } ?? 100)
            /// Jitter in 0...1 for the backoff; injectable for tests.
            public var jitter: @Sendable () -> Double = { Double.random(in: 0...1) }

            /// The defaults.
            public init() {}
        }

        /// Where the store lives; nil keeps it in memory (nothing survives the process).
        public var stateDirectory: String?
        /// A store opened elsewhere (the PostgreSQL store several workers share) to use instead of the SQLite store
        /// in `stateDirectory`.
        public var store: (any DownloadStoring)?
        /// Downloads transferring at once. A download whose bytes have all arrived (verifying, syncing and moving
        /// its file into place) gives its slot to the next one; at most as many again finish at the same time.
        public var maxConcurrentDownloads = 3
        /// A limit on all downloads together, in bytes a second (nil: none). `setRateLimit(_:)` changes it later.
        public var rateLimit: Int64?
        /// The most connections a download opens when its options do not say otherwise (what `settings` reports).
        public var connectionsPerDownload = DownloadOptions.defaultMaxConnections
        /// The most connections to one host across all downloads (nil: no limit); `update(_:)` changes it later.
        public var maxConnectionsPerHost: Int?
        /// The most downloads of one host transferring at once (nil: no limit); `update(_:)` changes it later.
        public var maxDownloadsPerHost: Int?
        /// Rules that sort folder downloads into folders beneath theirs (`SortRules`); `update(_:)` changes them.
        public var sortRules: [String] = []
        /// Whether settings changed while running are stored, and stored settings replace the three above when the
        /// manager opens the store (the daemon's behaviour; `haul get` keeps its flags to itself).
        public var persistsSettings = false
        /// Whether downloads left queued in the store by an earlier process start by themselves. The `haul get`
        /// command turns this off so that it only runs what it was given.
        public var startsStoredDownloads = true
        /// Whether downloads the store holds as running, left so by a process that ended without stopping them, are
        /// queued again when the manager opens the store. Commands that only edit the list (`haul rm`, `haul clean`)
        /// turn this off: a download another process runs stays its own, and cannot be removed; so does `haul get`
        /// when other commands run downloads on the store (`StateLock.joinRunners`), and then a running download it
        /// is asked for again is tried here, where the part file's lock says whether its process still runs it.
        public var recoversInterruptedDownloads = true
        /// Whether this process owns the state folder for as long as the manager runs (the daemon, which holds the
        /// folder's lock): the store is then opened for this process alone, which makes every commit cheaper. Other
        /// processes cannot open it meanwhile.
        public var ownsStateDirectory = false
        /// Who `add(_:to:options:priority:after:)` records as having added a download.
        public var origin = DownloadOrigin.library
        /// The folders confined downloads (those of the daemon's network door, `DownloadOrigin.isConfined`) may write
        /// to: opened once when the manager starts and held (`allowedFolders`); a confined download's folder is
        /// opened beneath the one its path lies in at every start.
        public var allowedFolders: [String] = []
        /// How many of the newest events are kept for subscribers that reconnect; 0 keeps none (a process whose
        /// events no client reconnects to, such as `haul get`).
        public var replayCapacity = 10_240
        /// The clock for backoff, checkpoints and progress.
        public var clock: any Clock<Duration> = ContinuousClock()
        /// The clock for idle timeouts and the once-a-second stats of `run()` (real time by default, since it races
        /// real sockets).
        public var idleClock: any Clock<Duration> = ContinuousClock()
        /// Runner settings.
        public var engine = Engine()
        /// The hooks and webhooks told of each download's end.
        public var notices = Notices()
        /// The wall time and time zone the settings' schedule is read in.
        public var calendar: any CalendarClock = SystemCalendar()
        /// Where log messages go.
        public var logger = Logger(label: "haul")

        /// A configuration with the store in `stateDirectory` (nil: in memory).
        public init(stateDirectory: String? = DownloadManager.defaultStateDirectory()) {
            self.stateDirectory = stateDirectory
        }
    }

    /// Where a download writes.
    public enum Destination: Sendable, Equatable {
        /// This exact path.
        case file(String)
        /// This folder, under the name the server or the URL gives (sanitised).
        case directory(String)
    }

    /// What a download looks like now.
    public typealias Snapshot = DownloadSnapshot

    /// Where `move(_:to:)` puts a download.
    public enum QueueEnd: Sendable {
        /// Before every other download of its priority.
        case top
        /// After every other download of its priority.
        case bottom
    }

    /// One added download: its id, and whether it is new (false: an existing download of the same URL to the same
    /// destination was returned, resumed when it was paused).
    public struct Added: Sendable, Equatable {
        /// The download.
        public var id: DownloadID
        /// Whether the call created it.
        public var isNew: Bool
    }

    /// A place in the queue order, for paging: the downloads after it come next.
    public struct QueueCursor: Sendable, Hashable, Codable {
        package var priority: Int
        package var position: Double
        package var id: String

        /// The cursor as text, for a URL: the priority, the position's bits in hex, and the id.
        public var text: String { "\(priority)_\(String(position.bitPattern, radix: 16))_\(id)" }

        /// Parses `text`; nil when it is not a cursor.
        public init?(text: String) {
            let parts = text.split(separator: "_", maxSplits: 2)
            guard parts.count == 3, let priority = Int(parts[0]), let bits = UInt64(parts[1], radix: 16) else {
                return nil
            }
            self.priority = priority
            position = Double(bitPattern: bits)
            id = String(parts[2])
        }

        package init(_ record: DownloadRecord) {
            self.init(priority: record.priority, position: record.queuePosition, id: record.id)
        }

        package init(priority: Int, position: Double, id: String) {
            self.priority = priority
            self.position = position
            self.id = id
        }

        /// Whether `self` comes before `other` in queue order: higher priority, then lower position, then id.
        package func precedes(_ other: QueueCursor) -> Bool {
            if priority != other.priority { return priority > other.priority }
            if position != other.position { return position < other.position }
            return id < other.id
        }
    }

    /// A failure of `add(_:)` for a list: which item and why. Nothing of the list was added.
    public struct BatchError: Error, Sendable, CustomStringConvertible {
        /// The index of the item in the list.
        public var index: Int
        /// Why it cannot be added.
        public var error: DownloadError

        public var description: String { "item \(index): \(error.message)" }
    }
}

/// The events of one subscriber of `DownloadManager.events(for:)`, as they happen.
public struct DownloadEvents: AsyncSequence, Sendable {
    public typealias Element = DownloadEvent
    let subscription: EventSubscription

    /// Ends the stream from outside the reading task.
    public func cancel() { subscription.cancel() }

    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: EventSubscription.AsyncIterator

        public mutating func next() async -> DownloadEvent? {
            await base.next()?.event
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: subscription.makeAsyncIterator()) }
}

/// The version of Haul.
public enum HaulVersion {
    /// The version string shown by `haul --version`.
    public static let current = "0.1.0"
}
