import Foundation
import HaulCore
import Logging

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
                ProcessInfo.processInfo.environment["HAUL_RAMP_MS"].flatMap { Int64($0) } ?? 100)
            /// Jitter in 0...1 for the backoff; injectable for tests.
            public var jitter: @Sendable () -> Double = { Double.random(in: 0...1) }

            /// The defaults.
            public init() {}
        }

        /// Where the store lives; nil keeps it in memory (nothing survives the process).
        public var stateDirectory: String?
        /// Downloads running at once.
        public var maxConcurrentDownloads = 3
        /// A limit on all downloads together, in bytes a second (nil: none). `setRateLimit(_:)` changes it later.
        public var rateLimit: Int64?
        /// Whether downloads left queued in the store by an earlier process start by themselves. The `haul get`
        /// command turns this off so that it only runs what it was given.
        public var startsStoredDownloads = true
        /// The clock for backoff, checkpoints and progress.
        public var clock: any Clock<Duration> = ContinuousClock()
        /// The clock for idle timeouts (real time by default, since it races real sockets).
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
    public struct Snapshot: Sendable, Equatable {
        /// The download.
        public var id: DownloadID
        /// The URL asked for.
        public var url: String
        /// The destination, once known.
        public var destination: String?
        /// The state.
        public var state: DownloadState
        /// Bytes durably held.
        public var receivedBytes: Int64
        /// The full length, when known.
        public var totalBytes: Int64?
        /// Whether a pause keeps the bytes (false: the server ignores ranges and a pause restarts).
        public var isResumable: Bool?
        /// The last error's message.
        public var lastError: String?
        /// Connections open right now (0 when not running).
        public var connections: Int
    }

    private enum StopReason { case pause, cancel, exit }

    private let configuration: Configuration
    private let store: DownloadStore
    private let transport: any HTTPTransport
    private let hub = EventHub()
    private var records: [String: DownloadRecord] = [:]
    /// The queue order of the records in state `queued` (kept beside `records` by `keep(_:)`), so scheduling a batch
    /// of thousands of downloads does not copy every record each time one finishes.
    private var queuedOrder: [String: (priority: Int, position: Double)] = [:]
    private var maxConcurrent: Int
    private var tasks: [String: Task<Void, Never>] = [:]
    private let globalLimiter: RateLimiter
    private var downloadLimiters: [String: RateLimiter] = [:]
    private var stopReasons: [String: StopReason] = [:]
    private var sessionIDs: Set<String> = []
    private var results: [String: DownloadResult] = [:]
    private var errors: [String: DownloadError] = [:]
    private var waiters: [String: [CheckedContinuation<DownloadResult, any Error>]] = [:]
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
        if let directory = configuration.stateDirectory {
            store = try DownloadStore(directory: directory)
        } else {
            store = try DownloadStore()
        }
        self.transport = transport ?? LiveTransport()
        maxConcurrent = max(1, configuration.maxConcurrentDownloads)
        globalLimiter = RateLimiter(bytesPerSecond: configuration.rateLimit)
        var recovered: [DownloadRecord] = []
        for var record in try store.allRecords() {
            if record.state.isActive {
                // Running when the process died: queued again, in its old place.
                record.state = .queued
                record.activeConnections = 0
                recovered.append(record)
            }
            records[record.id] = record
            if record.state == .queued { queuedOrder[record.id] = (record.priority, record.queuePosition) }
        }
        try store.save(recovered)
    }

    /// Starts the downloads the store holds as queued (when `startsStoredDownloads`). Call once after `init`.
    public func start() throws(DownloadError) {
        try schedule()
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
        try Self.validate(url)
        for prerequisite in prerequisites where records[prerequisite.rawValue] == nil {
            throw DownloadError(.notFound, "no download with id \(prerequisite) to wait for")
        }
        let urlText = url.absoluteString
        var existing: DownloadRecord?
        var newRecord = DownloadRecord(
            id: UUID().uuidString.lowercased(), url: urlText, finalURL: nil, directory: nil, destination: nil,
            state: .queued, totalLength: nil, durableOffset: 0, etag: nil, lastModified: nil,
            isLastModifiedStrong: false, isResumable: nil, isPartVerified: true,
            mayReplaceDestination: options.overwrite,
            attempts: 0, lastError: nil, options: options, priority: priority.rawValue, queuePosition: nextPosition(),
            prerequisites: prerequisites.map(\.rawValue), rateLimit: nil, segments: nil, activeConnections: 0,
            createdAt: Date(), updatedAt: Date()
        )
        switch destination {
        case .file(let rawPath):
            let path = Self.absolute(rawPath)
            try Self.checkWritableFolder((path as NSString).deletingLastPathComponent)
            if FileSystem.isWritableDirectory(path) || rawPath.hasSuffix("/") {
                throw DownloadError(.invalidArgument, "\(path) is a folder; use a folder destination for it")
            }
            existing = records.values.filter { $0.url == urlText && $0.destination == path && $0.directory == nil }
                .max { $0.createdAt < $1.createdAt }
            newRecord.destination = path
        case .directory(let rawPath):
            let path = Self.absolute(rawPath)
            try Self.checkWritableFolder(path)
            existing = records.values.filter { $0.url == urlText && $0.directory == path }
                .max { $0.createdAt < $1.createdAt }
            newRecord.directory = path
        }
        if var record = existing {
            try reuse(&record, options: options)
            sessionIDs.insert(record.id)
            try schedule()
            return DownloadID(record.id)
        }
        if let path = newRecord.destination {
            try claimDestination(path, record: &newRecord, options: options)
        }
        try store.insert(newRecord)
        keep(newRecord)
        sessionIDs.insert(newRecord.id)
        hub.emit(.stateChanged(DownloadID(newRecord.id), .queued, error: nil))
        try schedule()
        return DownloadID(newRecord.id)
    }

    /// Pauses a queued or running download; a running one stops after flushing its exact offset.
    public func pause(_ id: DownloadID) async throws(DownloadError) {
        var record = try require(id)
        var machine = DownloadStateMachine(state: record.state)
        _ = try machine.apply(.pauseRequested)
        if await stopRunning(id, because: .pause) { return }
        record.state = .paused
        try persist(record)
        hub.emit(.stateChanged(id, .paused, error: nil))
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
        record.state = .queued
        record.attempts = 0
        try persist(record)
        sessionIDs.insert(record.id)
        hub.emit(.stateChanged(id, .queued, error: nil))
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
        if let part = record.partPath { FileSystem.remove(part) }
        record.state = .cancelled
        record.durableOffset = 0
        record.segments = nil
        record.remoteFacts = nil
        try persist(record)
        finish(record.id, with: .failure(DownloadError(.cancelled, "download cancelled")))
        hub.emit(.stateChanged(DownloadID(record.id), .cancelled, error: nil))
    }

    /// Pauses every queued, running or waiting download.
    public func pauseAll() async {
        for record in queueOrder(records.values) where record.state == .queued || record.state.isActive {
            try? await pause(DownloadID(record.id))
        }
    }

    /// Queues every paused download again.
    public func resumeAll() {
        for record in queueOrder(records.values) where record.state == .paused {
            try? resume(DownloadID(record.id))
        }
    }

    /// Moves `id` in the queue to just before `other` (and takes `other`'s priority, so the move is what the queue
    /// shows). Running downloads keep running; the order decides what starts next.
    public func move(_ id: DownloadID, before other: DownloadID) throws(DownloadError) {
        var record = try require(id)
        let target = try require(other)
        let ordered = queueOrder(records.values.filter { $0.priority == target.priority && $0.id != id.rawValue })
        let index = ordered.firstIndex { $0.id == target.id } ?? 0
        let previous = index > 0 ? ordered[index - 1].queuePosition : target.queuePosition - 1
        record.priority = target.priority
        record.queuePosition = (previous + target.queuePosition) / 2
        try persist(record)
        try schedule()
    }

    /// Changes how many downloads run at once. Raising it starts queued ones at once; lowering it lets running
    /// downloads finish and starts no new one until fewer than the limit run.
    public func setMaxConcurrentDownloads(_ limit: Int) throws(DownloadError) {
        guard limit >= 1 else {
            throw DownloadError(.invalidArgument, "the concurrency limit must be at least 1, not \(limit)")
        }
        maxConcurrent = limit
        try schedule()
    }

    /// Limits all downloads together to `bytesPerSecond` (nil: no limit), at once for running downloads too.
    public func setRateLimit(_ bytesPerSecond: Int64?) throws(DownloadError) {
        try Self.checkRate(bytesPerSecond)
        globalLimiter.setRate(bytesPerSecond)
    }

    /// Limits one download (all its connections) to `bytesPerSecond` (nil: no limit of its own), at once if it runs,
    /// and for every later run.
    public func setRateLimit(_ bytesPerSecond: Int64?, for id: DownloadID) throws(DownloadError) {
        try Self.checkRate(bytesPerSecond)
        var record = try require(id)
        record.rateLimit = bytesPerSecond
        try persist(record)
        downloadLimiters[id.rawValue]?.setRate(bytesPerSecond)
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
        if let part = record.partPath { FileSystem.remove(part) }
        if deletingFile, record.state == .completed, let destination = record.destination {
            FileSystem.remove(destination)
        }
        try store.delete(id: id.rawValue)
        records[id.rawValue] = nil
        queuedOrder[id.rawValue] = nil
        sessionIDs.remove(id.rawValue)
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
        for id in Array(waiters.keys) {
            finish(id, with: .failure(DownloadError(.cancelled, "download paused: the manager shut down")))
            errors[id] = nil
        }
        hub.finishAll()
    }

    // MARK: Observing

    /// Events of every download, or of one download only when `id` is given. Each call makes a new stream.
    public nonisolated func events(for id: DownloadID? = nil) -> AsyncStream<DownloadEvent> {
        hub.subscribe(to: id)
    }

    /// The download now. Read from the store, which the runner keeps current (offsets, destination).
    public func snapshot(_ id: DownloadID) throws(DownloadError) -> Snapshot {
        _ = try require(id)
        guard let record = try store.record(id: id.rawValue) else {
            throw DownloadError(.notFound, "no download with id \(id)")
        }
        return Self.snapshot(of: record)
    }

    /// Every download in the store, in queue order.
    public func snapshots() throws(DownloadError) -> [Snapshot] {
        queueOrder(try store.allRecords()).map(Self.snapshot)
    }

    /// Waits until the download completes (returning its result) or fails or is cancelled (throwing its error).
    public func result(of id: DownloadID) async throws -> DownloadResult {
        if let result = results[id.rawValue] { return result }
        if let error = errors[id.rawValue] { throw error }
        let record = try require(id)
        switch record.state {
        case .completed:
            if let result = try alreadyComplete(record) { return result }
        case .failed:
            throw DownloadError(.retriesExhausted, record.lastError ?? "download failed")
        case .cancelled:
            throw DownloadError(.cancelled, "download cancelled")
        default: break
        }
        return try await withCheckedThrowingContinuation { continuation in
            waiters[id.rawValue, default: []].append(continuation)
        }
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
        guard tasks.count < maxConcurrent else { return }
        let queued = queuedOrder.filter { id, _ in
            tasks[id] == nil && (configuration.startsStoredDownloads || sessionIDs.contains(id))
        }
        .sorted { ($1.value.priority, $0.value.position) < ($0.value.priority, $1.value.position) }
        .map(\.key)
        var failedAny = false
        for id in queued {
            guard tasks.count < maxConcurrent else { break }
            guard let record = records[id] else { continue }
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
            guard let prerequisite = records[id] else { return .failed("download \(id) it waits for was removed") }
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
        record.lastError = error.message
        try? persist(record)
        finish(record.id, with: .failure(error))
        hub.emit(.stateChanged(DownloadID(record.id), .failed, error: error))
        hub.emit(.failed(DownloadID(record.id), error))
    }

    /// Higher priority first, then queue position.
    private func queueOrder<S: Sequence>(_ candidates: S) -> [DownloadRecord] where S.Element == DownloadRecord {
        candidates.sorted { ($1.priority, $0.queuePosition) < ($0.priority, $1.queuePosition) }
    }

    private func nextPosition() -> Double {
        (records.values.map(\.queuePosition).max() ?? 0) + 1
    }

    private func persist(_ record: DownloadRecord) throws(DownloadError) {
        try store.save(record)
        keep(record)
    }

    /// Keeps `record` in memory, with its place in the queue when it is queued.
    private func keep(_ record: DownloadRecord) {
        records[record.id] = record
        queuedOrder[record.id] = record.state == .queued ? (record.priority, record.queuePosition) : nil
    }

    private func start(_ record: DownloadRecord) throws(DownloadError) {
        var record = record
        record.state = .running
        try store.saveState(.running, for: record.id)
        keep(record)
        let id = record.id
        hub.emit(.stateChanged(DownloadID(id), .running, error: nil))
        let ownLimiter = RateLimiter(bytesPerSecond: record.rateLimit)
        downloadLimiters[id] = ownLimiter
        let environment = RunnerEnvironment(
            store: store,
            transport: transport,
            clock: EngineClock(configuration.clock),
            idleClock: EngineClock(configuration.idleClock),
            events: hub,
            settings: configuration.engine,
            logger: configuration.logger,
            limiters: [globalLimiter, ownLimiter]
        )
        let started = record
        tasks[id] = Task {
            var runner = DownloadRunner(record: started, environment: environment)
            let outcome = await runner.run()
            await self.finished(id, outcome: outcome, record: runner.record)
        }
    }

    private func finished(_ id: String, outcome: RunOutcome, record: DownloadRecord) {
        tasks[id] = nil
        downloadLimiters[id] = nil
        let reason = stopReasons.removeValue(forKey: id)
        // The runner's record is current: it saved every change it made. Its offset may trail one the checkpoint
        // queue stored; writing it back can only lower the stored offset, which is always safe.
        var record = record
        keep(record)
        let downloadID = DownloadID(id)
        switch outcome {
        case .completed(let result):
            finish(id, with: .success(result))
            hub.emit(.stateChanged(downloadID, .completed, error: nil))
            hub.emit(.completed(result))
        case .failed(let error) where reason == nil:
            record.state = .failed
            record.lastError = error.message
            try? persist(record)
            finish(id, with: .failure(error))
            hub.emit(.stateChanged(downloadID, .failed, error: error))
            hub.emit(.failed(downloadID, error))
        case .stopped, .failed:
            switch reason {
            case .cancel:
                try? markCancelled(&record)
            case .exit:
                record.state = .queued
                try? persist(record)
                hub.emit(.stateChanged(downloadID, .queued, error: nil))
            default:
                record.state = .paused
                try? persist(record)
                hub.emit(.stateChanged(downloadID, .paused, error: nil))
            }
        }
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
    }

    // MARK: Helpers

    private func require(_ id: DownloadID) throws(DownloadError) -> DownloadRecord {
        guard let record = records[id.rawValue] else {
            throw DownloadError(.notFound, "no download with id \(id)")
        }
        return record
    }

    /// Re-adding a known download: resume what can be resumed, restart what was lost.
    private func reuse(_ record: inout DownloadRecord, options: DownloadOptions) throws(DownloadError) {
        errors[record.id] = nil
        switch record.state {
        case .queued, .running, .waitingForNetwork:
            return
        case .completed:
            if try alreadyComplete(record) != nil { return }
            // The file is gone: fetch it again.
            record.durableOffset = 0
            record.segments = nil
            record.remoteFacts = nil
            results[record.id] = nil
        case .paused, .failed, .cancelled:
            break
        }
        record.options = options
        record.mayReplaceDestination = record.mayReplaceDestination || options.overwrite
        record.state = .queued
        record.attempts = 0
        record.lastError = nil
        try persist(record)
        hub.emit(.stateChanged(DownloadID(record.id), .queued, error: nil))
    }

    /// The result for a completed record whose file is still in place, nil when the file is gone or changed size.
    private func alreadyComplete(_ record: DownloadRecord) throws(DownloadError) -> DownloadResult? {
        if let result = results[record.id] { return result }
        guard record.state == .completed, let path = record.destination, let size = FileSystem.size(path),
            size == record.totalLength
        else { return nil }
        let digest =
            record.options.computesSHA256 ? try FileDigest.hexDigests(of: path, algorithms: [.sha256])[.sha256] : nil
        let result = DownloadResult(
            id: DownloadID(record.id), url: record.url, path: path, bytes: size, sha256: digest, seconds: 0,
            resumedFrom: size, wasAlreadyComplete: true
        )
        results[record.id] = result
        return result
    }

    /// A file at the destination that Haul did not create is never overwritten unless asked; `continuePartial`
    /// adopts it as a part file whose bytes are compared with the server before anything is appended.
    private func claimDestination(_ path: String, record: inout DownloadRecord, options: DownloadOptions)
        throws(DownloadError)
    {
        let part = path + ".part"
        if FileSystem.exists(part) {
            // A part file with no record: never appended to blindly.
            record.isPartVerified = false
        }
        guard FileSystem.exists(path) else { return }
        if options.continuePartial {
            if !FileSystem.exists(part) {
                try FileSystem.move(path, to: part, replacing: false)
                record.isPartVerified = false
            }
            return
        }
        guard options.overwrite else {
            throw DownloadError(
                .destinationExists,
                "\(path) already exists and Haul did not create it; use --overwrite to replace it or -c to continue it"
            )
        }
        record.mayReplaceDestination = true
    }

    private static func validate(_ url: URL) throws(DownloadError) {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw DownloadError(.invalidURL, "'\(url.absoluteString)' is not an http or https URL")
        }
        guard let host = url.host, !host.isEmpty else {
            throw DownloadError(.invalidURL, "'\(url.absoluteString)' has no host")
        }
    }

    private static func absolute(_ path: String) -> String {
        let expanded = (path as NSString).expandingTildeInPath
        let full =
            expanded.hasPrefix("/")
            ? expanded : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(expanded)
        return (full as NSString).standardizingPath
    }

    private static func checkWritableFolder(_ path: String) throws(DownloadError) {
        guard FileSystem.isWritableDirectory(path) else {
            let reason = FileSystem.exists(path) ? "is not a writable folder" : "does not exist"
            throw DownloadError(.destinationNotWritable, "destination folder \(path) \(reason)")
        }
    }

    private static func snapshot(of record: DownloadRecord) -> Snapshot {
        Snapshot(
            id: DownloadID(record.id), url: record.url, destination: record.destination, state: record.state,
            receivedBytes: record.durableOffset, totalBytes: record.totalLength, isResumable: record.isResumable,
            lastError: record.lastError, connections: record.activeConnections
        )
    }
}

/// The version of Haul.
public enum HaulVersion {
    /// The version string shown by `haul --version`.
    public static let current = "0.1.0"
}
