import Foundation
import Haul
import HaulAPI
import HaulCore

/// A set of the daemon's downloads followed through its event stream: their events go to the terminal board as the
/// engine's events, in order, until every one of them has stopped (completed, failed, cancelled or paused).
///
/// Events can arrive before the command knows the ids of the downloads it added (the daemon tells subscribers as
/// soon as it adds them); they are held until `track` names the ids.
actor RemoteBatch {
    /// The board's events.
    nonisolated let events: Flattened
    /// The board's events in the groups they arrived in: a chunk of the daemon's stream wakes the board once, not once
    /// an event (following 1000 small files, waking it for each of their 2,400 events made about 1,500 thread
    /// switches and a fifth of `haul watch`'s CPU time).
    private let continuation: AsyncStream<[DownloadEvent]>.Continuation
    /// Events forwarded since the board was last given some.
    private var pending: [DownloadEvent] = []
    /// The downloads followed; nil until known. `followsAll` follows every download, new ones too.
    private var ids: Set<DownloadID>?
    private let followsAll: Bool
    private var held: [DownloadEvent] = []
    /// Each followed download as last seen; one that had stopped when following every download began is added only
    /// once an event tells of it (of a hundred thousand downloads, nearly all long finished, none is kept).
    private var latest: [DownloadID: DownloadSnapshot] = [:]
    private var first: [DownloadID: DownloadSnapshot] = [:]
    /// When each download was first seen running: a finished one's time is counted from then, not from when the
    /// command began (`haul watch` may begin long before a download starts, or a download wait in the queue).
    private var runningSince: [DownloadID: ContinuousClock.Instant] = [:]
    /// The downloads that started again from the first byte while followed.
    private var restarted: Set<DownloadID> = []
    private var isStarted = false
    private var startWaiters: [CheckedContinuation<Void, Never>] = []
    private var doneWaiters: [CheckedContinuation<Void, Never>] = []
    private(set) var isFinished = false

    /// Whether the board's stream ends once every followed download has stopped (else it goes on until `finish`).
    private let endsWhenStopped: Bool
    /// The state of each download when following began (the first snapshot, or `track`).
    private var startStates: [DownloadID: DownloadState] = [:]
    /// The followed downloads not yet stopped, kept as events arrive (checking every download on every event made
    /// following a thousand downloads quadratic).
    private var unstopped: Set<DownloadID> = []
    /// Followed downloads not yet stopped that a snapshot after a reconnect did not hold: they stopped (or were
    /// removed) while the stream was down, and are asked for one by one (`follow`).
    private var missing: [DownloadID] = []

    /// The states of the downloads the stream's snapshots hold: those not stopped. A daemon that keeps a hundred
    /// thousand finished downloads sends none of them; one of them that changes is told by its event.
    static let snapshotStates: [Components.Schemas.State] = [.queued, .running, .waitingForNetwork]

    init(followsAll: Bool = false, endsWhenStopped: Bool = true) {
        let (groups, continuation) = AsyncStream<[DownloadEvent]>.makeStream()
        events = Flattened(groups: groups)
        self.continuation = continuation
        self.followsAll = followsAll
        self.endsWhenStopped = endsWhenStopped
    }

    /// How many followed downloads failed since following began.
    var failures: Int {
        (ids ?? []).filter { latest[$0]?.state == .failed && startStates[$0] != .failed }.count
    }

    /// Takes events of the stream, in order; false once every followed download has stopped (the rest are not
    /// needed then).
    func receive(_ events: [DownloadEvent]) -> Bool {
        defer { flush() }
        for event in events where !take(event) { return false }
        return true
    }

    /// Takes one event of the stream; false once every followed download has stopped.
    func receive(_ event: DownloadEvent) -> Bool {
        receive([event])
    }

    /// Gives the board what was forwarded since it was last given some.
    private func flush() {
        guard !pending.isEmpty else { return }
        continuation.yield(pending)
        pending = []
    }

    private func take(_ event: DownloadEvent) -> Bool {
        if !isStarted {
            isStarted = true
            for waiter in startWaiters { waiter.resume() }
            startWaiters = []
        }
        guard !isFinished else { return false }
        // When it arrived, not when it is forwarded: events are held until `track` names the downloads, which may
        // be after they ended.
        switch event {
        case .added(let download), .changed(let download):
            if download.state == .running, runningSince[download.id] == nil { runningSince[download.id] = .now }
        default: break
        }
        if case .snapshot(let snapshot) = event {
            if followsAll, ids == nil {
                // The first snapshot: where every download stands. Those running are told as if they had just
                // started (their line off a terminal, their name on its board); the others have nothing to report.
                ids = Set(snapshot.downloads.map(\.id))
                // Grown once, not by doubling through a thousand downloads.
                startStates.reserveCapacity(snapshot.downloads.count)
                for download in snapshot.downloads {
                    if !Self.hasStopped(download) { latest[download.id] = download }
                    startStates[download.id] = download.state
                    recount(download.id)
                    if download.state == .running || download.state == .waitingForNetwork {
                        pending.append(.changed(download))
                    }
                }
            } else {
                // After a reconnect that could not be replayed: what changed meanwhile, as changes (one not kept is
                // the same as long as it has the state it had when following began). Following every download, one
                // stopped when following began and running again is followed from here.
                var held = Set<DownloadID>()
                for download in snapshot.downloads where follows(download.id) || followsAll {
                    held.insert(download.id)
                    ids?.insert(download.id)
                    let changed =
                        latest[download.id].map { $0 != download } ?? (download.state != startStates[download.id])
                    if changed { forward(.changed(download)) }
                }
                missing = unstopped.filter { !held.contains($0) }.sorted { $0.rawValue < $1.rawValue }
            }
            return !checkDone()
        }
        guard ids != nil || followsAll else {
            held.append(event)
            return true
        }
        // Following every download, one the first snapshot did not hold (new, or stopped then) is followed from its
        // first event. A change that leaves it stopped tells the state it had when following began: none ends failed
        // without first being queued and run again, changes told first (a failed download moved in the queue is not
        // a failure of this watch).
        if let id = event.downloadID, follows(id) || followsAll {
            if followsAll, ids?.insert(id).inserted == true, case .changed(let download) = event,
                Self.hasStopped(download)
            {
                startStates[id] = download.state
            }
            forward(event)
        }
        return !checkDone()
    }

    /// The downloads a snapshot after a reconnect showed to have stopped or gone meanwhile (`missing`), once.
    func takeMissing() -> [DownloadID] {
        defer { missing = [] }
        return missing
    }

    private func follows(_ id: DownloadID) -> Bool { ids?.contains(id) ?? false }

    private func forward(_ event: DownloadEvent) {
        switch event {
        case .added(let download), .changed(let download):
            latest[download.id] = download
            recount(download.id)
        case .removed(let id):
            latest[id] = nil
            recount(id)
        case .restarted(let id, _):
            // Started again from the first byte: none of the bytes it held when followed were kept.
            restarted.insert(id)
        default: break
        }
        pending.append(event)
    }

    /// Names the downloads to follow, as the daemon described them when they were added.
    func track(_ downloads: [DownloadSnapshot]) {
        ids = Set(downloads.map(\.id))
        unstopped = []
        for download in downloads {
            first[download.id] = download
            // Named downloads count as failures when they end failed, whatever they were before.
            startStates[download.id] = followsAll ? download.state : nil
            if latest[download.id] == nil { latest[download.id] = download }
            recount(download.id)
        }
        let waiting = held
        held = []
        for event in waiting where event.downloadID.map(follows) ?? false { forward(event) }
        flush()
        _ = checkDone()
    }

    /// Waits until the stream has delivered its first event (the snapshot): from then on nothing is missed.
    func waitUntilStarted() async {
        if isStarted { return }
        await withCheckedContinuation { startWaiters.append($0) }
    }

    /// Waits until every followed download has stopped (or `finish` was called).
    func waitUntilDone() async {
        if isFinished { return }
        await withCheckedContinuation { doneWaiters.append($0) }
    }

    /// The download as `track` was given it.
    func initial(_ id: DownloadID) -> DownloadSnapshot? { first[id] }

    /// The download as last seen.
    func download(_ id: DownloadID) -> DownloadSnapshot? { latest[id] }

    /// Stops following: the board's stream ends.
    func finish() {
        guard !isFinished else { return }
        isFinished = true
        flush()
        continuation.finish()
        for waiter in doneWaiters { waiter.resume() }
        doneWaiters = []
        for waiter in startWaiters { waiter.resume() }
        startWaiters = []
    }

    /// Whether every followed download has stopped; finishes when so.
    private func checkDone() -> Bool {
        guard endsWhenStopped, ids != nil else { return false }
        let stopped = unstopped.isEmpty
        if stopped { finish() }
        return stopped
    }

    /// Puts one download in or out of `unstopped`: a followed download is stopped once its state is neither queued
    /// nor active. A followed download without a state kept was removed, or had stopped when following every download
    /// began (`track` keeps a state for each download it names).
    private func recount(_ id: DownloadID) {
        guard follows(id) else {
            unstopped.remove(id)
            return
        }
        let isStopped = latest[id].map(Self.hasStopped) ?? true
        if isStopped { unstopped.remove(id) } else { unstopped.insert(id) }
    }

    /// Whether a download is neither queued nor active: completed, failed, cancelled or paused.
    private static func hasStopped(_ download: DownloadSnapshot) -> Bool {
        !(download.state == .queued || download.state.isActive)
    }

    /// Follows `client`'s event stream into this batch (in a task of its own, cancelled to stop), telling `output`
    /// when the stream is lost for good; the batch finishes either way.
    nonisolated func follow(_ client: DaemonClient, output: Output) -> Task<Void, Never> {
        Task {
            do {
                let events = RemoteEvents(
                    client: client, skipping: output.drawsProgress ? [] : ["progress"], states: Self.snapshotStates)
                try await events.follow { events in
                    guard await self.receive(events) else { return false }
                    let missing = await self.takeMissing()
                    guard !missing.isEmpty else { return true }
                    do { return await self.receive(try await Self.look(up: missing, at: client)) } catch {
                        output.error(ClientError(description: "lost the daemon: \(error)"))
                        return false
                    }
                }
            } catch {
                output.error(ClientError(description: "lost the daemon's event stream: \(error)"))
            }
            await finish()
        }
    }

    /// Each download in `ids` as the daemon has it now, as a change, or as removed when it has it no more. A daemon
    /// that does not answer is asked again for a while, as the stream's reader reconnects (`RemoteEvents.follow`).
    static func look(up ids: [DownloadID], at client: DaemonClient, tries: Int = 20) async throws -> [DownloadEvent] {
        var told: [DownloadEvent] = []
        for id in ids {
            var failures = 0
            while true {
                do {
                    let download = try await client.download(id.rawValue)
                    told.append(download.map { .changed($0.snapshot) } ?? .removed(id))
                    break
                } catch {
                    failures += 1
                    if failures >= tries || Task.isCancelled { throw error }
                    try await Task.sleep(for: .milliseconds(250))
                }
            }
        }
        return told
    }

    /// The board of `output` drawn from this batch's events until they end; completed downloads are reported with
    /// the time since they were first seen running, or since `started` for one already running then.
    nonisolated func render(on output: Output, single: Bool, since started: ContinuousClock.Instant) async {
        await output.render(events, single: single) { id in
            guard let last = await self.download(id) else { return nil }
            return HaulCommand.Get.result(
                of: last, since: await self.startedRunning(id) ?? started, resumedFrom: await self.resumedFrom(id))
        }
    }

    /// The bytes `id` held when following began and kept to the end: none when it started again meanwhile.
    func resumedFrom(_ id: DownloadID) -> Int64? { restarted.contains(id) ? 0 : first[id]?.receivedBytes }

    /// When `id` was first seen running, nil when it was running before this batch began following it.
    func startedRunning(_ id: DownloadID) -> ContinuousClock.Instant? { runningSince[id] }
}

extension RemoteBatch {
    /// The events of a stream of groups of events, one by one.
    struct Flattened: AsyncSequence, Sendable {
        typealias Element = DownloadEvent
        typealias Failure = Never
        let groups: AsyncStream<[DownloadEvent]>

        struct AsyncIterator: AsyncIteratorProtocol {
            var groups: AsyncStream<[DownloadEvent]>.AsyncIterator
            var group: [DownloadEvent] = []
            /// The next event's index in `group`.
            var position = 0

            mutating func next() async -> DownloadEvent? {
                while position == group.count {
                    guard let more = await groups.next() else { return nil }
                    (group, position) = (more, 0)
                }
                defer { position += 1 }
                return group[position]
            }

            mutating func next(isolation actor: isolated (any Actor)?) async -> DownloadEvent? {
                while position == group.count {
                    guard let more = await groups.next(isolation: actor) else { return nil }
                    (group, position) = (more, 0)
                }
                defer { position += 1 }
                return group[position]
            }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(groups: groups.makeAsyncIterator()) }
    }
}
