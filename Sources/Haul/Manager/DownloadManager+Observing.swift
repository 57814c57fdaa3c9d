import Foundation
import HaulCore
import Logging
import Synchronization

extension DownloadManager {
    // MARK: Observing

    /// Events of every download, or of one download only when `id` is given, from now on. Each call makes a new
    /// stream; it is not bounded (for readers in the same process that keep up). The stream of one download ends
    /// with it: after the event that completes, fails, cancels or removes it, or at once when it has already ended
    /// (a failed download that is retried later needs a new stream).
    ///
    /// `wanted`, when given, picks by their kind the events the stream carries: the rest are never queued for it,
    /// so a reader that needs a few kinds holds nothing else while it catches up (a batch of 10,000 adds is 10,000
    /// events at once), and a change that no stream wants is not made into a snapshot when no replay is kept.
    public nonisolated func events(
        for id: DownloadID? = nil, wanted: (@Sendable (DownloadEvent.Kind) -> Bool)? = nil
    ) -> DownloadEvents {
        DownloadEvents(
            subscription: hub.subscribe(filter: id, after: nil, bounded: false, wanted: wanted, snapshot: nil))
    }

    /// A subscription for a reader that may fall behind or reconnect (the daemon's event stream). With `after`, the
    /// id of the last event a reader saw, it begins with exactly the events that followed, when they are still in
    /// the replay window and from this run of the store; otherwise with a `snapshot` event of everything. It is
    /// bounded: queued progress collapses into the newest per download when the reader falls behind, and the
    /// subscription ends when it falls too far (the reader reconnects with its last id).
    /// `states`, when given, narrows the snapshots to downloads in them (a client following what runs need not read
    /// every finished download); the events after a snapshot are every download's (or `id`'s) all the same.
    public func subscribe(to id: DownloadID? = nil, after: EventID? = nil, states: Set<DownloadState>? = nil)
        -> EventSubscription
    {
        // A fleet's worker did not read which downloads had ended when it started; the one asked for is looked up.
        if leasing != nil, let id, let record = known(id.rawValue), record.state.isTerminal { hub.markEnded([id]) }
        // A fleet's worker replays from the store's event log what came before its own window (a client of another
        // worker, or of this one before it started).
        var earlier: [SequencedEvent] = []
        if let leasing, let after, after < hub.covered, let logged = try? leasing.events(after: after, limit: 10_000) {
            earlier = told(logged)
        }
        return hub.subscribe(filter: id, after: after, earlier: earlier, bounded: true) {
            .snapshot(self.managerSnapshot(for: id, in: states))
        }
    }

    /// The most downloads a fleet's worker puts in a snapshot of everything: a client pages through the rest.
    public static let fleetSnapshotLimit = 1000

    /// Everything now: the downloads (only `id` when given; only those in `states` when given), totals and
    /// settings. A worker of a fleet gives the first `fleetSnapshotLimit` downloads in queue order: it does not hold
    /// the whole queue.
    public func managerSnapshot(for id: DownloadID? = nil, in states: Set<DownloadState>? = nil) -> ManagerSnapshot {
        let downloads: [Snapshot]
        if let id {
            let record = known(id.rawValue).flatMap { states?.contains($0.state) ?? true ? $0 : nil }
            downloads = record.map { [snapshot(of: $0)] } ?? []
        } else {
            let limit = leasing == nil ? nil : Self.fleetSnapshotLimit
            downloads = ((try? queuePage(in: states, after: nil, limit: limit)) ?? []).map { snapshot(of: $0) }
        }
        return ManagerSnapshot(downloads: downloads, stats: stats(), settings: reported(settings))
    }

    /// The id of the newest event.
    public nonisolated var lastEventID: EventID { hub.lastID }

    /// The download now (live bytes, speed and segments while it runs).
    public func snapshot(_ id: DownloadID) throws(DownloadError) -> Snapshot {
        snapshot(of: try require(id))
    }

    /// The downloads with these ids that the manager still has, in the order given.
    public func snapshots(ofExisting ids: [DownloadID]) -> [Snapshot] {
        guard leasing != nil else { return ids.compactMap { catalog[$0.rawValue].map { snapshot(of: $0) } } }
        let found = (try? known(ids.map(\.rawValue))) ?? [:]
        return ids.compactMap { found[$0.rawValue].map { snapshot(of: $0) } }
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
        try queuePage(in: nil, after: nil, limit: nil).map { snapshot(of: $0) }
    }

    /// A page of the downloads in queue order: those in `states` (all when nil) after `cursor`, at most `limit`
    /// (all when nil), and the cursor of the last one when more follow. Paging stays stable while downloads change:
    /// a page begins after the place of the last download of the page before.
    public func snapshots(in states: Set<DownloadState>?, after cursor: QueueCursor?, limit: Int?)
        -> (downloads: [Snapshot], next: QueueCursor?)
    {
        let (records, next) = pageOfRecords(in: states, after: cursor, limit: limit)
        return (records.map { snapshot(of: $0) }, next)
    }

    /// The ids of a page, as `snapshots(in:after:limit:)` chooses them, for a reader that fetches the downloads a
    /// few at a time (`snapshots(of:)`) instead of holding thousands of them at once.
    public func page(in states: Set<DownloadState>?, after cursor: QueueCursor?, limit: Int?)
        -> (ids: [DownloadID], next: QueueCursor?)
    {
        guard leasing != nil else {
            let (places, next) = Self.trimmed(
                heldPlaces(in: states, after: cursor, limit: Self.oneMore(than: limit)), to: limit, place: { $0 })
            return (places.map { DownloadID($0.id) }, next)
        }
        let (records, next) = pageOfRecords(in: states, after: cursor, limit: limit)
        return (records.map { DownloadID($0.id) }, next)
    }

    /// A page in queue order, and the cursor of its last download when more follow (one more is read to know).
    private func pageOfRecords(in states: Set<DownloadState>?, after cursor: QueueCursor?, limit: Int?)
        -> (records: [DownloadRecord], next: QueueCursor?)
    {
        guard let records = try? queuePage(in: states, after: cursor, limit: Self.oneMore(than: limit)) else {
            return ([], nil)
        }
        return Self.trimmed(records, to: limit, place: QueueCursor.init)
    }

    /// One more than `limit`, which shows whether more follow (a limit of Int.max, "all of them", has none more).
    private static func oneMore(than limit: Int?) -> Int? { limit.map { $0 == .max ? $0 : max(0, $0) + 1 } }

    /// `items` cut to `limit`, and the place of the last one kept when some were cut.
    private static func trimmed<Item>(_ items: [Item], to limit: Int?, place: (Item) -> QueueCursor)
        -> ([Item], QueueCursor?)
    {
        guard let limit, items.count > limit else { return (items, nil) }
        let kept = Array(items.prefix(max(0, limit)))
        return (kept, kept.last.map(place))
    }

    /// The speed samples `run()` took, one a second for the last ten minutes (oldest first), in total and for the
    /// downloads that ran (of `id` only, when given), with the time of the newest sample (nil before the first).
    public func speedSamples(of id: DownloadID? = nil) -> (
        end: Date?, total: [Double], downloads: [String: SpeedHistory.Track]
    ) {
        (speedsEnd, speeds.total, speeds.tracks(of: id?.rawValue))
    }

    func recordSpeeds() {
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
        let counts = stateCounts
        for state in DownloadState.allCases { all[state] = counts[state, default: 0] }
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
        return ids.allSatisfy { id in known(id.rawValue).map { !Self.holdsWork($0.state) } ?? true }
    }

    /// Returns once `haveStopped(ids)` holds (downloads added meanwhile count when `ids` is nil; a named download
    /// queued again counts again), when the calling task is cancelled, or when the manager shuts down: ask
    /// `haveStopped` which. Each change of a download's state is checked against the waits, none is polled.
    public func waitUntilStopped(_ ids: [DownloadID]? = nil) async {
        guard !isShutDown, !haveStopped(ids) else { return }
        let key = nextStopWaiter
        nextStopWaiter += 1
        let named = ids.map { Set($0.map(\.rawValue)) }
        let open = named.map { names in names.filter { known($0).map { Self.holdsWork($0.state) } ?? false } }
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

    func endStopWait(_ key: Int) {
        stopWaiters.removeValue(forKey: key)?.continuation.resume()
    }

    /// Queued, running or waiting for the network: the states a wait for downloads to stop waits out.
    static func holdsWork(_ state: DownloadState) -> Bool { state == .queued || state.isActive }

    var workingCount: Int { stateCount(.queued) + stateCount(.running) + stateCount(.waitingForNetwork) }

    /// Tells the waits of `waitUntilStopped` that `id` now holds work (queued, running, waiting) or not.
    func tellStopWaiters(_ id: String, holdsWork: Bool) {
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
    func endedResult(of id: DownloadID) throws(DownloadError) -> Result<DownloadResult, DownloadError>? {
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

    /// The download as subscribers see it: the manager's record (its runner reports every change of the transfer,
    /// so it is current) with the live progress of a running download.
    /// Tells subscribers that `record` changed; its snapshot is made only when the replay keeps it or a subscriber
    /// wants it.
    func emitChanged(_ record: DownloadRecord) {
        hub.emit(.init(.changed, state: record.state), of: DownloadID(record.id)) { .changed(snapshot(of: record)) }
    }

    /// Tells subscribers that `record` was added (as `emitChanged(_:)`).
    func emitAdded(_ record: DownloadRecord) {
        hub.emit(.init(.added, state: record.state), of: DownloadID(record.id)) { .added(snapshot(of: record)) }
    }

    func snapshot(of record: DownloadRecord) -> Snapshot {
        let isRunning = tasks[record.id] != nil
        let progress = isRunning ? hub.progress(of: DownloadID(record.id)) : nil
        var snapshot = Snapshot(
            id: DownloadID(record.id), url: record.url, path: record.destination, directory: record.directory,
            state: record.state, priority: DownloadPriority(rawValue: record.priority) ?? .normal,
            position: record.queuePosition,
            receivedBytes: max(progress?.receivedBytes ?? 0, record.durableOffset),
            totalBytes: progress?.totalBytes ?? record.totalLength,
            bytesPerSecond: progress?.bytesPerSecond ?? 0, secondsRemaining: progress?.secondsRemaining,
            connections: isRunning ? openConnections(record, progress: progress) : 0,
            segments: record.segments, after: record.prerequisites.map(DownloadID.init), error: record.error,
            isResumable: record.isResumable, createdAt: record.createdAt, completedAt: record.completedAt,
            options: record.options, rateLimit: record.rateLimit, origin: record.origin,
            // Only a completed download has a result (a lookup saved for every other snapshot).
            sha256: record.state == .completed ? results[record.id]?.sha256 : nil,
            worker: isRunning ? workerName : record.worker
        )
        snapshot.mirrors = progress?.mirrors
        return snapshot
    }
}

extension DownloadManager {
    /// The connections a running download has open: at least the one it is opening, unless it waits to try again
    /// (its error is set until bytes arrive again). Then a download on one connection has none open, and one of
    /// several segments has those its machine last counted (the others may still transfer); the last progress may
    /// be older than the wait.
    func openConnections(_ record: DownloadRecord, progress: DownloadProgress?) -> Int {
        guard record.error == nil else { return record.segments == nil ? 0 : record.activeConnections }
        return max(progress?.connections ?? 0, record.activeConnections, 1)
    }
}

/// One wait of `DownloadManager.waitUntilStopped`: the downloads named (nil: all) and those of them still holding work.
struct StopWaiter {
    var named: Set<String>?
    var open: Set<String>
    let continuation: CheckedContinuation<Void, Never>
}
