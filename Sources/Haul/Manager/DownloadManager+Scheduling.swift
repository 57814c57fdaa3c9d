import Foundation
import HaulCore
import Logging
import Synchronization

extension DownloadManager {
    // MARK: Scheduling

    /// Starts queued downloads while fewer than the limit run: higher priority first, then queue order, never before
    /// their prerequisites have completed. A download whose prerequisite failed, was cancelled or was removed fails
    /// with a reason that names it.
    func schedule() throws(DownloadError) {
        guard !isShutDown, startsHeld == 0 else { return }
        guard transferring < jobLimit else { return }
        // A worker of a fleet starts what it claims.
        guard leasing == nil else { return claimDownloads() }
        // The queue is kept in order: the first ones that may start are all this looks at (with thousands queued,
        // sorting them each time a download finished made a batch quadratic).
        var queued: [String] = []
        var free = jobLimit - transferring
        // With a limit per host, a download of a host at its limit is passed over for the next one.
        let perHost = settings.maxDownloadsPerHost
        var hosts = perHost == nil ? [:] : runningPerHost()
        for key in catalog.queue {
            // A `where free > 0` clause would walk the rest of the queue after the last free slot is taken: with a
            // batch of thousands queued, each finished download paid for every queued one.
            guard free > 0 else { break }
            guard tasks[key.id] == nil, configuration.startsStoredDownloads || sessionIDs.contains(key.id),
                heldElsewhere.isEmpty || !heldElsewhere.contains(key.id),
                let prerequisites = catalog.prerequisites(of: key.id)
            else { continue }
            let host = perHost == nil ? "" : catalog.url(of: key.id).map(Self.host(of:)) ?? ""
            if let perHost, hosts[host, default: 0] >= perHost { continue }
            queued.append(key.id)
            if case .ready = prerequisiteStatus(of: prerequisites) {
                free -= 1
                if perHost != nil { hosts[host, default: 0] += 1 }
            }
        }
        var failedAny = false
        var passedAny = false
        for id in queued {
            guard transferring < jobLimit else { break }
            guard let prerequisites = catalog.prerequisites(of: id) else { continue }
            switch prerequisiteStatus(of: prerequisites) {
            case .ready:
                if !startsHere(id) {
                    passedAny = true
                } else if let record = catalog[id] {
                    do { try start(record) } catch {
                        runLocks?.release(id)
                        throw error
                    }
                }
            case .waiting: continue
            case .failed(let reason):
                if let record = catalog[id] { failDependent(record, reason: reason) }
                failedAny = true
            }
        }
        // A failed dependent may fail its own dependents in turn; a download another process runs leaves its slot
        // to the next.
        if failedAny || passedAny { try schedule() }
    }

    /// The host a download counts against for `maxDownloadsPerHost`: its URL's, lowercased.
    static func host(of record: DownloadRecord) -> String { host(of: record.url) }

    /// The host of `url`, lowercased; empty when it has none.
    static func host(of url: String) -> String {
        URL(string: url)?.host?.lowercased() ?? ""
    }

    /// How many downloads of each host transfer now.
    func runningPerHost() -> [String: Int] {
        var counts: [String: Int] = [:]
        for id in tasks.keys where !finishing.contains(id) {
            if let record = catalog[id] { counts[Self.host(of: record), default: 0] += 1 }
        }
        return counts
    }

    enum PrerequisiteStatus { case ready, waiting, failed(String) }

    func prerequisiteStatus(of record: DownloadRecord) -> PrerequisiteStatus {
        prerequisiteStatus(of: record.prerequisites)
    }

    /// Whether the downloads of `prerequisites` let a download that waits for them start.
    func prerequisiteStatus(of prerequisites: [String]) -> PrerequisiteStatus {
        var waiting = false
        for id in prerequisites {
            guard let prerequisite = known(id) else { return .failed("download \(id) it waits for was removed") }
            switch prerequisite.state {
            case .completed: continue
            case .failed: return .failed("download \(id) (\(prerequisite.url)) it waits for failed")
            case .cancelled: return .failed("download \(id) (\(prerequisite.url)) it waits for was cancelled")
            default: waiting = true
            }
        }
        return waiting ? .waiting : .ready
    }

    func failDependent(_ record: DownloadRecord, reason: String) {
        var record = record
        let error = DownloadError(.illegalTransition, "not started: \(reason)")
        guard (try? record.apply(.failedPermanently)) != nil else { return }
        record.error = error
        attachNotice(to: &record, .failed)
        try? persist(record)
        if record.notice != nil { deliverNotice(of: record, after: nil) }
        finish(record.id, with: .failure(error))
        emitChanged(record)
    }

    /// Higher priority first, then queue position.
    func queueOrder<S: Sequence>(_ candidates: S) -> [DownloadRecord] where S.Element == DownloadRecord {
        candidates.sorted { QueueCursor($0).precedes(QueueCursor($1)) }
    }

    func persist(_ record: DownloadRecord) throws(DownloadError) {
        try store.save(record)
        keep(record)
    }

    /// Keeps `record` as the manager's view of its download. A fleet's worker keeps only what it runs: a download it
    /// does not run is the store's.
    func keep(_ record: consuming DownloadRecord) {
        // Told after the catalog has it: a wait for every download counts the catalog's states.
        let told = stopWaiters.isEmpty ? nil : (id: record.id, holdsWork: Self.holdsWork(record.state))
        if leasing != nil, tasks[record.id] == nil, record.state != .running {
            catalog.forget(record)
        } else {
            catalog.keep(record)
        }
        if let told { tellStopWaiters(told.id, holdsWork: told.holdsWork) }
    }

    func forget(_ record: DownloadRecord) {
        catalog.forget(record)
        if !stopWaiters.isEmpty { tellStopWaiters(record.id, holdsWork: false) }
    }

    func start(_ record: consuming DownloadRecord) throws(DownloadError) {
        var record = record
        try record.apply(.started)
        // The row says it runs from the download's first write (its answer's, or its first retry's), not from a
        // write of its own: until then the download is still waiting for a connection, and after a crash a download
        // stored as queued resumes as one stored as running would. A fleet's worker writes it at once: the other
        // workers list a claimed download from the shared store.
        if leasing != nil { store.submit(.state(.running, for: record.id)) }
        keep(record)
        let id = record.id
        if record.options.tls.insecure {
            // Each run says so in the log (the daemon's; `haul get --insecure` warns on its terminal instead, and
            // logs only warnings and worse).
            configuration.logger.notice(
                "\(record.url): insecure: the server's TLS certificate is not verified; the server is not proven")
        }
        let ownLimiter = RateLimiter(bytesPerSecond: record.rateLimit, clock: engineClock)
        downloadLimiters[id] = ownLimiter
        let environment = RunnerEnvironment(
            transport: transport,
            clock: engineClock,
            idleClock: engineIdleClock,
            metronome: metronome,
            events: hub,
            settings: configuration.engine,
            logger: configuration.logger,
            limiters: [globalLimiter, ownLimiter],
            hostConnections: hostConnections,
            report: { [weak self] report throws(DownloadError) in try await self?.runnerReported(id, report) },
            committed: { [store] commit throws(DownloadError) in try await store.committed(commit) },
            allowedFolders: allowedFolders,
            sorting: sorting,
            lease: leasing?.lease(of: id),
            followsEarlierLeases: leasing?.followsEarlierLeases(id) ?? false
        )
        emitChanged(record)
        tasks[id] = Self.run(record, environment: environment, for: self)
    }

    /// The task of a run. It starts on the cooperative pool, not on the manager: a task made here would wait first
    /// for the manager's own queue, which a burst of downloads keeps full. What the run reports reaches the manager
    /// after `start` returns, and `start` registers the task.
    nonisolated static func run(
        _ record: DownloadRecord, environment: RunnerEnvironment, for manager: DownloadManager
    ) -> Task<Void, Never> {
        Task {
            let (outcome, transfer) = await DownloadRunner.run(record: record, environment: environment)
            await manager.finished(record.id, outcome: outcome, transfer: transfer)
        }
    }

    /// Takes in what a runner reports: the manager is the only writer of a download's record and its row. Stores
    /// what must be stored before the runner goes on (the transfer's state: a checkpoint is durable once this
    /// returns) and tells subscribers.
    ///
    /// The writes are queued, not waited for (the store commits those of many downloads together): the runner waits
    /// for the returned commit only where a later step depends on it (the row must hold the finished length before
    /// the file is renamed). Every other write may trail: a stored offset that lags behind the part file, or facts
    /// a run did not store, are what a crash leaves anyway, and the resume rules handle them.
    func runnerReported(_ id: String, _ report: RunnerReport) throws(DownloadError) -> DownloadStore.Commit? {
        guard var record = catalog[id], tasks[id] != nil else { return nil }
        // A run whose lease was lost stores nothing more, and hears that it was refused.
        if let leasing, !leasing.holds(id) {
            throw DownloadError(.locked, "download \(id) was taken over by another worker")
        }
        var commit: DownloadStore.Commit?
        switch report {
        case .transfer(let transfer, let waiting, let claiming):
            if claiming, let path = transfer.destination, isDestinationClaimed(path, excluding: id) {
                throw DownloadError(.destinationExists, "another download claims \(path)")
            }
            let named = record.destination != transfer.destination
            record.adopt(transfer)
            keep(record)
            // A folder download's name is news for subscribers; facts and offsets are not (progress tells the bytes).
            if named { emitChanged(record) }
            return store.submit(try .transfer(record), awaited: waiting)
        case .takingLeftOver(let path):
            if isDestinationClaimed(path, excluding: id) {
                throw DownloadError(.destinationExists, "another download claims \(path)")
            }
            return nil
        case .checkpoint(let mark):
            record.store(mark)
            keep(record)
            return store.submit(try .transfer(record), awaited: true)
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
            try record.apply(.networkLost)
            record.error = error
            commit = store.submit(.state(record.state, for: id))
        case .networkReturned:
            try record.apply(.networkReturned)
            record.error = nil
            commit = store.submit(.state(record.state, for: id))
        case .recovered:
            // The error told with the retry is over: the download is not shown failing while it transfers.
            guard record.error != nil else { return nil }
            record.error = nil
            commit = store.submit(.attempts(record))
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
        emitChanged(record)
        return commit
    }

    func finished(_ id: String, outcome: RunOutcome, transfer: TransferReport) {
        tasks[id] = nil
        runLocks?.release(id)
        finishing.remove(id)
        downloadLimiters[id] = nil
        hub.clearProgress(of: DownloadID(id))
        var reason = stopReasons.removeValue(forKey: id)
        if let leasing, !leasing.holds(id) { reason = .leaseLost }
        if reason == .leaseLost {
            runEndedOnLostLease(id)
            return
        }
        defer { leasing?.release(id) }
        // The manager stored each change of the transfer as it was reported; the runner's last word has its names
        // as the run left them. The manager's own fields (priority, place, limit, connections) stay as it has them.
        guard var record = catalog[id] else {
            // Not in the catalog any more: whoever waits for it still hears how it ended.
            switch outcome {
            case .completed(let result): finish(id, with: .success(result))
            case .failed(let error): finish(id, with: .failure(error))
            case .stopped, .metalink: break
            }
            return
        }
        record.adopt(transfer)
        record.activeConnections = 0
        switch outcome {
        case .completed(let result):
            record.complete(at: result.path, bytes: result.bytes)
            settle(&record, on: .finished)
            attachNotice(to: &record, .completed)
            // Queued: should it not reach the store, the next run recognises the finished file as its own. Its
            // notice goes out once it is stored.
            var commit: StoreCommit?
            do { commit = store.submit(try .completion(record)) } catch {
                configuration.logger.error("\(record.url): completed, but storing that failed: \(error.message)")
            }
            keep(record)
            if record.notice != nil { deliverNotice(of: record, after: commit) }
            finish(id, with: .success(result))
        case .failed(let error) where reason == nil && error.code == .locked:
            // Another process holds the download (its part file's lock): the row is that process's to write, and
            // the download has not failed there. Only this process's caller hears that it could not run it.
            settle(&record, on: .failedPermanently)
            record.error = error
            keep(record)
            finish(id, with: .failure(error))
        case .failed(let error) where reason == nil:
            settle(&record, on: .failedPermanently)
            record.error = error
            if refreshesLink(of: record) {
                // The refresh command gives a new link; the download is told as failed only if that does not work
                // (`refreshEnded`): no change is emitted now, or every listener would show a failure that is then
                // undone.
                try? persist(record)
                refreshLink(of: record)
                try? schedule()
                return
            } else {
                attachNotice(to: &record, .failed)
                try? persist(record)
                if record.notice != nil { deliverNotice(of: record, after: nil) }
                finish(id, with: .failure(error))
            }
        case .metalink(let metalink) where reason == nil:
            do {
                let others = try follow(metalink, record: &record)
                settle(&record, on: .interruptedByExit)
                try? persist(record)
                if !others.isEmpty {
                    followUps[id] = Task {
                        do throws(BatchError) { return try self.add(others).map(\.id) } catch {
                            self.configuration.logger.error(
                                "\(record.url): cannot add the other files of its Metalink: \(error.error.message)")
                            return []
                        }
                    }
                }
            } catch {
                settle(&record, on: .failedPermanently)
                record.error = error
                try? persist(record)
                finish(id, with: .failure(error))
            }
        case .stopped, .failed, .metalink:
            switch reason {
            case .cancel:
                keep(record)
                try? markCancelled(&record)
                try? schedule()
                return
            case .exit:
                settle(&record, on: .interruptedByExit)
            default:
                settle(&record, on: .pauseRequested)
            }
            try? persist(record)
        }
        emitChanged(record)
        try? schedule()
    }

    /// Applies what a runner's end means for its download. The table allows each of these from the states a
    /// running download can be in; should it not, the log says so and the record keeps its state.
    func settle(_ record: inout DownloadRecord, on event: DownloadStateMachine.Event) {
        do { try record.apply(event) } catch {
            configuration.logger.error("\(record.url): the run ended, but \(error.message)")
        }
    }

    func finish(_ id: String, with result: Result<DownloadResult, DownloadError>) {
        switch result {
        case .success(let value): results[id] = value
        case .failure(let error): errors[id] = error
        }
        if leasing != nil {
            // A fleet's worker remembers the newest ends only (the store has every download's): what it hears of the
            // fleet's must not grow with the queue. An older one's result is made again from its row and its file.
            endedHere.append(id)
            if endedHere.count > Self.endsRemembered * 2 {
                for old in endedHere.prefix(endedHere.count - Self.endsRemembered) where tasks[old] == nil {
                    results[old] = nil
                    errors[old] = nil
                }
                endedHere.removeFirst(endedHere.count - Self.endsRemembered)
            }
        }
        for waiter in waiters.removeValue(forKey: id) ?? [] {
            waiter.resume(with: result.mapError { $0 as any Error })
        }
        resumeBatchWaiters(ending: id)
    }

    /// Tells the batch waits of `results(of:)` that `id` ended (every id, with nil, at shutdown).
    func resumeBatchWaiters(ending id: String?) {
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

}
