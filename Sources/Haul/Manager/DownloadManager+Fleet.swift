import Foundation
import HaulCore
import Logging

/// A manager on a store several workers share (`LeasingStore`) runs only what it claims: as transfer slots free up
/// it claims queued downloads (and those whose holder's lease expired) in queue order, renews its leases every third
/// of their length, and stops a download at once when its lease is lost, writing nothing more of it. What any worker
/// changes reaches it through the store's event log, read once a second: its answers, events and waits cover the
/// whole fleet's downloads, and its event stream carries the log's ids.
extension DownloadManager {
    /// Claims downloads for the free transfer slots, off the actor (a store that reconnects may take seconds); one
    /// claim at a time. Those claimed start at once; when the claim filled every slot it asked for, another follows.
    func claimDownloads() {
        // A manager that leaves stored downloads alone (the command line's, beside the workers) claims nothing.
        guard let leasing, configuration.startsStoredDownloads, !isShutDown, !isClaiming else { return }
        let free = jobLimit - transferring
        guard free > 0 else { return }
        isClaiming = true
        let logger = configuration.logger
        let folders = allowedFolders.roots.flatMap(\.names)
        let total = fleetJobsInForce
        Task {
            let claimed: [DownloadRecord]
            do {
                claimed = try await Blocking.run { try leasing.claim(limit: free, within: folders, fleetTotal: total) }
            } catch {
                logger.error("cannot claim downloads: \((error as? DownloadError)?.message ?? "\(error)")")
                claimed = []
            }
            self.claimed(claimed, asked: free)
        }
    }

    private func claimed(_ records: [DownloadRecord], asked: Int) {
        isClaiming = false
        guard let leasing else { return }
        for var record in records {
            guard !isShutDown, tasks[record.id] == nil, transferring < jobLimit else {
                // The limit fell or the manager stops meanwhile: back to the queue for any worker.
                leasing.release(record.id)
                continue
            }
            if record.state.isActive {
                // Taken over from a worker that lost it: queued again, then started here.
                configuration.logger.notice(
                    "download \(record.id) taken over: its worker's lease expired; it goes on here from its last checkpoint"
                )
                try? record.apply(.interruptedByExit)
                record.activeConnections = 0
            }
            keep(record)
            do { try start(record) } catch {
                configuration.logger.error("\(record.url): cannot start: \(error.message)")
                leasing.release(record.id)
            }
        }
        if records.count == asked { claimDownloads() }
    }

    /// The store told that this worker lost the lease of `id`: its run stops, and nothing more of it is written.
    func leaseLost(_ id: String) {
        guard let task = tasks[id] else { return }
        configuration.logger.notice("download \(id) was taken over by another worker; it stops here")
        stopReasons[id] = .leaseLost
        task.cancel()
    }

    /// A run here ended on a lost lease: another worker holds the download now, and nothing of this run is stored. The
    /// fleet's feed passed over what it told of the download while this run held it (`adopt`), so it is taken in as
    /// the store has it now: waits for it and subscribers hear how it stands (it may have completed elsewhere
    /// meanwhile).
    func runEndedOnLostLease(_ id: String) {
        if let record = catalog[id] { catalog.forget(record) }
        leasing?.release(id)
        do {
            if let current = try current(id) {
                adopt([current])
                emitChanged(current)
            }
        } catch {
            configuration.logger.error(
                "cannot read download \(id), taken over by another worker: \(error.message); waits for it here hear of it with the fleet's next change of it"
            )
        }
        try? schedule()
    }

    /// Renews this worker's leases (and tells its heartbeat) at once and then every third of their length, until the
    /// calling task is cancelled or the worker's name is found taken.
    func renewLeases(clock: EngineClock) async {
        guard let leasing else { return }
        let interval = leasing.leaseDuration / 3
        // The first renewal at once: it is also the worker's first heartbeat.
        var isFirst = true
        while !Task.isCancelled {
            if !isFirst {
                do { try await clock.sleep(interval) } catch { return }
            }
            isFirst = false
            do {
                // A lost lease is told through `onLostLease` as well; this stops it without waiting for that.
                let lost = try await Blocking.run { try leasing.renewLeases() }
                for id in lost { leaseLost(id) }
                let transferring = transferring
                adopt(try await Blocking.run { try leasing.pulse(transferring: transferring) })
            } catch let error as DownloadError where error.code == .locked {
                // Its name is another process's now (`LeasingStore.pulse`): `run()` stops.
                configuration.logger.error("\(error.message)")
                cannotRun = error
                return
            } catch {
                configuration.logger.error(
                    "cannot renew this worker's leases: \((error as? DownloadError)?.message ?? "\(error)")")
            }
        }
    }

    /// Takes in a pulse: the fleet's rate limit (the settings' `rateLimit`, which any worker may change) is shared
    /// equally among the workers that transfer, this one counted (as one that is about to, when it transfers nothing
    /// yet). Each worker's own `-j` and connections stay its own.
    func adopt(_ pulse: FleetPulse) {
        workersSharingRate = pulse.otherWorkersTransferring + 1
        if let stored = pulse.settings,
            stored.rateLimit != settings.rateLimit || stored.maxConnectionsPerHost != settings.maxConnectionsPerHost
        {
            settings.rateLimit = stored.rateLimit
            settings.maxConnectionsPerHost = stored.maxConnectionsPerHost
            hostConnections.setLimit(stored.maxConnectionsPerHost)
            hub.emit(.settings(reported(settings)))
        }
        globalLimiter.setRate(rateShare(of: rateInForce))
    }

    /// Asks the store for this worker's slots of connections to each host (off the actor; one request at a time, and
    /// one more after it when asked meanwhile): when a connection waits for a slot, when one ends with slots to spare
    /// on a host another worker waits for, and once a second to renew them.
    func askForHostSlots(renewing: Bool = false) {
        // Without a limit, slots a worker held expire with their lease's length.
        guard let leasing, let limit = settings.maxConnectionsPerHost else { return }
        let hosts = hostConnections.hosts()
        let contested = contestedHosts
        let unmet = hosts.contains { (host: String, entry: HostConnections.Host) -> Bool in
            if entry.waiting > 0 && entry.inUse >= entry.granted { return true }
            return contested.contains(host) && entry.granted > entry.inUse + entry.waiting
        }
        guard unmet || (renewing && !hosts.isEmpty) else { return }
        guard !isAskingForHosts else {
            asksForHostsAgain = true
            return
        }
        isAskingForHosts = true
        let demands = hostConnections.beginRequest().mapValues {
            HostDemand(inUse: $0.inUse, wanted: $0.inUse + $0.waiting)
        }
        let logger = configuration.logger
        Task {
            var grants: HostGrants?
            do { grants = try await Blocking.run { try leasing.hostSlots(demands, limit: limit) } } catch {
                logger.error("cannot ask for connections to hosts: \((error as? DownloadError)?.message ?? "\(error)")")
            }
            self.answered(grants)
        }
    }

    private func answered(_ grants: HostGrants?) {
        hostConnections.grant(grants?.slots)
        if let grants { contestedHosts = grants.contested }
        isAskingForHosts = false
        if asksForHostsAgain {
            asksForHostsAgain = false
            askForHostSlots()
        }
    }

    /// This worker's share of the rate limit `total`: all of it on one machine.
    func rateShare(of total: Int64?) -> Int64? {
        guard leasing != nil, let total else { return total }
        return max(1, total / Int64(max(1, workersSharingRate)))
    }

    /// Counts the fleet's downloads again at once, for an answer that tells what a command over every download left
    /// (pause all, resume all, whose answers carry the counts): the count `followFleet` keeps may be a second old,
    /// from before the command.
    func recountFleet() async {
        guard let leasing else { return }
        do { fleetCounts = try await Blocking.run { try leasing.counts() } } catch {
            configuration.logger.error(
                "cannot count the fleet's downloads: \((error as? DownloadError)?.message ?? "\(error)")")
        }
    }

    /// Reads what the fleet changed since the last read and claims for free slots (once a second, from `run()`).
    func followFleet() async {
        guard let leasing else { return }
        let now = engineIdleClock.now()
        let countsDue = countsDue.map { now >= $0 } ?? true
        let position = fleetPosition
        let prunes = prunedAt.map { now - $0 >= Self.eventPruneInterval } ?? true
        do {
            let (logged, counted) = try await Blocking.run {
                // A burst (a large add) is read in several reads of `eventsPerRead`, up to ten a second.
                var logged = try leasing.events(after: position, limit: Self.eventsPerRead)
                var reads = 1
                while logged.count == Self.eventsPerRead * reads, reads < 10, let last = logged.last {
                    logged += try leasing.events(after: last.id, limit: Self.eventsPerRead)
                    reads += 1
                }
                if prunes { try leasing.pruneEvents(olderThan: Self.eventRetention) }
                guard countsDue else { return (logged, nil as ([DownloadState: Int], Duration)?) }
                let started = ContinuousClock.now
                let counts = try leasing.counts()
                return (logged, (counts, ContinuousClock.now - started))
            }
            if prunes { prunedAt = now }
            if let (counts, took) = counted {
                fleetCounts = counts
                // Counting reads the whole queue: at most a twentieth of the store connection's time goes to it
                // (every second while it is cheap; every 2 s when it takes 100 ms, with a million queued).
                self.countsDue = now + max(.seconds(1), took * 20)
            }
            let changed = take(logged)
            askForHostSlots(renewing: true)
            let ended = changed.filter { $0.state == .failed || $0.state == .cancelled }.map(\.id) + removedHere
            removedHere = []
            failDependents(of: ended, waiting: changed.filter { $0.state == .queued && !$0.prerequisites.isEmpty })
        } catch {
            configuration.logger.error(
                "cannot read the fleet's changes: \((error as? DownloadError)?.message ?? "\(error)")")
        }
        claimDownloads()
    }

    /// Fails the queued downloads whose prerequisite failed, was cancelled or was removed, as the scheduler of one
    /// machine does: claims skip them (their prerequisites never complete), so without this they would wait for
    /// ever. The change feed tells of each such end (`ended`, with the downloads this worker removed) and of each
    /// dependent added (`waiting`), so this looks only at those, never over the queue. Any worker may fail one; a
    /// dependent another worker failed first is no longer queued.
    func failDependents(of ended: [String], waiting: [DownloadRecord]) {
        guard let leasing else { return }
        var candidates = waiting
        if !ended.isEmpty {
            do { candidates += try leasing.dependents(of: ended) } catch {
                configuration.logger.error("cannot read the downloads that wait for others: \(error.message)")
            }
        }
        for record in candidates where record.state == .queued && tasks[record.id] == nil {
            guard case .failed(let reason) = prerequisiteStatus(of: record) else { continue }
            failDependent(record, reason: reason)
        }
    }

    /// How many of the store's events one read takes (up to ten reads a second; the rest follow a second later), how
    /// often old ones are deleted, and how old they may grow: a worker cut off from the store for longer misses what
    /// happened meanwhile.
    static let eventsPerRead = 5_000
    static let eventPruneInterval: Duration = .seconds(60)
    static let eventRetention: Duration = .seconds(3_600)

    /// Takes in the store's events: each is told to subscribers under its id (the newest of a download's in this
    /// read: they all show it as it is now), and the downloads as they are now are taken in; returns those.
    func take(_ logged: [FleetEvent]) -> [DownloadRecord] {
        guard let last = logged.last else { return [] }
        fleetPosition = last.id
        for event in told(logged) { hub.emitLogged(event.event, id: event.id) }
        // Each download once, as it is now.
        var seen = Set<String>()
        let records = logged.reversed().compactMap { $0.record }.filter { seen.insert($0.id).inserted }.reversed()
        adopt(Array(records))
        return Array(records)
    }

    /// The store's events as subscribers are told them: of the events of one download in `logged`, the newest only
    /// (each shows the download as it is now; one that was added among them is told as added).
    func told(_ logged: [FleetEvent]) -> [SequencedEvent] {
        var newest: [String: Int] = [:]
        var added: Set<String> = []
        for (index, event) in logged.enumerated() {
            newest[event.download] = index
            if event.kind == .added { added.insert(event.download) }
        }
        var told: [SequencedEvent] = []
        for (index, event) in logged.enumerated() where newest[event.download] == index {
            guard event.kind != .removed, var record = event.record else {
                told.append(SequencedEvent(id: event.id, event: .removed(DownloadID(event.download))))
                continue
            }
            // A download running here is known better here than by its last write.
            if tasks[record.id] != nil, let live = catalog[record.id] { record = live }
            let snapshot = snapshot(of: record)
            told.append(
                SequencedEvent(
                    id: event.id, event: added.contains(event.download) ? .added(snapshot) : .changed(snapshot)))
        }
        return told
    }

    /// Takes in downloads as the store has them now: those any worker changed (this worker's own runs are already
    /// known better here). Waits for a download that ended elsewhere end.
    func adopt(_ records: [DownloadRecord]) {
        for record in records where tasks[record.id] == nil {
            // An end remembered here stands until the download runs again.
            if !record.state.isTerminal {
                results[record.id] = nil
                errors[record.id] = nil
            }
            keep(record)
            if record.state.isTerminal, let ended = try? endedResult(of: DownloadID(record.id)) {
                finish(record.id, with: ended)
            }
        }
    }

    /// The download as the store has it now, when another worker may have changed it (nil when it is gone).
    func current(_ id: String) throws(DownloadError) -> DownloadRecord? {
        guard let leasing, tasks[id] == nil else { return catalog[id] }
        return try leasing.record(id: id)
    }

    /// The workers sharing this manager's store; without a shared store, this one alone (named after the host), its
    /// heartbeat now.
    public func workers() async throws(DownloadError) -> [WorkerStatus] {
        guard let leasing else {
            return [WorkerStatus(name: workerName, heartbeatAt: Date(), downloads: tasks.keys.sorted())]
        }
        do { return try await Blocking.run { try leasing.workers() } } catch let error as DownloadError {
            throw error
        } catch {
            throw DownloadError(.store, "cannot read the workers: \(error)")
        }
    }

    // MARK: Commands across the fleet

    /// The worker that runs `id` when it is not this one (a live lease of another's), else nil.
    func heldElsewhere(_ id: String) -> String? {
        guard let leasing, tasks[id] == nil, !leasing.holds(id) else { return nil }
        return try? leasing.holder(of: id)
    }

    /// Has the worker that runs `id` do `command`, and returns once the store shows it done (`isDone` of the row):
    /// its state event follows here then. The command is sent again every 2 s (a worker that was reconnecting to the
    /// store missed it); after 10 s without an answer, an error names the worker.
    func forward(
        _ command: FleetCommand, for id: String, to holder: String, until isDone: (DownloadRecord) -> Bool
    ) async throws(DownloadError) {
        guard let leasing else { return }
        let clock = engineIdleClock
        let started = clock.now()
        var sent: Duration?
        while clock.now() - started < .seconds(10) {
            if sent.map({ clock.now() - $0 >= .seconds(2) }) ?? true {
                try leasing.send(command, for: id)
                sent = clock.now()
            }
            // The row is read again every 100 ms: the holder answers within moments.
            do { try await clock.sleep(.milliseconds(100)) } catch {
                throw DownloadError(.cancelled, "stopped waiting for worker \(holder)")
            }
            guard let record = try current(id) else { return }
            if isDone(record) {
                emitChanged(record)
                return
            }
        }
        throw DownloadError(
            .locked, "download \(id) runs on worker \(holder), which did not answer within 10 seconds")
    }

    /// A command from another worker for a download this one runs.
    func obey(_ command: FleetCommand, for id: String) async {
        guard tasks[id] != nil else { return }
        let download = DownloadID(id)
        do {
            switch command {
            case .pause: try await pause(download)
            case .cancel: try await cancel(download)
            case .rateLimit(let rate): try await setRateLimit(rate, for: download)
            }
        } catch {
            configuration.logger.error("download \(id): another worker asked to \(command), but \(error.message)")
        }
    }
}
