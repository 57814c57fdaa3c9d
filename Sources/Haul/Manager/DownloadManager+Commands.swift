import Foundation
import HaulCore
import Logging
import Synchronization

extension DownloadManager {
    // MARK: Commands

    /// Pauses a queued or running download; a running one stops after flushing its exact offset, and this returns once
    /// it has stopped. One already finishing its file (every byte in, the file being checked and moved into place)
    /// completes instead: it is then `completed`, not `paused`, as its events and snapshot say.
    public func pause(_ id: DownloadID) async throws(DownloadError) {
        var record = try require(id)
        try record.apply(.pauseRequested)
        // A running download changes state when its runner has stopped (`finished`).
        if await stopRunning(id, because: .pause) { return }
        if let holder = heldElsewhere(id.rawValue) {
            return try await forward(.pause, for: id.rawValue, to: holder) { !Self.holdsWork($0.state) }
        }
        try persist(record)
        emitChanged(record)
    }

    /// Queues a paused download again (a failed or cancelled one is queued again by `retry(_:)`).
    public func resume(_ id: DownloadID) throws(DownloadError) {
        var record = try require(id)
        try record.apply(.resumeRequested)
        try requeue(&record)
    }

    /// Queues a failed or cancelled download again, from the bytes it still holds.
    public func retry(_ id: DownloadID) throws(DownloadError) {
        var record = try require(id)
        try record.apply(.retryRequested)
        try requeue(&record)
    }

    /// Stores a download the state machine has just queued again, from its first attempt.
    func requeue(_ record: inout DownloadRecord) throws(DownloadError) {
        record.attempts = 0
        record.error = nil
        errors[record.id] = nil
        try persist(record)
        sessionIDs.insert(record.id)
        emitChanged(record)
        try schedule()
    }

    /// Stops a download and deletes its part file (gives it back, when the user handed it over with `-c`); the record
    /// stays, as `cancelled`.
    public func cancel(_ id: DownloadID) async throws(DownloadError) {
        var record = try require(id)
        var probe = record
        try probe.apply(.cancelRequested)
        // A running download is cancelled when its runner has stopped (`finished`).
        if await stopRunning(id, because: .cancel) { return }
        if let holder = heldElsewhere(id.rawValue) {
            return try await forward(.cancel, for: id.rawValue, to: holder) { $0.state == .cancelled }
        }
        try markCancelled(&record)
    }

    /// Cancels the running task of `id`, if any, and waits until its runner has flushed and `finished` has run.
    func stopRunning(_ id: DownloadID, because reason: StopReason) async -> Bool {
        guard let task = tasks[id.rawValue] else { return false }
        stopReasons[id.rawValue] = reason
        task.cancel()
        await task.value
        return true
    }

    /// Deletes the part file and records the download as cancelled.
    func markCancelled(_ record: inout DownloadRecord) throws(DownloadError) {
        DownloadFolder.deleteFiles(of: record, includingFile: false, allowed: allowedFolders)
        record.partIdentity = nil
        record.handOver = nil
        try record.apply(.cancelRequested)
        record.durableOffset = 0
        record.segments = nil
        record.remoteFacts = nil
        try persist(record)
        finish(record.id, with: .failure(DownloadError(.cancelled, "download cancelled")))
        emitChanged(record)
    }

    /// Pauses every queued, running or waiting download: the queued ones first, so that the slot each running one
    /// leaves when it pauses is not given to a queued one on the way (in queue order, every download would be started
    /// and paused in turn). The queued ones this manager holds are stored paused in one transaction, not one each.
    public func pauseAll() async {
        if leasing == nil {
            var paused: [DownloadRecord] = []
            try? await forEachDownload(in: [.queued]) { record in
                var record = record
                // One being started (its runner made) is paused as a running one is, below.
                guard tasks[record.id] == nil, (try? record.apply(.pauseRequested)) != nil else { return }
                paused.append(record)
            }
            try? persistAll(paused)
        }
        for states: Set<DownloadState> in [[.queued], [.running, .waitingForNetwork]] {
            try? await forEachDownload(in: states) { record in
                try? await pause(DownloadID(record.id))
            }
        }
        await recountFleet()
    }

    /// Queues every paused download again, stored in one transaction when this manager holds them.
    public func resumeAll() async {
        guard leasing == nil else {
            try? await forEachDownload(in: [.paused]) { record in try? resume(DownloadID(record.id)) }
            await recountFleet()
            return
        }
        var resumed: [DownloadRecord] = []
        try? await forEachDownload(in: [.paused]) { record in
            var record = record
            guard (try? record.apply(.resumeRequested)) != nil else { return }
            // As `requeue` queues one: from its first attempt, its error over.
            record.attempts = 0
            record.error = nil
            errors[record.id] = nil
            sessionIDs.insert(record.id)
            resumed.append(record)
        }
        try? persistAll(resumed)
        try? schedule()
    }

    /// Stores `records` in one transaction, then keeps and tells each, as `persist` and `emitChanged` do one.
    private func persistAll(_ records: [DownloadRecord]) throws(DownloadError) {
        guard !records.isEmpty else { return }
        try store.save(records)
        for record in records {
            keep(record)
            emitChanged(record)
        }
    }

    /// Moves `id` in the queue to just before `other` (and takes `other`'s priority, so the move is what the queue
    /// shows). Running downloads keep running; the order decides what starts next.
    public func move(_ id: DownloadID, before other: DownloadID) throws(DownloadError) {
        var record = try require(id)
        let target = try require(other)
        guard record.id != target.id else { return }
        let positions = try positions(
            priority: target.priority, excluding: id.rawValue, before: QueueCursor(target))
        let previous = positions.before ?? target.queuePosition - 1
        record.priority = target.priority
        record.queuePosition = (previous + target.queuePosition) / 2
        try reorder(record)
    }

    /// Moves `id` before or after every other download of its priority.
    public func move(_ id: DownloadID, to end: QueueEnd) throws(DownloadError) {
        var record = try require(id)
        let others = try positions(priority: record.priority, excluding: record.id, before: nil)
        switch end {
        case .top: record.queuePosition = (others.lowest ?? record.queuePosition) - 1
        case .bottom:
            record.queuePosition = max(others.highest ?? record.queuePosition, try lastQueuePosition()) + 1
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

    func reorder(_ record: DownloadRecord) throws(DownloadError) {
        try persist(record)
        emitChanged(record)
        try schedule()
    }

    /// Changes the most connections of one download (1...16), from its next run on (a running download keeps the
    /// connections it has).
    public func setConnections(_ connections: Int, for id: DownloadID) throws(DownloadError) {
        do { try DownloadRules.checkConnections(connections) } catch {
            throw DownloadError(error, subject: "connections")
        }
        var record = try require(id)
        record.options.maxConnectionsPerDownload = connections
        try persist(record)
        emitChanged(record)
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
    public func currentSettings() -> ManagerSettings { reported(settings) }

    /// The settings now, read without waiting for the actor (a request that only needs the defaults does not queue
    /// behind the manager's work).
    public nonisolated var settingsNow: ManagerSettings { settingsMirror.withLock { $0 } }

    /// Changes the settings at once (and stores them when `persistsSettings`); subscribers get a `settings` event.
    public func update(_ new: ManagerSettings) throws(DownloadError) {
        var new = new
        new.scheduleInForce = nil
        do {
            try DownloadRules.checkConcurrentDownloads(new.maxConcurrentDownloads)
            try DownloadRules.checkRate(new.rateLimit)
            try DownloadRules.checkConnections(new.connectionsPerDownload)
            try DownloadRules.checkConnectionsPerHost(new.maxConnectionsPerHost)
            try DownloadRules.checkDownloadsPerHost(new.maxDownloadsPerHost)
        } catch {
            throw DownloadError(error, subject: Self.subject(of: error.rule))
        }
        let timetable = try Schedule(parsing: new.schedule)
        let sorting = try SortRules(parsing: new.sortRules)
        guard new != settings else { return }
        if configuration.persistsSettings { try store.saveSettings(new) }
        settings = new
        self.timetable = timetable
        self.sorting = sorting
        scheduleEffect = Self.effect(of: timetable, at: configuration.calendar)
        globalLimiter.setRate(rateShare(of: rateInForce))
        hostConnections.setLimit(new.maxConnectionsPerHost)
        hub.emit(.settings(reported(new)))
        try schedule()
    }

    /// Limits one download (all its connections) to `bytesPerSecond` (nil: no limit of its own), at once if it runs,
    /// and for every later run.
    public func setRateLimit(_ bytesPerSecond: Int64?, for id: DownloadID) async throws(DownloadError) {
        try Self.checkRate(bytesPerSecond)
        var record = try require(id)
        if let holder = heldElsewhere(id.rawValue) {
            return try await forward(.rateLimit(bytesPerSecond), for: id.rawValue, to: holder) {
                $0.rateLimit == bytesPerSecond
            }
        }
        record.rateLimit = bytesPerSecond
        try persist(record)
        downloadLimiters[id.rawValue]?.setRate(bytesPerSecond)
        emitChanged(record)
    }

    static func checkRate(_ bytesPerSecond: Int64?) throws(DownloadError) {
        do { try DownloadRules.checkRate(bytesPerSecond) } catch { throw DownloadError(error, subject: "a rate limit") }
    }

    /// Forgets a download that is not running, and deletes its part file (a file the user handed over with `-c` is
    /// given back instead, `DownloadFolder.deleteFiles`); with `deletingFile` also deletes its completed file, or
    /// the file handed over.
    public func remove(_ id: DownloadID, deletingFile: Bool = false) throws(DownloadError) {
        let record = try require(id)
        try checkRemovable(record)
        DownloadFolder.deleteFiles(of: record, includingFile: deletingFile, allowed: allowedFolders)
        try store.delete(id: id.rawValue)
        removed(record)
    }

    /// Throws why `record` cannot be removed now: it runs here, or in another process.
    private func checkRemovable(_ record: DownloadRecord) throws(DownloadError) {
        guard tasks[record.id] == nil else {
            throw DownloadError(
                .illegalTransition, "cannot remove a download that is running; pause or cancel it first")
        }
        // Another process runs it, which only that process can stop: its part file's lock is held. Active in the
        // store without that, the process that ran it is gone (killed) and it may go, once its part file exists (a
        // run holds the lock from the part file's creation to its end). A completed or cancelled download has no
        // part file left to look at (`clean` forgets thousands of those). A fleet's worker holds it by its lease.
        let mayHavePart = ![.completed, .cancelled].contains(record.state)
        let runsElsewhere =
            leasing == nil
            ? (mayHavePart && DownloadFolder.isPartHeldElsewhere(record, allowed: allowedFolders))
                || (record.state.isActive && record.partIdentity == nil)
            : record.state.isActive
        guard !runsElsewhere else {
            let stop =
                leasing == nil
                ? "stop that one first (Ctrl-C where it runs)" : "cancel or pause it through a worker first"
            throw DownloadError(
                .illegalTransition, "cannot remove a download that another process is running; \(stop)")
        }
    }

    /// Forgets `record`, whose row is deleted, and tells whoever waits for it or listens.
    private func removed(_ record: DownloadRecord) {
        let id = DownloadID(record.id)
        forget(record)
        if leasing != nil { removedHere.append(record.id) }
        sessionIDs.remove(record.id)
        // Whoever waits for its result hears that it is gone, instead of waiting for ever.
        finish(record.id, with: .failure(DownloadError(.notFound, "download \(id) was removed")))
        errors[record.id] = nil
        hub.emit(.removed(id))
    }

    /// Forgets every completed, cancelled and failed download (their files stay; a failed one's part file goes, or
    /// goes back to its name when the user handed it over, as `remove` does); returns how many. One that another
    /// process runs again meanwhile stays. Their rows are deleted a thousand to a transaction.
    @discardableResult
    public func clean() async throws(DownloadError) -> Int {
        var ended: [DownloadRecord] = []
        try await forEachDownload(in: [.completed, .failed, .cancelled]) { record in
            if (try? checkRemovable(record)) != nil { ended.append(record) }
        }
        for start in stride(from: 0, to: ended.count, by: 1_000) {
            let part = ended[start..<min(ended.count, start + 1_000)]
            for record in part {
                DownloadFolder.deleteFiles(of: record, includingFile: false, allowed: allowedFolders)
            }
            try store.delete(ids: part.map(\.id))
            for record in part { removed(record) }
        }
        return ended.count
    }

    /// Runs `body` (commands to this manager) with the start of queued downloads held until it returns, so that
    /// commands given together take effect as one, as aria2 applies a `system.multicall` or a batch of calls: pausing
    /// a running download and then the queued ones behind it starts none of them in between (each pause would
    /// otherwise hand its slot to the next queued download, which would send its request before its own pause came).
    /// Afterwards what may start starts. The queue waits only while `body` runs, so it should not wait for anything
    /// but the manager.
    public func holdingStarts<T: Sendable>(_ body: @Sendable () async -> T) async -> T {
        startsHeld += 1
        let value = await body()
        startsHeld -= 1
        try? schedule()
        return value
    }

    /// Stops every running download and waits until each has flushed its exact offset. By default they go back to
    /// `queued` and resume by themselves when a manager on the same store starts again (as after a crash); with
    /// `pausing` they become `paused`, as a user's pause would leave them. The manager accepts no work afterwards.
    public func shutdown(pausing: Bool = false) async {
        isShutDown = true
        // A download another process runs is that process's to store: nothing of it is written here.
        heldElsewhereWatch?.cancel()
        heldElsewhereWatch = nil
        heldElsewhere = []
        // Cancel all first, then wait: the runners flush in parallel.
        for (id, task) in tasks {
            stopReasons[id] = pausing ? .pause : .exit
            task.cancel()
        }
        for task in Array(tasks.values) { await task.value }
        await endNoticeDeliveries()
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

}
