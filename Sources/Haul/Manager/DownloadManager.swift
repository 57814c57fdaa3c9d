import Foundation
import HaulCore
import Logging
import Synchronization

/// The public API of Haul: add downloads, control them, watch them. Downloads run under a concurrency limit,
/// survive the process being killed (the store keeps every byte's offset), and report state and progress as an
/// `AsyncSequence` of events.
public actor DownloadManager {
    enum StopReason { case pause, cancel, exit, leaseLost }

    let configuration: Configuration
    let store: any DownloadStoring
    /// The store as several workers share it, when it is such a store: this manager is then one worker of a fleet
    /// (`DownloadManager+Fleet`).
    let leasing: (any LeasingStore)?
    /// This manager's name as the runner of its downloads: its worker's in a fleet, else the host's.
    public nonisolated let workerName: String
    /// Whether a claim is under way (one at a time).
    var isClaiming = false
    let transport: any HTTPTransport
    let hub: EventHub
    /// The running downloads' shared ticks.
    let metronome: Metronome
    /// The clocks every run and limiter reads (`Configuration.clock`, `idleClock`): made once, as each is a set of
    /// closures its users share.
    let engineClock: EngineClock
    let engineIdleClock: EngineClock
    /// The downloads: every one on one machine; in a fleet, those that run here (`DownloadManager+Lookups`).
    let catalog = Catalog()
    /// A fleet's counts per state, as the store had them at the last count, and when the next count is due (on the
    /// idle clock).
    var fleetCounts: [DownloadState: Int] = [:]
    var countsDue: Duration?
    /// A fleet's worker: the last of the store's events it read, and when it last pruned old ones (on the idle
    /// clock).
    var fleetPosition = EventID(run: 0, sequence: 0)
    var prunedAt: Duration?
    /// How many workers of a fleet share its rate limit (those that transfer, this one counted), as the last pulse
    /// told.
    var workersSharingRate = 1
    /// The connections to each host across all downloads, within `settings.maxConnectionsPerHost`.
    let hostConnections: HostConnections
    /// A fleet's worker: whether it is asking the store for hosts' slots, whether to ask again when that ends, and
    /// the hosts where another worker waits for slots (as the last answer told).
    var isAskingForHosts = false
    var asksForHostsAgain = false
    var contestedHosts: Set<String> = []
    /// The downloads a fleet's worker removed since it last read the fleet's changes (which show no removals): their
    /// dependents fail.
    var removedHere: [String] = []
    /// The folder an add last opened and found writable, and when: adds within a second into it are not checked
    /// again (adding 10,000 one request at a time checked the same folder 10,000 times). A folder found missing or
    /// read-only is never remembered; one that becomes so within that second fails its downloads with the same clear
    /// error when they start, and one replaced meanwhile fails its identity check.
    var recentlyWritable: FolderMemo.Recent?
    /// The folders confined downloads may write to, held from the start (`Configuration.allowedFolders`).
    public nonisolated let allowedFolders: AllowedFolders
    var ids = DownloadIDSource()
    /// The last ten minutes of speed, one sample for each second of `run()`, and when the newest was taken.
    var speeds = SpeedHistory(capacity: 600)
    var speedsEnd: Date?
    var settings: ManagerSettings {
        didSet { settingsMirror.withLock { $0 = settings } }
    }
    /// `settings`, readable without a hop onto the actor (`settingsNow`).
    let settingsMirror: Mutex<ManagerSettings>
    var tasks: [String: Task<Void, Never>] = [:]
    /// Which process runs a download, where other processes may run this store's downloads too (`RunLocks`); nil
    /// for a daemon (it owns its state folder), a fleet's worker (its leases say it) and a store in memory.
    let runLocks: RunLocks?
    /// Queued downloads another process runs, started here once it lets them go (`DownloadManager+RunLocks`).
    var heldElsewhere: Set<String> = []
    var heldElsewhereWatch: Task<Void, Never>?
    /// Running downloads whose bytes have all arrived and that are being verified, synced and moved into place: they
    /// no longer hold one of the `maxConcurrentDownloads` transfer slots (at most as many again at once).
    var finishing: Set<String> = []
    /// Downloads that hold a transfer slot.
    var transferring: Int { tasks.count - finishing.count }
    /// How many `holdingStarts` are under way: while any is, no queued download starts.
    var startsHeld = 0
    let globalLimiter: RateLimiter
    var downloadLimiters: [String: RateLimiter] = [:]
    var stopReasons: [String: StopReason] = [:]
    var sessionIDs: Set<String> = []
    /// The downloads added for the other files of a Metalink a download's URL answered, by that download.
    var followUps: [String: Task<[DownloadID], Never>] = [:]
    var results: [String: DownloadResult] = [:]
    var errors: [String: DownloadError] = [:]
    /// A fleet's worker: the downloads whose ends it took in, oldest first; `results` and `errors` keep those of the
    /// newest `endsRemembered` (to twice as many, then trimmed at once).
    var endedHere: [String] = []
    static let endsRemembered = 1000
    var waiters: [String: [CheckedContinuation<DownloadResult, any Error>]] = [:]
    /// Waits of `results(of:)`: the ids not ended yet, and whom to resume when none is left.
    var batchWaiters: [(open: Set<String>, continuation: CheckedContinuation<Void, Never>)] = []
    /// Waits of `waitUntilStopped`, by a key of their own (a cancelled wait removes itself).
    var stopWaiters: [Int: StopWaiter] = [:]
    var nextStopWaiter = 0
    var isShutDown = false
    /// Why `run()` stops before it is cancelled: this worker can no longer run (its name was taken).
    var cannotRun: DownloadError?
    /// The deliveries of notices under way, by download and sink (`DownloadManager+Notices`).
    var noticeTasks: [NoticeKey: Task<Void, Never>] = [:]
    /// The refresh commands running for expired links, and the bytes each download held when its link was last
    /// refreshed (`DownloadManager+Links`).
    var refreshTasks: [String: Task<Void, Never>] = [:]
    var refreshedAt: [String: Int64] = [:]
    /// The settings' sort rules, parsed.
    var sorting = SortRules()
    /// The settings' schedule, and what it changes now (`DownloadManager+Schedule`).
    var timetable = Schedule()
    var scheduleEffect: Schedule.Effect?
    /// The hooks and webhooks told of each end: `Configuration.notices` until `setNotices(_:)` replaces them.
    var notices: Notices

    /// `$HAUL_STATE_DIR`, else `$XDG_STATE_HOME/haul`, else `~/.local/state/haul`.
    public static func defaultStateDirectory() -> String {
        let environment = ProcessInfo.processInfo.environment
        if let directory = environment["HAUL_STATE_DIR"], !directory.isEmpty { return directory }
        if let state = environment["XDG_STATE_HOME"], !state.isEmpty {
            return (state as NSString).appendingPathComponent("haul")
        }
        return (NSHomeDirectory() as NSString).appendingPathComponent(".local/state/haul")
    }

    /// Opens the store and recovers from an earlier process: downloads it left running are queued again.
    /// With `transport` nil the manager uses the live AsyncHTTPClient transport.
    public init(configuration: Configuration = Configuration(), transport: (any HTTPTransport)? = nil)
        throws(DownloadError)
    {
        self.configuration = configuration
        notices = configuration.notices
        allowedFolders = try AllowedFolders(configuration.allowedFolders)
        if let shared = configuration.store {
            store = shared
        } else if let directory = configuration.stateDirectory {
            store = try DownloadStore(directory: directory, exclusive: configuration.ownsStateDirectory)
        } else {
            store = try DownloadStore()
        }
        // Asked before this manager's own first write (its run).
        let isEmpty = store.startedEmpty
        leasing = store.leasing
        runLocks =
            leasing == nil && configuration.store == nil && !configuration.ownsStateDirectory
            ? configuration.stateDirectory.flatMap(RunLocks.init(state:)) : nil
        workerName = leasing?.worker ?? ProcessInfo.processInfo.hostName
        let logger = configuration.logger
        store.onLostWrite { error in
            logger.error("a state database write was lost: \(error.message); the record keeps its earlier values")
        }
        self.transport = transport ?? LiveTransport()
        engineClock = EngineClock(configuration.clock)
        engineIdleClock = EngineClock(configuration.idleClock)
        metronome = Metronome(
            clock: engineIdleClock,
            interval: min(configuration.engine.progressInterval, .milliseconds(100)))
        if let leasing {
            // Where the fleet's events begin for this worker: what changes from now on is read, under the store's ids.
            fleetPosition = try leasing.eventPosition()
            hub = EventHub(fleetAt: fleetPosition, replayCapacity: configuration.replayCapacity)
        } else {
            hub = EventHub(run: try store.beginRun(), replayCapacity: configuration.replayCapacity)
        }
        var settings = ManagerSettings(
            maxConcurrentDownloads: max(1, configuration.maxConcurrentDownloads), rateLimit: configuration.rateLimit,
            connectionsPerDownload: configuration.connectionsPerDownload,
            maxConnectionsPerHost: configuration.maxConnectionsPerHost,
            maxDownloadsPerHost: configuration.maxDownloadsPerHost)
        settings.sortRules = configuration.sortRules
        if configuration.persistsSettings, let stored = try store.settings() { settings = stored }
        self.settings = settings
        settingsMirror = Mutex(settings)
        sorting = try SortRules(parsing: settings.sortRules)
        timetable = (try? Schedule(parsing: settings.schedule)) ?? Schedule()
        scheduleEffect = Self.effect(of: timetable, at: configuration.calendar)
        globalLimiter = RateLimiter(
            bytesPerSecond: scheduleEffect?.rate ?? settings.rateLimit, clock: engineClock)
        hostConnections = HostConnections(limit: settings.maxConnectionsPerHost, granted: leasing != nil)
        if let leasing {
            // A worker of a fleet reads no downloads at start: it claims what it will run, and asks the store the
            // rest. A download another worker left running is taken over once its lease expires, not here.
            fleetCounts = try leasing.counts()
        } else {
            var recovered: [DownloadRecord] = []
            for var record in isEmpty ? [] : try store.allRecords() {
                if record.state.isActive, configuration.recoversInterruptedDownloads {
                    // Running when the process died: queued again, in its old place.
                    try record.apply(.interruptedByExit)
                    record.activeConnections = 0
                    recovered.append(record)
                }
                catalog.keep(record)
            }
            hub.markEnded(
                catalog.all.filter { [.completed, .failed, .cancelled].contains($0.state) }.map { DownloadID($0.id) })
            try store.save(recovered)
        }
        leasing?.onLostLease { [weak self] id in
            Task { await self?.leaseLost(id) }
        }
        leasing?.onCommand { [weak self] id, command in
            Task { await self?.obey(command, for: id) }
        }
        hostConnections.onUnmet { [weak self] in
            Task { await self?.askForHostSlots() }
        }
    }

    /// Starts the downloads the store holds as queued (when `startsStoredDownloads`), under the schedule's rules in
    /// force now. Call once after `init`.
    public func start() throws(DownloadError) {
        deliverStoredNotices()
        checkSchedule()
        try schedule()
    }

    /// Runs the manager as a long-lived service: starts what the store holds, publishes `stats` about once a second
    /// while anything runs, and when the calling task is cancelled shuts down (running downloads flush their exact
    /// offsets and stay queued for the next start). Every `heartbeatInterval` seconds, readers of `subscribe` get a
    /// heartbeat (`EventSubscription.AsyncIterator.nextDelivery()`), so a quiet stream can say it is alive.
    ///
    /// A fleet's worker also stops when it can no longer run, and throws why after the same shutdown: another process
    /// took its name while it was stopped for longer than a lease (`locked`).
    public func run(heartbeatEvery heartbeatInterval: Int = 15) async throws(DownloadError) {
        try? start()
        let clock = engineIdleClock
        let renewals = Task { await renewLeases(clock: clock) }
        var seconds = 0
        while !Task.isCancelled && cannotRun == nil {
            do { try await clock.sleep(.seconds(1)) } catch { break }
            if cannotRun != nil { break }
            seconds += 1
            await followFleet()
            recordSpeeds()
            checkSchedule()
            if !tasks.isEmpty { hub.emit(.stats(stats())) }
            if seconds % max(1, heartbeatInterval) == 0 { hub.heartbeat() }
        }
        renewals.cancel()
        await shutdown()
        if let cannotRun { throw cannotRun }
    }

}
