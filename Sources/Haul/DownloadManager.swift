import Foundation
import HaulCore
import Logging
import Synchronization

/// The public API of Haul: add downloads, control them, watch them. Downloads run under a concurrency limit,
/// survive the process being killed (the store keeps every byte's offset), and report state and progress as an
/// `AsyncSequence` of events.
public actor DownloadManager {
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
        /// Downloads transferring at once. A download whose bytes have all arrived (verifying, syncing and moving
        /// its file into place) gives its slot to the next one; at most as many again finish at the same time.
        public var maxConcurrentDownloads = 3
        /// A limit on all downloads together, in bytes a second (nil: none). `setRateLimit(_:)` changes it later.
        public var rateLimit: Int64?
        /// The most connections a download opens when its options do not say otherwise (what `settings` reports).
        public var connectionsPerDownload = DownloadOptions.defaultMaxConnections
        /// Whether settings changed while running are stored, and stored settings replace the three above when the
        /// manager opens the store (the daemon's behaviour; `haul get` keeps its flags to itself).
        public var persistsSettings = false
        /// Whether downloads left queued in the store by an earlier process start by themselves. The `haul get`
        /// command turns this off so that it only runs what it was given.
        public var startsStoredDownloads = true
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
        /// How many of the newest events are kept for subscribers that reconnect.
        public var replayCapacity = 10_240
        /// The clock for backoff, checkpoints and progress.
        public var clock: any Clock<Duration> = ContinuousClock()
        /// The clock for idle timeouts and the once-a-second stats of `run()` (real time by default, since it races
        /// real sockets).
        public var idleClock: any Clock<Duration> = ContinuousClock()
        /// Runner settings.
        public var engine = Engine()
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
        fileprivate var priority: Int
        fileprivate var position: Double
        fileprivate var id: String

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

        init(_ record: DownloadRecord) {
            priority = record.priority
            position = record.queuePosition
            id = record.id
        }

        /// Whether `self` comes before `other` in queue order: higher priority, then lower position, then id.
        func precedes(_ other: QueueCursor) -> Bool {
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

    private enum StopReason { case pause, cancel, exit }

    private let configuration: Configuration
    private let store: DownloadStore
    private let transport: any HTTPTransport
    private let hub: EventHub
    /// The running downloads' shared ticks.
    private let metronome: Metronome
    private var catalog = Catalog()
    /// The folder an add last opened and found writable, and when: adds within a second into it are not checked
    /// again (adding 10,000 one request at a time checked the same folder 10,000 times). A folder found missing or
    /// read-only is never remembered; one that becomes so within that second fails its downloads with the same clear
    /// error when they start, and one replaced meanwhile fails its identity check.
    private var recentlyWritable: FolderMemo.Recent?
    /// The folders confined downloads may write to, held from the start (`Configuration.allowedFolders`).
    public nonisolated let allowedFolders: AllowedFolders
    private var ids = DownloadIDSource()
    /// The last ten minutes of speed, one sample for each second of `run()`, and when the newest was taken.
    private var speeds = SpeedHistory(capacity: 600)
    private var speedsEnd: Date?
    private var settings: ManagerSettings {
        didSet { settingsMirror.withLock { $0 = settings } }
    }
    /// `settings`, readable without a hop onto the actor (`settingsNow`).
    private let settingsMirror: Mutex<ManagerSettings>
    private var tasks: [String: Task<Void, Never>] = [:]
    /// Running downloads whose bytes have all arrived and that are being verified, synced and moved into place: they
    /// no longer hold one of the `maxConcurrentDownloads` transfer slots (at most as many again at once).
    private var finishing: Set<String> = []
    /// Downloads that hold a transfer slot.
    private var transferring: Int { tasks.count - finishing.count }
    private let globalLimiter: RateLimiter
    private var downloadLimiters: [String: RateLimiter] = [:]
    private var stopReasons: [String: StopReason] = [:]
    private var sessionIDs: Set<String> = []
    private var results: [String: DownloadResult] = [:]
    private var errors: [String: DownloadError] = [:]
    private var waiters: [String: [CheckedContinuation<DownloadResult, any Error>]] = [:]
    /// Waits of `results(of:)`: the ids not ended yet, and whom to resume when none is left.
    private var batchWaiters: [(open: Set<String>, continuation: CheckedContinuation<Void, Never>)] = []
    /// Waits of `waitUntilStopped`, by a key of their own (a cancelled wait removes itself).
    private var stopWaiters: [Int: StopWaiter] = [:]
    private var nextStopWaiter = 0
    private var isShutDown = false

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
        allowedFolders = try AllowedFolders(configuration.allowedFolders)
        if let directory = configuration.stateDirectory {
            store = try DownloadStore(directory: directory, exclusive: configuration.ownsStateDirectory)
        } else {
            store = try DownloadStore()
        }
        let logger = configuration.logger
        store.onLostWrite { error in
            logger.error("a state database write was lost: \(error.message); the record keeps its earlier values")
        }
        self.transport = transport ?? LiveTransport()
        metronome = Metronome(
            clock: EngineClock(configuration.idleClock),
            interval: min(configuration.engine.progressInterval, .milliseconds(100)))
        hub = EventHub(run: try store.beginRun(), replayCapacity: configuration.replayCapacity)
        var settings = ManagerSettings(
            maxConcurrentDownloads: max(1, configuration.maxConcurrentDownloads), rateLimit: configuration.rateLimit,
            connectionsPerDownload: configuration.connectionsPerDownload)
        if configuration.persistsSettings, let stored = try store.settings() { settings = stored }
        self.settings = settings
        settingsMirror = Mutex(settings)
        globalLimiter = RateLimiter(bytesPerSecond: settings.rateLimit)
        var recovered: [DownloadRecord] = []
        var catalog = Catalog()
        for var record in try store.allRecords() {
            if record.state.isActive {
                // Running when the process died: queued again, in its old place.
                record.state = .queued
                record.activeConnections = 0
                recovered.append(record)
            }
            catalog.keep(record)
        }
        self.catalog = catalog
        hub.markEnded(
            catalog.all.filter { [.completed, .failed, .cancelled].contains($0.state) }.map { DownloadID($0.id) })
        try store.save(recovered)
    }

    /// Starts the downloads the store holds as queued (when `startsStoredDownloads`). Call once after `init`.
    public func start() throws(DownloadError) {
        try schedule()
    }

    /// Runs the manager as a long-lived service: starts what the store holds, publishes `stats` about once a second
    /// while anything runs, and when the calling task is cancelled shuts down (running downloads flush their exact
    /// offsets and stay queued for the next start). Every `heartbeatInterval` seconds, readers of `subscribe` get a
    /// heartbeat (`EventSubscription.AsyncIterator.nextDelivery()`), so a quiet stream can say it is alive.
    public func run(heartbeatEvery heartbeatInterval: Int = 15) async {
        try? start()
        let clock = EngineClock(configuration.idleClock)
        var seconds = 0
        while !Task.isCancelled {
            do { try await clock.sleep(.seconds(1)) } catch { break }
            seconds += 1
            recordSpeeds()
            if !tasks.isEmpty { hub.emit(.stats(stats())) }
            if seconds % max(1, heartbeatInterval) == 0 { hub.heartbeat() }
        }
        await shutdown()
    }

    // MARK: Commands

    /// Adds a download and returns its id. The same URL to the same destination that is already queued, running or
    /// paused returns the existing id (a paused one is resumed); one that completed and whose file is still there
    /// returns its id with the result ready and fetches nothing.
    public func add(
        _ url: URL,
        to destination: Destination,
        options: DownloadOptions = DownloadOptions(),
        priority: DownloadPriority = .normal,
        after prerequisites: [DownloadID] = []
    ) throws(DownloadError) -> DownloadID {
        let request = DownloadRequest(
            url: url, destination: destination, options: options, priority: priority, after: prerequisites,
            origin: configuration.origin)
        do {
            return try add([request])[0].id
        } catch {
            throw error.error
        }
    }

    /// Adds several downloads in one transaction: either every one is added (or found, as the single `add` finds
    /// one) or, when one cannot be, none is and the error names its index. Costs O(log n) per download in the
    /// manager, whatever it holds.
    public func add(_ requests: [DownloadRequest]) throws(BatchError) -> [Added] {
        try add(requests, deferringCommit: false).added
    }

    /// Adds as `add(_:)` does but returns before the store has committed the new downloads: the manager's view,
    /// the events and the schedule already have them, and `committed(_:rollingBack:)` with the commit waits until
    /// the store has them too (and undoes the add when the store refused them). The daemon answers an add only then;
    /// meanwhile the manager takes further adds, and the store commits those that come together in one transaction.
    public func addDeferringCommit(_ requests: [DownloadRequest]) throws(BatchError) -> (
        added: [Added], commit: DownloadStore.Commit
    ) {
        let result = try add(requests, deferringCommit: true)
        guard let commit = result.commit else {
            throw BatchError(index: 0, error: DownloadError(.store, "the add was not queued for the store"))
        }
        return (result.added, commit)
    }

    /// `addDeferringCommit` for one download, with the download as it is now.
    public func addOneDeferringCommit(_ request: DownloadRequest) throws(DownloadError) -> (
        added: Added, download: Snapshot, commit: DownloadStore.Commit
    ) {
        let result: (added: [Added], commit: DownloadStore.Commit)
        do { result = try addDeferringCommit([request]) } catch { throw error.error }
        return (result.added[0], try snapshot(result.added[0].id), result.commit)
    }

    /// Waits until the store has committed an add made with `addDeferringCommit`. When it could not (the disk failed
    /// under it), the downloads it added are forgotten again (subscribers get `removed`) and the store's error is
    /// thrown.
    public nonisolated func committed(_ commit: DownloadStore.Commit, rollingBack added: [Added])
        async throws(DownloadError)
    {
        do { try await store.committed(commit) } catch {
            await rollBack(added.filter(\.isNew).map(\.id))
            throw error
        }
    }

    private func rollBack(_ ids: [DownloadID]) async {
        for id in ids {
            if let task = tasks[id.rawValue] {
                stopReasons[id.rawValue] = .cancel
                task.cancel()
                await task.value
            }
            guard let record = catalog[id.rawValue] else { continue }
            forget(record)
            sessionIDs.remove(id.rawValue)
            results[id.rawValue] = nil
            errors[id.rawValue] = nil
            hub.emit(.removed(id))
        }
    }

    private func add(_ requests: [DownloadRequest], deferringCommit: Bool) throws(BatchError) -> (
        added: [Added], commit: DownloadStore.Commit?
    ) {
        if isShutDown {
            throw BatchError(index: 0, error: DownloadError(.illegalTransition, "the manager has shut down"))
        }
        var added: [Added] = []
        added.reserveCapacity(requests.count)
        var fresh: [DownloadRecord] = []
        fresh.reserveCapacity(requests.count)
        var reused: [String: DownloadRecord] = [:]
        var inBatch: [Catalog.Target: String] = [:]
        if requests.count > 1 { inBatch.reserveCapacity(requests.count) }
        var folders = FolderMemo(recent: recentlyWritable, allowed: allowedFolders)
        for (index, request) in requests.enumerated() {
            do {
                let (key, record, folder) = try prepare(request, folders: &folders)
                if let id = inBatch[key] {
                    added.append(Added(id: DownloadID(id), isNew: false))
                } else if let existing = catalog.newest(at: key).flatMap({ catalog[$0] }) {
                    var record = existing
                    try reuse(&record, options: request.options, staysPaused: request.isPaused)
                    reused[record.id] = record
                    inBatch[key] = record.id
                    added.append(Added(id: DownloadID(record.id), isNew: false))
                } else {
                    var record = record
                    record.queuePosition = catalog.lastPosition + Double(fresh.count + 1)
                    try claimDestination(record: &record, in: folder, options: request.options)
                    fresh.append(record)
                    inBatch[key] = record.id
                    added.append(Added(id: DownloadID(record.id), isNew: true))
                }
            } catch {
                throw BatchError(index: index, error: error)
            }
        }
        recentlyWritable = folders.recent
        let changed = reused.values.filter { catalog[$0.id] != $0 }
        var commit: DownloadStore.Commit?
        if deferringCommit {
            commit = store.submitInsert(fresh, saving: changed)
        } else {
            do { try store.insert(fresh, saving: changed) } catch { throw BatchError(index: 0, error: error) }
        }
        for record in fresh {
            hub.emit(.added(snapshot(of: keep(record))))
        }
        for record in changed {
            errors[record.id] = nil
            if record.state != .completed { results[record.id] = nil }
            hub.emit(.changed(snapshot(of: keep(record))))
        }
        // Only a manager that leaves stored downloads alone needs to know which ones this process added.
        if !configuration.startsStoredDownloads {
            for item in added { sessionIDs.insert(item.id.rawValue) }
        }
        try? schedule()
        return (added, commit)
    }

    /// Checks one request and makes its record (not yet stored); returns the key that finds the same URL and
    /// destination.
    private func prepare(_ request: DownloadRequest, folders: inout FolderMemo) throws(DownloadError)
        -> (Catalog.Target, DownloadRecord, HeldFolder)
    {
        try Self.validate(request.url)
        for prerequisite in request.after where catalog[prerequisite.rawValue] == nil {
            throw DownloadError(.notFound, "no download with id \(prerequisite) to wait for")
        }
        try Self.checkRate(request.rateLimit)
        let urlText = request.url.absoluteString
        var record = DownloadRecord(
            id: ids.make().rawValue, url: urlText, finalURL: nil, directory: nil, destination: nil,
            state: request.isPaused ? .paused : .queued, totalLength: nil, durableOffset: 0, etag: nil,
            lastModified: nil, isLastModifiedStrong: false, isResumable: nil, isPartVerified: true,
            mayReplaceDestination: request.options.overwrite, attempts: 0, lastError: nil, options: request.options,
            priority: request.priority.rawValue, queuePosition: 0, prerequisites: request.after.map(\.rawValue),
            rateLimit: request.rateLimit, segments: nil, activeConnections: 0, createdAt: Date(), updatedAt: Date(),
            errorCode: nil, errorStatus: nil, origin: request.origin, completedAt: nil
        )
        let confined = allowedFolders.confine(request.origin)
        let folder: HeldFolder
        switch request.destination {
        case .file(let rawPath):
            if rawPath.hasSuffix("/") {
                throw DownloadError(.invalidArgument, "\(rawPath) names a folder; use a folder destination for it")
            }
            let path = Self.absolute(rawPath)
            folder = try folders.open(PathName.folder(of: path), confined: confined)
            let name = PathName.lastComponent(of: path)
            if (try folder.entry(name))?.kind == .folder {
                throw DownloadError(.destinationExists, "\(path) is a folder; use a folder destination for it")
            }
            record.destination = PathName.join(folder.path, name)
            record.folderIdentity = folder.identity
        case .directory(let rawPath):
            folder = try folders.open(folders.absolute(rawPath), confined: confined)
            record.directory = folder.path
            record.folderIdentity = folder.identity
        }
        return (Catalog.target(of: record), record, folder)
    }

    /// Pauses a queued or running download; a running one stops after flushing its exact offset.
    public func pause(_ id: DownloadID) async throws(DownloadError) {
        var record = try require(id)
        var machine = DownloadStateMachine(state: record.state)
        _ = try machine.apply(.pauseRequested)
        if await stopRunning(id, because: .pause) { return }
        record.state = .paused
        try persist(record)
        hub.emit(.changed(snapshot(of: record)))
    }

    /// Queues a paused or failed download again.
    public func resume(_ id: DownloadID) throws(DownloadError) {
        var record = try require(id)
        var machine = DownloadStateMachine(state: record.state)
        let event: DownloadStateMachine.Event = record.state == .paused ? .resumeRequested : .retryRequested
        _ = try machine.apply(event)
        guard record.state != .completed else {
            throw DownloadError(.illegalTransition, "cannot resume a download that is completed")
        }
        try requeue(&record)
    }

    /// Queues a failed or cancelled download again, from the bytes it still holds.
    public func retry(_ id: DownloadID) throws(DownloadError) {
        var record = try require(id)
        guard record.state == .failed || record.state == .cancelled else {
            throw DownloadError(
                .illegalTransition,
                "cannot retry a download that is \(record.state.rawValue); only a failed or "
                    + "cancelled one")
        }
        try requeue(&record)
    }

    private func requeue(_ record: inout DownloadRecord) throws(DownloadError) {
        record.state = .queued
        record.attempts = 0
        record.error = nil
        errors[record.id] = nil
        try persist(record)
        sessionIDs.insert(record.id)
        hub.emit(.changed(snapshot(of: record)))
        try schedule()
    }

    /// Stops a download and deletes its part file; the record stays, as `cancelled`.
    public func cancel(_ id: DownloadID) async throws(DownloadError) {
        var record = try require(id)
        var machine = DownloadStateMachine(state: record.state)
        _ = try machine.apply(.cancelRequested)
        if await stopRunning(id, because: .cancel) { return }
        try markCancelled(&record)
    }

    /// Cancels the running task of `id`, if any, and waits until its runner has flushed and `finished` has run.
    private func stopRunning(_ id: DownloadID, because reason: StopReason) async -> Bool {
        guard let task = tasks[id.rawValue] else { return false }
        stopReasons[id.rawValue] = reason
        task.cancel()
        await task.value
        return true
    }

    /// Deletes the part file and records the download as cancelled.
    private func markCancelled(_ record: inout DownloadRecord) throws(DownloadError) {
        DownloadFolder.deleteFiles(of: record, includingFile: false, allowed: allowedFolders)
        record.partIdentity = nil
        record.state = .cancelled
        record.durableOffset = 0
        record.segments = nil
        record.remoteFacts = nil
        try persist(record)
        finish(record.id, with: .failure(DownloadError(.cancelled, "download cancelled")))
        hub.emit(.changed(snapshot(of: record)))
    }

    /// Pauses every queued, running or waiting download.
    public func pauseAll() async {
        for record in queueOrder(catalog.all) where record.state == .queued || record.state.isActive {
            try? await pause(DownloadID(record.id))
        }
    }

    /// Queues every paused download again.
    public func resumeAll() {
        for record in queueOrder(catalog.all) where record.state == .paused {
            try? resume(DownloadID(record.id))
        }
    }

    /// Moves `id` in the queue to just before `other` (and takes `other`'s priority, so the move is what the queue
    /// shows). Running downloads keep running; the order decides what starts next.
    public func move(_ id: DownloadID, before other: DownloadID) throws(DownloadError) {
        var record = try require(id)
        let target = try require(other)
        guard record.id != target.id else { return }
        let ordered = queueOrder(catalog.all.filter { $0.priority == target.priority && $0.id != id.rawValue })
        let index = ordered.firstIndex { $0.id == target.id } ?? 0
        let previous = index > 0 ? ordered[index - 1].queuePosition : target.queuePosition - 1
        record.priority = target.priority
        record.queuePosition = (previous + target.queuePosition) / 2
        try reorder(record)
    }

    /// Moves `id` before or after every other download of its priority.
    public func move(_ id: DownloadID, to end: QueueEnd) throws(DownloadError) {
        var record = try require(id)
        let others = catalog.all.filter { $0.priority == record.priority && $0.id != record.id }.map(\.queuePosition)
        switch end {
        case .top: record.queuePosition = (others.min() ?? record.queuePosition) - 1
        case .bottom: record.queuePosition = max(others.max() ?? record.queuePosition, catalog.lastPosition) + 1
        }
        try reorder(record)
    }

    /// Changes the priority of `id`; it keeps its position among the downloads of its new priority.
    public func setPriority(_ priority: DownloadPriority, for id: DownloadID) throws(DownloadError) {
        var record = try require(id)
        guard record.priority != priority.rawValue else { return }
        record.priority = priority.rawValue
        try reorder(record)
    }

    private func reorder(_ record: DownloadRecord) throws(DownloadError) {
        try persist(record)
        hub.emit(.changed(snapshot(of: record)))
        try schedule()
    }

    /// Changes the most connections of one download (1...16), from its next run on (a running download keeps the
    /// connections it has).
    public func setConnections(_ connections: Int, for id: DownloadID) throws(DownloadError) {
        guard (1...DownloadOptions.connectionLimit).contains(connections) else {
            throw DownloadError(
                .invalidArgument,
                "connections must be between 1 and \(DownloadOptions.connectionLimit), not "
                    + "\(connections)")
        }
        var record = try require(id)
        record.options.maxConnectionsPerDownload = connections
        try persist(record)
        hub.emit(.changed(snapshot(of: record)))
    }

    /// Changes how many downloads run at once. Raising it starts queued ones at once; lowering it lets running
    /// downloads finish and starts no new one until fewer than the limit run.
    public func setMaxConcurrentDownloads(_ limit: Int) throws(DownloadError) {
        var changed = settings
        changed.maxConcurrentDownloads = limit
        try update(changed)
    }

    /// Limits all downloads together to `bytesPerSecond` (nil: no limit), at once for running downloads too.
    public func setRateLimit(_ bytesPerSecond: Int64?) throws(DownloadError) {
        var changed = settings
        changed.rateLimit = bytesPerSecond
        try update(changed)
    }

    /// The settings now.
    public func currentSettings() -> ManagerSettings { settings }

    /// The settings now, read without waiting for the actor (a request that only needs the defaults does not queue
    /// behind the manager's work).
    public nonisolated var settingsNow: ManagerSettings { settingsMirror.withLock { $0 } }

    /// Changes the settings at once (and stores them when `persistsSettings`); subscribers get a `settings` event.
    public func update(_ new: ManagerSettings) throws(DownloadError) {
        guard new.maxConcurrentDownloads >= 1 else {
            throw DownloadError(
                .invalidArgument, "the concurrency limit must be at least 1, not \(new.maxConcurrentDownloads)")
        }
        try Self.checkRate(new.rateLimit)
        guard (1...DownloadOptions.connectionLimit).contains(new.connectionsPerDownload) else {
            throw DownloadError(
                .invalidArgument,
                "connections must be between 1 and \(DownloadOptions.connectionLimit), not "
                    + "\(new.connectionsPerDownload)")
        }
        guard new != settings else { return }
        if configuration.persistsSettings { try store.saveSettings(new) }
        settings = new
        globalLimiter.setRate(new.rateLimit)
        hub.emit(.settings(new))
        try schedule()
    }

    /// Limits one download (all its connections) to `bytesPerSecond` (nil: no limit of its own), at once if it runs,
    /// and for every later run.
    public func setRateLimit(_ bytesPerSecond: Int64?, for id: DownloadID) throws(DownloadError) {
        try Self.checkRate(bytesPerSecond)
        var record = try require(id)
        record.rateLimit = bytesPerSecond
        try persist(record)
        downloadLimiters[id.rawValue]?.setRate(bytesPerSecond)
        hub.emit(.changed(snapshot(of: record)))
    }

    private static func checkRate(_ bytesPerSecond: Int64?) throws(DownloadError) {
        if let bytesPerSecond, bytesPerSecond <= 0 {
            throw DownloadError(.invalidArgument, "a rate limit must be positive, not \(bytesPerSecond) bytes a second")
        }
    }

    /// Forgets a download that is not running; with `deletingFile` also deletes its completed file.
    public func remove(_ id: DownloadID, deletingFile: Bool = false) throws(DownloadError) {
        let record = try require(id)
        guard tasks[id.rawValue] == nil else {
            throw DownloadError(
                .illegalTransition, "cannot remove a download that is running; pause or cancel it first")
        }
        DownloadFolder.deleteFiles(of: record, includingFile: deletingFile, allowed: allowedFolders)
        try store.delete(id: id.rawValue)
        forget(record)
        sessionIDs.remove(id.rawValue)
        // Whoever waits for its result hears that it is gone, instead of waiting for ever.
        finish(id.rawValue, with: .failure(DownloadError(.notFound, "download \(id) was removed")))
        errors[id.rawValue] = nil
        hub.emit(.removed(id))
    }

    /// Forgets every completed, cancelled and failed download (their files stay); returns how many.
    @discardableResult
    public func clean() throws(DownloadError) -> Int {
        let finished = queueOrder(catalog.all.filter { $0.state.isTerminal && tasks[$0.id] == nil })
        for record in finished { try remove(DownloadID(record.id)) }
        return finished.count
    }

    /// Stops every running download and waits until each has flushed its exact offset. By default they go back to
    /// `queued` and resume by themselves when a manager on the same store starts again (as after a crash); with
    /// `pausing` they become `paused`, as a user's pause would leave them. The manager accepts no work afterwards.
    public func shutdown(pausing: Bool = false) async {
        isShutDown = true
        // Cancel all first, then wait: the runners flush in parallel.
        for (id, task) in tasks {
            stopReasons[id] = pausing ? .pause : .exit
            task.cancel()
        }
        for task in Array(tasks.values) { await task.value }
        // Every queued write reaches the store before the manager lets go of it.
        store.flush()
        for id in Array(waiters.keys) {
            finish(id, with: .failure(DownloadError(.cancelled, "download paused: the manager shut down")))
            errors[id] = nil
        }
        resumeBatchWaiters(ending: nil)
        for key in Array(stopWaiters.keys) { endStopWait(key) }
        hub.finishAll()
    }

    // MARK: Observing

    /// Events of every download, or of one download only when `id` is given, from now on. Each call makes a new
    /// stream; it is not bounded (for readers in the same process that keep up). The stream of one download ends
    /// with it: after the event that completes, fails, cancels or removes it, or at once when it has already ended
    /// (a failed download that is retried later needs a new stream).
    public nonisolated func events(for id: DownloadID? = nil) -> DownloadEvents {
        DownloadEvents(subscription: hub.subscribe(filter: id, after: nil, bounded: false, snapshot: nil))
    }

    /// A subscription for a reader that may fall behind or reconnect (the daemon's event stream). With `after`, the
    /// id of the last event a reader saw, it begins with exactly the events that followed, when they are still in
    /// the replay window and from this run of the store; otherwise with a `snapshot` event of everything. It is
    /// bounded: queued progress collapses into the newest per download when the reader falls behind, and the
    /// subscription ends when it falls too far (the reader reconnects with its last id).
    public func subscribe(to id: DownloadID? = nil, after: EventID? = nil) -> EventSubscription {
        hub.subscribe(filter: id, after: after, bounded: true) {
            .snapshot(self.managerSnapshot(for: id))
        }
    }

    /// Everything now: the downloads (only `id` when given), totals and settings.
    public func managerSnapshot(for id: DownloadID? = nil) -> ManagerSnapshot {
        let downloads =
            id.map { id in catalog[id.rawValue].map { [snapshot(of: $0)] } ?? [] }
            ?? queueOrder(catalog.all).map { snapshot(of: $0) }
        return ManagerSnapshot(downloads: downloads, stats: stats(), settings: settings)
    }

    /// The id of the newest event.
    public nonisolated var lastEventID: EventID { hub.lastID }

    /// The download now (live bytes, speed and segments while it runs).
    public func snapshot(_ id: DownloadID) throws(DownloadError) -> Snapshot {
        snapshot(of: try require(id))
    }

    /// The downloads with these ids that the manager still has, in the order given.
    public func snapshots(ofExisting ids: [DownloadID]) -> [Snapshot] {
        ids.compactMap { catalog[$0.rawValue].map { snapshot(of: $0) } }
    }

    /// The downloads with these ids, in the order given (one actor hop for a whole list).
    public func snapshots(of ids: [DownloadID]) throws(DownloadError) -> [Snapshot] {
        var all: [Snapshot] = []
        all.reserveCapacity(ids.count)
        for id in ids { all.append(snapshot(of: try require(id))) }
        return all
    }

    /// Every download, in queue order.
    public func snapshots() throws(DownloadError) -> [Snapshot] {
        queueOrder(catalog.all).map { snapshot(of: $0) }
    }

    /// A page of the downloads in queue order: those in `states` (all when nil) after `cursor`, at most `limit`
    /// (all when nil), and the cursor of the last one when more follow. Paging stays stable while downloads change:
    /// a page begins after the place of the last download of the page before.
    public func snapshots(in states: Set<DownloadState>?, after cursor: QueueCursor?, limit: Int?)
        -> (downloads: [Snapshot], next: QueueCursor?)
    {
        let page = page(in: states, after: cursor, limit: limit)
        return (page.ids.compactMap { catalog[$0.rawValue].map { snapshot(of: $0) } }, page.next)
    }

    /// The ids of a page, as `snapshots(in:after:limit:)` chooses them, for a reader that fetches the downloads a
    /// few at a time (`snapshots(of:)`) instead of holding thousands of them at once.
    public func page(in states: Set<DownloadState>?, after cursor: QueueCursor?, limit: Int?)
        -> (ids: [DownloadID], next: QueueCursor?)
    {
        var chosen: [QueueCursor] = []
        for record in catalog.all where states?.contains(record.state) ?? true {
            let place = QueueCursor(record)
            if cursor.map({ $0.precedes(place) }) ?? true { chosen.append(place) }
        }
        chosen.sort { $0.precedes($1) }
        var next: QueueCursor?
        if let limit, chosen.count > limit {
            chosen.removeLast(chosen.count - max(0, limit))
            next = chosen.last
        }
        return (chosen.map { DownloadID($0.id) }, next)
    }

    /// The speed samples `run()` took, one a second for the last ten minutes (oldest first), in total and for the
    /// downloads that ran (of `id` only, when given), with the time of the newest sample (nil before the first).
    public func speedSamples(of id: DownloadID? = nil) -> (
        end: Date?, total: [Double], downloads: [String: SpeedHistory.Track]
    ) {
        (speedsEnd, speeds.total, speeds.tracks(of: id?.rawValue))
    }

    private func recordSpeeds() {
        let progress = hub.allProgress()
        var running: [String: Double] = [:]
        for id in tasks.keys { running[id] = progress[DownloadID(id)]?.bytesPerSecond ?? 0 }
        speeds.record(total: running.values.reduce(0, +), running: running)
        speedsEnd = Date()
    }

    /// Speed of all running downloads and a count per state.
    public func stats() -> DownloadStats {
        let progress = hub.allProgress()
        let speed = tasks.keys.reduce(0.0) { $0 + (progress[DownloadID($1)]?.bytesPerSecond ?? 0) }
        var all: [DownloadState: Int] = [:]
        for state in DownloadState.allCases { all[state] = catalog.counts[state, default: 0] }
        return DownloadStats(bytesPerSecond: speed, counts: all)
    }

    /// Waits until the download completes (returning its result) or fails or is cancelled (throwing its error).
    public func result(of id: DownloadID) async throws -> DownloadResult {
        if let known = try endedResult(of: id) { return try known.get() }
        return try await withCheckedThrowingContinuation { continuation in
            waiters[id.rawValue, default: []].append(continuation)
        }
    }

    /// The outcome of each of `ids`, in their order, once every one has ended: what `result(of:)` returns or throws
    /// for each, in one wait for the whole batch instead of one trip to the manager for every download. A shutdown
    /// ends the wait: those that had not ended are `cancelled`; an unknown or removed id is `notFound`.
    public func results(of ids: [DownloadID]) async -> [Result<DownloadResult, any Error>] {
        // Still running or waiting: known and not ended (an unknown id is not waited for).
        let open = Set(
            ids.filter { id in
                do { return try endedResult(of: id) == nil } catch { return false }
            }.map(\.rawValue))
        if !open.isEmpty, !isShutDown {
            await withCheckedContinuation { continuation in
                batchWaiters.append((open, continuation))
            }
        }
        return ids.map { id in
            Result { () throws -> DownloadResult in
                guard let known = try endedResult(of: id) else {
                    throw DownloadError(.cancelled, "download paused: the manager shut down")
                }
                return try known.get()
            }
        }
    }

    /// Whether none of `ids` (no download at all, when nil) is queued, running or waiting for the network: each has
    /// completed, failed, been cancelled or paused. An unknown or removed id has stopped.
    public func haveStopped(_ ids: [DownloadID]? = nil) -> Bool {
        guard let ids else { return workingCount == 0 }
        return ids.allSatisfy { id in catalog[id.rawValue].map { !Self.holdsWork($0.state) } ?? true }
    }

    /// Returns once `haveStopped(ids)` holds (downloads added meanwhile count when `ids` is nil; a named download
    /// queued again counts again), when the calling task is cancelled, or when the manager shuts down: ask
    /// `haveStopped` which. Each change of a download's state is checked against the waits, none is polled.
    public func waitUntilStopped(_ ids: [DownloadID]? = nil) async {
        guard !isShutDown, !haveStopped(ids) else { return }
        let key = nextStopWaiter
        nextStopWaiter += 1
        let named = ids.map { Set($0.map(\.rawValue)) }
        let open = named.map { names in names.filter { catalog[$0].map { Self.holdsWork($0.state) } ?? false } }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                if Task.isCancelled {
                    continuation.resume()
                } else {
                    stopWaiters[key] = StopWaiter(named: named, open: open ?? [], continuation: continuation)
                }
            }
        } onCancel: {
            Task { await self.endStopWait(key) }
        }
    }

    /// How many waits of `waitUntilStopped` are pending (for tests that must know a wait has begun).
    public var pendingStopWaits: Int { stopWaiters.count }

    private func endStopWait(_ key: Int) {
        stopWaiters.removeValue(forKey: key)?.continuation.resume()
    }

    /// Queued, running or waiting for the network: the states a wait for downloads to stop waits out.
    private static func holdsWork(_ state: DownloadState) -> Bool { state == .queued || state.isActive }

    private var workingCount: Int {
        catalog.counts[.queued, default: 0] + catalog.counts[.running, default: 0]
            + catalog.counts[.waitingForNetwork, default: 0]
    }

    /// Tells the waits of `waitUntilStopped` that `id` now holds work (queued, running, waiting) or not.
    private func tellStopWaiters(_ id: String, holdsWork: Bool) {
        var done: [Int] = []
        let isIdle = workingCount == 0
        for (key, var waiter) in stopWaiters {
            if let named = waiter.named {
                guard named.contains(id) else { continue }
                if holdsWork { waiter.open.insert(id) } else { waiter.open.remove(id) }
                stopWaiters[key] = waiter
                if waiter.open.isEmpty { done.append(key) }
            } else if isIdle {
                done.append(key)
            }
        }
        for key in done { endStopWait(key) }
    }

    /// The result of a download that has ended, nil while it has not (throws for an unknown id).
    private func endedResult(of id: DownloadID) throws(DownloadError) -> Result<DownloadResult, DownloadError>? {
        if let result = results[id.rawValue] { return .success(result) }
        if let error = errors[id.rawValue] { return .failure(error) }
        let record = try require(id)
        switch record.state {
        case .completed:
            if let result = try alreadyComplete(record) { return .success(result) }
        case .failed:
            return .failure(record.error ?? DownloadError(.retriesExhausted, "download failed"))
        case .cancelled:
            return .failure(DownloadError(.cancelled, "download cancelled"))
        default: break
        }
        return nil
    }

    /// Downloads `url` to `path` with a manager of its own and returns when the file is complete. The state lives in
    /// `configuration.stateDirectory` (the default directory unless given), so a second call resumes what the first
    /// left; only this download runs, whatever else the store holds.
    public static func download(
        _ url: URL,
        to path: String,
        options: DownloadOptions = DownloadOptions(),
        configuration: Configuration = Configuration()
    ) async throws -> DownloadResult {
        var configuration = configuration
        configuration.startsStoredDownloads = false
        let manager = try DownloadManager(configuration: configuration)
        do {
            let id = try await manager.add(url, to: .file(path), options: options)
            let result = try await manager.result(of: id)
            await manager.shutdown()
            return result
        } catch {
            await manager.shutdown()
            throw error
        }
    }

    // MARK: Scheduling

    /// Starts queued downloads while fewer than the limit run: higher priority first, then queue order, never before
    /// their prerequisites have completed. A download whose prerequisite failed, was cancelled or was removed fails
    /// with a reason that names it.
    private func schedule() throws(DownloadError) {
        guard !isShutDown else { return }
        guard transferring < settings.maxConcurrentDownloads else { return }
        // The queue is kept in order: the first ones that may start are all this looks at (with thousands queued,
        // sorting them each time a download finished made a batch quadratic).
        var queued: [String] = []
        var free = settings.maxConcurrentDownloads - transferring
        for key in catalog.queue where free > 0 {
            guard tasks[key.id] == nil, configuration.startsStoredDownloads || sessionIDs.contains(key.id),
                let record = catalog[key.id]
            else { continue }
            queued.append(key.id)
            if case .ready = prerequisiteStatus(of: record) { free -= 1 }
        }
        var failedAny = false
        for id in queued {
            guard transferring < settings.maxConcurrentDownloads else { break }
            guard let record = catalog[id] else { continue }
            switch prerequisiteStatus(of: record) {
            case .ready: try start(record)
            case .waiting: continue
            case .failed(let reason):
                failDependent(record, reason: reason)
                failedAny = true
            }
        }
        // A failed dependent may fail its own dependents in turn.
        if failedAny { try schedule() }
    }

    private enum PrerequisiteStatus { case ready, waiting, failed(String) }

    private func prerequisiteStatus(of record: DownloadRecord) -> PrerequisiteStatus {
        var waiting = false
        for id in record.prerequisites {
            guard let prerequisite = catalog[id] else { return .failed("download \(id) it waits for was removed") }
            switch prerequisite.state {
            case .completed: continue
            case .failed: return .failed("download \(id) (\(prerequisite.url)) it waits for failed")
            case .cancelled: return .failed("download \(id) (\(prerequisite.url)) it waits for was cancelled")
            default: waiting = true
            }
        }
        return waiting ? .waiting : .ready
    }

    private func failDependent(_ record: DownloadRecord, reason: String) {
        var record = record
        let error = DownloadError(.illegalTransition, "not started: \(reason)")
        record.state = .failed
        record.error = error
        try? persist(record)
        finish(record.id, with: .failure(error))
        hub.emit(.changed(snapshot(of: record)))
    }

    /// Higher priority first, then queue position.
    private func queueOrder<S: Sequence>(_ candidates: S) -> [DownloadRecord] where S.Element == DownloadRecord {
        candidates.sorted { QueueCursor($0).precedes(QueueCursor($1)) }
    }

    private func persist(_ record: DownloadRecord) throws(DownloadError) {
        try store.save(record)
        keep(record)
    }

    @discardableResult
    private func keep(_ record: DownloadRecord) -> DownloadRecord {
        let kept = catalog.keep(record)
        if !stopWaiters.isEmpty { tellStopWaiters(record.id, holdsWork: Self.holdsWork(record.state)) }
        return kept
    }

    private func forget(_ record: DownloadRecord) {
        catalog.forget(record)
        if !stopWaiters.isEmpty { tellStopWaiters(record.id, holdsWork: false) }
    }

    private func start(_ record: DownloadRecord) throws(DownloadError) {
        var record = record
        record.state = .running
        // Queued, not waited for: after a crash a download stored as queued resumes as one stored as running would.
        store.submit(.state(.running, for: record.id))
        keep(record)
        let id = record.id
        if record.options.tls.insecure {
            // Each run says so in the log (the daemon's; `haul get --insecure` warns on its terminal instead, and
            // logs only warnings and worse).
            configuration.logger.notice(
                "\(record.url): insecure: the server's TLS certificate is not verified; the server is not proven")
        }
        let ownLimiter = RateLimiter(bytesPerSecond: record.rateLimit)
        downloadLimiters[id] = ownLimiter
        let environment = RunnerEnvironment(
            transport: transport,
            clock: EngineClock(configuration.clock),
            idleClock: EngineClock(configuration.idleClock),
            metronome: metronome,
            events: hub,
            settings: configuration.engine,
            logger: configuration.logger,
            limiters: [globalLimiter, ownLimiter],
            report: { [weak self] report throws(DownloadError) in try await self?.runnerReported(id, report) },
            committed: { [store] commit throws(DownloadError) in try await store.committed(commit) },
            isDestinationClaimed: { [weak self] path in await self?.isDestinationClaimed(path, excluding: id) ?? false
            },
            allowedFolders: allowedFolders
        )
        let started = record
        tasks[id] = Task {
            let runner = DownloadRunner(record: started, environment: environment)
            let outcome = await runner.run()
            await self.finished(id, outcome: outcome, record: runner.record)
        }
        hub.emit(.changed(snapshot(of: record)))
    }

    /// Takes in what a runner reports: the manager is the only writer of a download's record and its row. Stores
    /// what must be stored before the runner goes on (the transfer's state: a checkpoint is durable once this
    /// returns) and tells subscribers.
    ///
    /// The writes are queued, not waited for (the store commits those of many downloads together): the runner waits
    /// for the returned commit only where a later step depends on it (the row must hold the finished length before
    /// the file is renamed). Every other write may trail: a stored offset that lags behind the part file, or facts
    /// a run did not store, are what a crash leaves anyway, and the resume rules handle them.
    private func runnerReported(_ id: String, _ report: RunnerReport) throws(DownloadError) -> DownloadStore.Commit? {
        guard var record = catalog[id], tasks[id] != nil else { return nil }
        var commit: DownloadStore.Commit?
        switch report {
        case .transfer(let transfer, let waiting):
            let named = record.destination != transfer.destination
            record = record.adoptingTransfer(of: transfer)
            keep(record)
            // A folder download's name is news for subscribers; facts and offsets are not (progress tells the bytes).
            if named { hub.emit(.changed(snapshot(of: record))) }
            return store.submit(try .transfer(record), awaited: waiting)
        case .finishing:
            // Its file is synced and moved while the next download transfers: with many small files, the syncs
            // (waits for the disk) no longer leave slots idle. Bounded, so a slow disk cannot gather every
            // download of a batch into its queue.
            guard finishing.count < settings.maxConcurrentDownloads else { return nil }
            finishing.insert(id)
            try? schedule()
            return nil
        case .transferring:
            finishing.remove(id)
            return nil
        case .restarted(let reason):
            record.error = nil
            record.attempts = 0
            keep(record)
            hub.emit(.restarted(DownloadID(id), reason: reason))
            return nil
        case .waitingForNetwork(let error):
            var machine = DownloadStateMachine(state: record.state)
            record.state = (try? machine.apply(.networkLost)) ?? record.state
            record.error = error
            commit = store.submit(.state(record.state, for: id))
        case .networkReturned:
            record.state = .running
            record.error = nil
            commit = store.submit(.state(.running, for: id))
        case .retrying(let error, let delay, let attempts):
            if let attempts { record.attempts = attempts }
            record.error = error
            commit = store.submit(.attempts(record))
            hub.emit(.retrying(DownloadID(id), error: error, delay: delay))
        case .connections(let count):
            // Stored too: `haul ls` in another process reads the store.
            record.activeConnections = count
            keep(record)
            return store.submit(.activeConnections(count, for: id))
        }
        keep(record)
        hub.emit(.changed(snapshot(of: record)))
        return commit
    }

    /// Whether a download other than `id` has `path` as its destination (a folder download choosing its name).
    private func isDestinationClaimed(_ path: String, excluding id: String) -> Bool {
        catalog.isClaimed(path, excluding: id)
    }

    private func finished(_ id: String, outcome: RunOutcome, record runnerRecord: DownloadRecord) {
        tasks[id] = nil
        finishing.remove(id)
        downloadLimiters[id] = nil
        hub.clearProgress(of: DownloadID(id))
        let reason = stopReasons.removeValue(forKey: id)
        // The runner's record is current for what the transfer changed, and the manager stored each change as it
        // was reported. The manager's own fields (priority, place, limit, connections) may have changed meanwhile
        // and stay as the manager has them.
        var record = catalog[id].map { $0.adoptingTransfer(of: runnerRecord) } ?? runnerRecord
        record.activeConnections = 0
        switch outcome {
        case .completed(let result):
            record.state = .completed
            // Queued: should it not reach the store, the next run recognises the finished file as its own.
            do { store.submit(try .completion(record)) } catch {
                configuration.logger.error("\(record.url): completed, but storing that failed: \(error.message)")
            }
            keep(record)
            finish(id, with: .success(result))
        case .failed(let error) where reason == nil:
            record.state = .failed
            record.error = error
            try? persist(record)
            finish(id, with: .failure(error))
        case .stopped, .failed:
            switch reason {
            case .cancel:
                keep(record)
                try? markCancelled(&record)
                try? schedule()
                return
            case .exit:
                record.state = .queued
            default:
                record.state = .paused
            }
            try? persist(record)
        }
        hub.emit(.changed(snapshot(of: record)))
        try? schedule()
    }

    private func finish(_ id: String, with result: Result<DownloadResult, DownloadError>) {
        switch result {
        case .success(let value): results[id] = value
        case .failure(let error): errors[id] = error
        }
        for waiter in waiters.removeValue(forKey: id) ?? [] {
            waiter.resume(with: result.mapError { $0 as any Error })
        }
        resumeBatchWaiters(ending: id)
    }

    /// Tells the batch waits of `results(of:)` that `id` ended (every id, with nil, at shutdown).
    private func resumeBatchWaiters(ending id: String?) {
        guard !batchWaiters.isEmpty else { return }
        var index = 0
        while index < batchWaiters.count {
            if let id { batchWaiters[index].open.remove(id) } else { batchWaiters[index].open.removeAll() }
            if batchWaiters[index].open.isEmpty {
                batchWaiters.remove(at: index).continuation.resume()
            } else {
                index += 1
            }
        }
    }

    // MARK: Helpers

    private func require(_ id: DownloadID) throws(DownloadError) -> DownloadRecord {
        guard let record = catalog[id.rawValue] else {
            throw DownloadError(.notFound, "no download with id \(id)")
        }
        return record
    }

    /// Re-adding a known download: resume what can be resumed, restart what was lost.
    private func reuse(_ record: inout DownloadRecord, options: DownloadOptions, staysPaused: Bool)
        throws(DownloadError)
    {
        switch record.state {
        case .queued, .running, .waitingForNetwork:
            return
        case .paused where staysPaused:
            return
        case .completed:
            if try alreadyComplete(record) != nil { return }
            // The file is gone: fetch it again.
            record.durableOffset = 0
            record.segments = nil
            record.remoteFacts = nil
            record.completedAt = nil
        case .paused, .failed, .cancelled:
            break
        }
        record.options = options
        record.mayReplaceDestination = record.mayReplaceDestination || options.overwrite
        record.state = staysPaused ? .paused : .queued
        record.attempts = 0
        record.error = nil
    }

    /// The result for a completed record whose file is still in place, nil when the file is gone or changed size.
    private func alreadyComplete(_ record: DownloadRecord) throws(DownloadError) -> DownloadResult? {
        if let result = results[record.id] { return result }
        guard record.state == .completed, let path = record.destination, let total = record.totalLength,
            let folder = try? DownloadFolder.open(for: record, allowed: allowedFolders),
            let file = try? folder.entry(PathName.lastComponent(of: path)), file.kind == .regular, file.size == total
        else { return nil }
        var digest: String?
        if record.options.computesSHA256 {
            let descriptor = try folder.open(PathName.lastComponent(of: path), as: file)
            defer { close(descriptor) }
            digest = try FileDigest.hexDigests(of: descriptor, named: path, algorithms: [.sha256])[.sha256]
        }
        let result = DownloadResult(
            id: DownloadID(record.id), url: record.url, path: path, bytes: total, sha256: digest, seconds: 0,
            resumedFrom: total, wasAlreadyComplete: true
        )
        results[record.id] = result
        return result
    }

    /// A file at the destination that Haul did not create is never overwritten unless asked, and never one that is
    /// not a regular file. `continuePartial` hands Haul a file on purpose: the part file when there is one, else the
    /// file at the destination (a regular file with one link, whoever made it) moved to the part's name; the runner
    /// takes it over and compares its bytes with the server's before anything is appended.
    private func claimDestination(record: inout DownloadRecord, in folder: HeldFolder, options: DownloadOptions)
        throws(DownloadError)
    {
        guard let destination = record.destination else { return }
        let name = PathName.lastComponent(of: destination)
        if options.continuePartial, let part = try folder.entry(name + ".part") {
            if part.kind == .regular { try Self.refuseHoles(name + ".part", as: part, in: folder) }
            return
        }
        guard let existing = try folder.entry(name) else { return }
        if options.continuePartial {
            if let reason = existing.distrust(owner: nil) {
                throw DownloadError(.untrustedFile, "\(destination) \(reason); Haul will not continue it")
            }
            try Self.refuseHoles(name, as: existing, in: folder)
            let code = folder.move(name, to: name + ".part", replacing: false)
            guard code == 0 else { throw PartFile.fileError(code, "cannot rename \(destination) to \(name).part") }
            return
        }
        guard options.overwrite else {
            throw DownloadError(
                .destinationExists,
                "\(destination) already exists and Haul did not create it; use --overwrite to replace it or -c to "
                    + "continue it"
            )
        }
        if existing.kind != .regular {
            throw DownloadError(
                .untrustedFile, "\(destination) is \(existing.kindInWords); Haul neither follows nor replaces it")
        }
        record.mayReplaceDestination = true
    }

    /// `-c` continues a file written from its start. A file with a hole (bytes never written) is not one: it is
    /// what a download made with several connections leaves when its record is gone. Where the file system shows
    /// holes (`PartFile.firstHole`), such a file is refused and left as it is; where it cannot (FUSE, NFS), `-c`
    /// has its overlap check alone, as `curl -C -` and `wget -c` have. Haul's own part files never need this: their
    /// row, with the segment map, is durable before they exist.
    private static func refuseHoles(_ name: String, as entry: FolderEntry, in folder: HeldFolder)
        throws(DownloadError)
    {
        let descriptor = try folder.open(name, as: entry, writing: false)
        defer { close(descriptor) }
        if let hole = PartFile.firstHole(in: descriptor) {
            throw DownloadError(
                .untrustedFile,
                "\(folder.path(of: name)) has a hole at byte \(hole) (a range never written): it was not written from "
                    + "its start, as the part file of a download made with several connections is; -c continues only a "
                    + "file written from its start, so it is left as it is")
        }
    }

    private static func validate(_ url: URL) throws(DownloadError) {
        guard let scheme = url.scheme?.lowercased(), URLList.schemes.contains(scheme) else {
            throw DownloadError(.invalidURL, "'\(url.absoluteString)' is not an http, https or ftp URL")
        }
        guard let host = url.host, !host.isEmpty else {
            throw DownloadError(.invalidURL, "'\(url.absoluteString)' has no host")
        }
    }

    private static func absolute(_ path: String) -> String {
        PathName.absolute(path)
    }

    /// What one add learns about folders, once for a list: each folder's absolute form as the request named it (a
    /// list of ten thousand into one folder normalises it once), and each folder opened and found writable.
    private struct FolderMemo {
        /// A folder opened for a path a request named, and when.
        struct Recent {
            let named: String
            let isConfined: Bool
            let folder: HeldFolder
            let at: ContinuousClock.Instant
        }

        /// Each folder opened in this batch, by the path named and whether it is confined.
        private var opened: [String: HeldFolder] = [:]
        private var lastNamed: (String, String)?
        /// The folder opened last, across adds (see `recentlyWritable`).
        private(set) var recent: Recent?
        private let allowed: AllowedFolders

        init(recent: Recent?, allowed: AllowedFolders) {
            self.recent = recent
            self.allowed = allowed
        }

        /// The folder `path` names, opened and checked writable, once per batch (and once a second across adds).
        /// A confined request's folder is opened beneath the allowed folder it lies in; any other where its path
        /// leads now (its links are the namer's). Its identity is recorded: every later start must find that folder.
        mutating func open(_ path: String, confined: Bool) throws(DownloadError) -> HeldFolder {
            let now = ContinuousClock.now
            if let recent, recent.named == path, recent.isConfined == confined, now - recent.at < .seconds(1) {
                return recent.folder
            }
            let key = (confined ? "confined:" : "named:") + path
            let folder: HeldFolder
            if let known = opened[key] {
                folder = known
            } else {
                folder = try DownloadManager.openFolder(path, confined: confined, allowed: allowed)
                opened[key] = folder
            }
            recent = Recent(named: path, isConfined: confined, folder: folder, at: now)
            return folder
        }

        mutating func absolute(_ named: String) -> String {
            if let lastNamed, lastNamed.0 == named { return lastNamed.1 }
            let path = PathName.absolute(named)
            lastNamed = (named, path)
            return path
        }
    }

    /// Opens the folder `path` for a download and checks it is writable: beneath its allowed folder when `confined`,
    /// else where its path leads now.
    fileprivate static func openFolder(_ path: String, confined: Bool, allowed: AllowedFolders)
        throws(DownloadError) -> HeldFolder
    {
        let folder = try DownloadFolder.open(path, confined: confined, allowed: allowed)
        guard folder.isWritable else {
            throw DownloadError(.destinationNotWritable, "destination folder \(path) is not a writable folder")
        }
        return folder
    }

    /// The download as subscribers see it: the manager's record (its runner reports every change of the transfer,
    /// so it is current) with the live progress of a running download.
    private func snapshot(of record: DownloadRecord) -> Snapshot {
        let isRunning = tasks[record.id] != nil
        let progress = isRunning ? hub.progress(of: DownloadID(record.id)) : nil
        return Snapshot(
            id: DownloadID(record.id), url: record.url, path: record.destination, directory: record.directory,
            state: record.state, priority: DownloadPriority(rawValue: record.priority) ?? .normal,
            position: record.queuePosition,
            receivedBytes: max(progress?.receivedBytes ?? 0, record.durableOffset),
            totalBytes: progress?.totalBytes ?? record.totalLength,
            bytesPerSecond: progress?.bytesPerSecond ?? 0, secondsRemaining: progress?.secondsRemaining,
            connections: isRunning ? max(progress?.connections ?? 0, record.activeConnections, 1) : 0,
            segments: record.segments, after: record.prerequisites.map(DownloadID.init), error: record.error,
            isResumable: record.isResumable, createdAt: record.createdAt, completedAt: record.completedAt,
            options: record.options, rateLimit: record.rateLimit, origin: record.origin,
            sha256: results[record.id]?.sha256
        )
    }
}

/// One wait of `DownloadManager.waitUntilStopped`: the downloads named (nil: all) and those of them still holding work.
private struct StopWaiter {
    var named: Set<String>?
    var open: Set<String>
    let continuation: CheckedContinuation<Void, Never>
}

/// The records in memory with the indexes the manager keeps beside them.
private struct Catalog {
    /// One record, held by reference: a dictionary of 20,000 records inline took 13 MiB, most of it empty buckets
    /// as large as a record.
    final class Box {
        var record: DownloadRecord
        init(_ record: DownloadRecord) { self.record = record }
    }

    /// A download's URL and destination (a file, or a folder for a name the server chooses); its strings are the
    /// record's own, not copies. Its hash is computed once: an add looks a target up four times (in its batch and
    /// in the catalog, then stores it in both), and hashing the two strings each time was a tenth of a batch's time.
    struct Target: Hashable {
        let url: String
        let isFolder: Bool
        let place: String
        private let digest: Int

        init(url: String, isFolder: Bool, place: String) {
            self.url = url
            self.isFolder = isFolder
            self.place = place
            var hasher = Hasher()
            hasher.combine(url)
            hasher.combine(isFolder)
            hasher.combine(place)
            digest = hasher.finalize()
        }

        func hash(into hasher: inout Hasher) { hasher.combine(digest) }

        static func == (left: Target, right: Target) -> Bool {
            left.digest == right.digest && left.isFolder == right.isFolder && left.url == right.url
                && left.place == right.place
        }
    }

    private var boxes: [String: Box] = [:]
    /// The records in state `queued`, in queue order (higher priority first, then lower position).
    private(set) var queue: [DownloadManager.QueueCursor] = []
    /// The newest record of each URL and destination: how `add` finds a download it already has without looking at
    /// every record. The older ones of a target (rare: a target added again after it was cancelled) wait in
    /// `olderByTarget`, oldest first.
    private var byTarget: [Target: String] = [:]
    /// The ids of the downloads (not cancelled) that have each destination: a folder download choosing its name asks
    /// here instead of the store (a query for every small file).
    private var destinations: [String: Set<String>] = [:]
    private var olderByTarget: [Target: [String]] = [:]
    /// How many records are in each state.
    var counts: [DownloadState: Int] = [:]
    /// The highest queue position given so far: a new download goes after it.
    var lastPosition: Double = 0
    /// One copy of each folder name: thousands of downloads into one folder share it.
    private var folders: Set<String> = []
    /// The folder name shared last (most adds go to the folder of the one before).
    private var lastFolder: String?
    /// The options of the record kept last: the next one with equal options shares their storage.
    private var lastOptions: DownloadOptions?

    subscript(id: String) -> DownloadRecord? { boxes[id]?.record }

    /// The id of the newest record of `target`.
    func newest(at target: Target) -> String? { byTarget[target] }

    /// Every record, in no order.
    var all: some Collection<DownloadRecord> { boxes.values.lazy.map(\.record) }

    var count: Int { boxes.count }

    static func target(of record: DownloadRecord) -> Target {
        if let directory = record.directory { return Target(url: record.url, isFolder: true, place: directory) }
        return Target(url: record.url, isFolder: false, place: record.destination ?? "")
    }

    /// Keeps `record`, with its place in the queue when it is queued, its target and its state's count; returns it
    /// as kept (its folder name and options shared with the records before it that have equal ones).
    @discardableResult
    mutating func keep(_ record: DownloadRecord) -> DownloadRecord {
        var record = record
        if let shared = lastOptions {
            record.options = record.options.sharingStorage(with: shared)
        }
        lastOptions = record.options
        if let directory = record.directory {
            if let lastFolder, lastFolder == directory {
                record.directory = lastFolder
            } else if let shared = folders.firstIndex(of: directory) {
                record.directory = folders[shared]
            } else {
                folders.insert(directory)
            }
            lastFolder = record.directory
        }
        // One lookup of the id, for a new record (an add) as for a known one.
        if let old = boxes.updateValue(Box(record), forKey: record.id)?.record {
            unclaim(old)
            counts[old.state, default: 0] -= 1
            if old.state == .queued { dequeue(DownloadManager.QueueCursor(old)) }
        } else {
            let target = Self.target(of: record)
            if let previous = byTarget.updateValue(record.id, forKey: target) {
                olderByTarget[target, default: []].append(previous)
            }
        }
        counts[record.state, default: 0] += 1
        if record.state == .queued {
            let key = DownloadManager.QueueCursor(record)
            queue.insert(key, at: place(of: key))
        }
        if let destination = record.destination, record.state != .cancelled {
            destinations[destination, default: []].insert(record.id)
        }
        lastPosition = max(lastPosition, record.queuePosition)
        return record
    }

    /// Whether a download other than `id` that is not cancelled has `destination`.
    func isClaimed(_ destination: String, excluding id: String) -> Bool {
        guard let ids = destinations[destination] else { return false }
        return ids.contains { $0 != id }
    }

    private mutating func unclaim(_ record: DownloadRecord) {
        guard let destination = record.destination else { return }
        destinations[destination]?.remove(record.id)
        if destinations[destination]?.isEmpty == true { destinations[destination] = nil }
    }

    /// Where `key` is or belongs in `queue` (binary search).
    private func place(of key: DownloadManager.QueueCursor) -> Int {
        var low = 0
        var high = queue.count
        while low < high {
            let middle = (low + high) / 2
            if queue[middle].precedes(key) { low = middle + 1 } else { high = middle }
        }
        return low
    }

    private mutating func dequeue(_ key: DownloadManager.QueueCursor) {
        let index = place(of: key)
        if index < queue.count, queue[index] == key { queue.remove(at: index) }
    }

    mutating func forget(_ record: DownloadRecord) {
        guard let old = boxes.removeValue(forKey: record.id)?.record else { return }
        unclaim(old)
        counts[old.state, default: 0] -= 1
        if old.state == .queued { dequeue(DownloadManager.QueueCursor(old)) }
        let key = Self.target(of: old)
        if byTarget[key] == record.id {
            byTarget[key] = olderByTarget[key]?.popLast()
            if olderByTarget[key]?.isEmpty == true { olderByTarget[key] = nil }
        } else {
            olderByTarget[key]?.removeAll { $0 == record.id }
            if olderByTarget[key]?.isEmpty == true { olderByTarget[key] = nil }
        }
    }
}

extension DownloadRecord {
    /// This record with what a runner owns taken from `other` (what the transfer learned and did): the manager's
    /// own fields (state is the caller's to set; priority, place, limit, options, prerequisites) stay.
    func adoptingTransfer(of other: DownloadRecord) -> DownloadRecord {
        var merged = other
        merged.state = state
        merged.priority = priority
        merged.queuePosition = queuePosition
        merged.rateLimit = rateLimit
        merged.options.maxConnectionsPerDownload = options.maxConnectionsPerDownload
        merged.prerequisites = prerequisites
        merged.origin = origin
        return merged
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
