import Foundation
import HaulCore
import Logging
import NIOCore
import Synchronization

/// Everything a runner needs from its manager.
struct RunnerEnvironment: Sendable {
    let transport: any HTTPTransport
    /// The clock backoffs sleep on.
    let clock: EngineClock
    /// The clock of the transfer's own time: idle timeouts, the ramp, checkpoints and progress by time.
    let idleClock: EngineClock
    /// The manager's shared timer on `idleClock`: the machine's ticks.
    let metronome: Metronome
    let events: EventHub
    let settings: DownloadManager.Configuration.Engine
    let logger: Logger
    /// The limits this download's bytes count against (all downloads', its own).
    let limiters: [RateLimiter]
    /// Tells the manager what the runner learned or did, in order. The manager is the only writer of a download's
    /// record and its row in the store. Progress goes to `events` directly. The manager queues what it stores; the commit it returns says when
    /// it is in the store.
    let report: @Sendable (RunnerReport) async throws(DownloadError) -> DownloadStore.Commit?
    /// Waits until a commit is in the store.
    let committed: @Sendable (DownloadStore.Commit) async throws(DownloadError) -> Void
    /// Whether another download of the manager already claims `path` (a folder download choosing its name).
    let isDestinationClaimed: @Sendable (String) async -> Bool
    /// The folders confined downloads are opened beneath.
    let allowedFolders: AllowedFolders
}

/// What a runner tells its manager while it runs.
enum RunnerReport: Sendable {
    /// What the transfer learned or did to its part file: the file name a folder download chose, final URL, remote
    /// facts, durable offset, segments, whether the part's bytes are verified. With `waiting`, the runner waits for
    /// the commit (and hears of its failure).
    case transfer(DownloadRecord, waiting: Bool)
    /// The download starts again from 0 (a changed file, a server that stopped honouring ranges, …): not a failure.
    case restarted(String)
    /// The server cannot be reached; the download waits for the network.
    case waitingForNetwork(DownloadError)
    /// The server answers again after a wait for the network.
    case networkReturned
    /// A retryable error; the download or one of its connections waits `delay`.
    case retrying(DownloadError, delay: Duration, attempts: Int?)
    /// Connections open now.
    case connections(Int)
    /// Every byte has arrived and no connection is open: what is left is verifying, syncing and moving the file.
    /// The download no longer needs a transfer slot.
    case finishing
    /// After `finishing`, the download transfers again (the checksum did not match: a fresh fetch).
    case transferring
}

/// How a run ended.
enum RunOutcome: Sendable {
    case completed(DownloadResult)
    case failed(DownloadError)
    /// Stopped by cancellation (pause, cancel, shutdown) after flushing the exact offset.
    case stopped
}

/// Runs one download from the manager's record to a completed file, a failure, or a clean stop, by performing the
/// actions of its `TransferMachine`: it sends the requests, streams the bodies into the part file with positional
/// writes (comparing an overlap where the machine asks), syncs and stores checkpoints, sleeps the backoffs, ticks the
/// machine's clock, and verifies and moves the finished file into place. The decisions are all the machine's.
final class DownloadRunner: Sendable {
    let environment: RunnerEnvironment
    let id: DownloadID
    let state: Mutex<State>
    let machine: Mutex<TransferMachine>
    let startedAt: Duration
    /// What does not change while it runs, kept apart from `record` (a copy of the whole record under the lock for
    /// each look at one of them): the URL the user gave and the download's options.
    let source: String
    let options: DownloadOptions

    struct State: Sendable {
        var record: DownloadRecord
        /// The download's folder, held for the whole run: every file operation goes through it.
        var folder: DownloadFolder?
        var part: PartFile?
        /// False from the moment a part file is made or adopted until its identity is in the store: the first body
        /// waits for that commit before it writes, so a part file with bytes always has its row's record of it.
        var isPartIdentityStored = true
        /// Per connection: its task (request, body or wait) and its generation (events of an older one are stale).
        var tasks: [Int: (key: UInt64, task: Task<Void, Never>, writes: Bool)] = [:]
        /// Body tasks of closed connections until they end: a write in progress ends before the part file is
        /// truncated or flushed, so no byte of a closed answer lands after that.
        var closing: [UInt64: Task<Void, Never>] = [:]
        var nextTask: UInt64 = 0
        var generations: [Int: UInt64] = [:]
        var nextGeneration: UInt64 = 0
        /// Answers whose body waits for the machine's decision.
        var responses: [Int: TransportResponse] = [:]
        var checkpoint: Task<Void, Never>?
        /// Ticks every millisecond while the machine measures its connections (`startFastTicksIfWanted`).
        var fastTicker: Task<Void, Never>?
    }

    /// Something that happened, for the loop.
    enum Event: Sendable {
        case responded(Int, UInt64, TransportResponse)
        case failed(Int, UInt64, DownloadError)
        case bodyEnded(Int, UInt64)
        case overlapDiffered(Int, UInt64)
        case waitEnded(Int, UInt64)
        case actions([TransferMachine.Action])
        case tick
        case checkpointed(TransferMachine.Checkpoint)
        case checkpointFailed(DownloadError)
    }

    init(record: DownloadRecord, environment: RunnerEnvironment) {
        self.environment = environment
        id = DownloadID(record.id)
        state = Mutex(State(record: record))
        source = record.url
        options = record.options
        var retry = environment.settings.retryPolicy
        retry.maximumAttemptsWithoutProgress = options.maximumAttemptsWithoutProgress
        machine = Mutex(
            TransferMachine(
                settings: TransferMachine.Settings(
                    maxConnections: options.maxConnectionsPerDownload,
                    minimumSplitSize: options.minimumSplitSize,
                    retryPolicy: retry,
                    idleTimeout: .milliseconds(Int64(options.idleTimeoutSeconds * 1000)),
                    checkpointBytes: environment.settings.checkpointBytes,
                    checkpointInterval: environment.settings.checkpointInterval,
                    progressInterval: environment.settings.progressInterval,
                    rampWindow: environment.settings.connectionRampWindow,
                    verifiesChecksum: options.checksum != nil)))
        startedAt = environment.idleClock.now()
    }

    /// The record as the runner last knew it.
    var record: DownloadRecord { state.withLock { $0.record } }

    var part: PartFile? { state.withLock { $0.part } }

    /// Runs to the end; never throws.
    func run() async -> RunOutcome {
        defer { part?.unlock() }
        do {
            // A row stored before Haul recorded identities has none of its folder.
            let isEarlierRow = record.folderIdentity == nil
            let folder = try DownloadFolder.open(for: record, allowed: environment.allowedFolders)
            state.withLock { state in
                state.folder = folder
                state.record.folderIdentity = folder.folder.identity
            }
            if let result = try await recognizeFinishedFile(in: folder) { return .completed(result) }
            try await openPart(in: folder, isEarlierRow: isEarlierRow)
            return try await loop()
        } catch {
            if error is CancellationError || Task.isCancelled || (error as? DownloadError)?.code == .cancelled {
                // Stopped in the middle of an action: the writes end, and what they wrote is stored exactly.
                return (try? await stop()) ?? .stopped
            }
            cancelAll()
            await awaitConnections()
            await flush(machine.withLock { $0.checkpointMark })
            return .failed((error as? DownloadError) ?? DownloadError(.fileSystem, String(describing: error)))
        }
    }

    // MARK: The loop

    func loop() async throws -> RunOutcome {
        let (events, continuation) = AsyncStream<Event>.makeStream()
        let ticks = environment.metronome.subscribe { continuation.yield(.tick) }
        defer {
            environment.metronome.unsubscribe(ticks)
            state.withLock { $0.fastTicker }?.cancel()
            continuation.finish()
        }
        let partLength = try part?.length()
        let current = record
        var pending = machine.withLock {
            $0.start(
                TransferMachine.Start(
                    partLength: partLength, durableOffset: current.durableOffset, segments: current.segments,
                    isPartVerified: current.isPartVerified, facts: current.remoteFacts),
                now: now())
        }
        var iterator = events.makeAsyncIterator()
        while true {
            for action in pending {
                if let outcome = try await perform(action, continuation: continuation) { return outcome }
            }
            guard let event = await iterator.next() else {
                // Cancelled: a pause, a cancel or a shutdown.
                return try await stop()
            }
            pending = handle(event)
            startFastTicksIfWanted(continuation)
        }
    }

    /// While the machine measures its connections' speeds (`wantsFastTicks`), ticks every millisecond besides the
    /// manager's shared ticks; the task ends by itself when the measuring does.
    func startFastTicksIfWanted(_ continuation: AsyncStream<Event>.Continuation) {
        guard machine.withLock({ $0.wantsFastTicks }) else { return }
        state.withLock { state in
            guard state.fastTicker == nil else { return }
            state.fastTicker = Task { [self] in
                while !Task.isCancelled {
                    do { try await environment.idleClock.sleep(.milliseconds(1)) } catch { return }
                    guard machine.withLock({ $0.wantsFastTicks }) else {
                        self.state.withLock { $0.fastTicker = nil }
                        return
                    }
                    continuation.yield(.tick)
                }
            }
        }
    }

    /// The machine's answer to `event` (stale events of a replaced connection are dropped).
    func handle(_ event: Event) -> [TransferMachine.Action] {
        let time = now()
        switch event {
        case .responded(let id, let generation, let response):
            guard isCurrent(id, generation) else { return [] }
            state.withLock { $0.responses[id] = response }
            return machine.withLock { $0.responseReceived(id, response.head, now: time) }
        case .failed(let id, let generation, let error):
            guard isCurrent(id, generation) else { return [] }
            let jitter = environment.settings.jitter()
            return machine.withLock { $0.connectionFailed(id, error, now: time, jitter: jitter) }
        case .bodyEnded(let id, let generation):
            guard isCurrent(id, generation) else { return [] }
            return machine.withLock { $0.bodyEnded(id, now: time) }
        case .overlapDiffered(let id, let generation):
            guard isCurrent(id, generation) else { return [] }
            return machine.withLock { $0.overlapDiffered(id, now: time) }
        case .waitEnded(let id, let generation):
            guard isCurrent(id, generation) else { return [] }
            return machine.withLock { $0.waitEnded(id, now: time) }
        case .actions(let actions):
            return actions
        case .tick:
            let jitter = environment.settings.jitter()
            return machine.withLock { $0.tick(now: time, jitter: jitter) }
        case .checkpointed(let mark):
            return machine.withLock { $0.checkpointed(mark) }
        case .checkpointFailed(let error):
            return machine.withLock { $0.checkpointFailed(error) }
        }
    }

    func now() -> Duration { environment.idleClock.now() }

    func isCurrent(_ id: Int, _ generation: UInt64) -> Bool {
        state.withLock { $0.generations[id] == generation }
    }

    /// A new generation for connection `id`: what its older tasks still report is stale from now on.
    func renew(_ id: Int) -> UInt64 {
        state.withLock { state in
            state.nextGeneration += 1
            state.generations[id] = state.nextGeneration
            return state.nextGeneration
        }
    }

    /// Performs one action; returns an outcome when the run ends with it.
    func perform(_ action: TransferMachine.Action, continuation: AsyncStream<Event>.Continuation)
        async throws -> RunOutcome?
    {
        switch action {
        case .send(let id, let request):
            cancel(id)
            let generation = renew(id)
            try Task.checkCancellation()
            start(id, generation) { [self] in
                do {
                    let response = try await environment.transport.send(
                        TransportRequest(
                            url: try url(), headers: headers(for: request), tls: options.tls,
                            network: options.network))
                    continuation.yield(.responded(id, generation, response))
                } catch {
                    continuation.yield(.failed(id, generation, connectionError(error)))
                }
            }
        case .stream(let id, let body):
            guard let response = state.withLock({ $0.responses.removeValue(forKey: id) }) else { return nil }
            if part == nil { try await resolveDestination(response: response) }
            // One write for what the answer told: the name, the final URL, the remote file's facts. A name just
            // chosen, and the identity of a part file just made, are in the store before any byte is written: after
            // a crash the part file is found as this download's own, not left behind while another name is chosen.
            // The part file's name is made durable first (a sync of its folder, shared with the downloads making
            // theirs at the same moment), then the identity's commit (durable, as every commit waited for): after a
            // power cut, no checkpoint counts bytes of a part file whose name the disk lost.
            let finalURL = response.finalURL.absoluteString
            let (unsaved, folder) = state.withLock { (!$0.isPartIdentityStored, $0.folder) }
            if unsaved, let folder { try await Blocking.run { folder.sync() } }
            try await saveTransfer(waiting: unsaved) { $0.finalURL = finalURL }
            if unsaved { state.withLock { $0.isPartIdentityStored = true } }
            let generation = state.withLock { $0.generations[id] ?? 0 }
            start(id, generation, writes: true) { [self] in
                await stream(id, generation, response: response, body: body, continuation: continuation)
            }
        case .discard(let id), .close(let id):
            cancel(id)
            _ = state.withLock { $0.responses.removeValue(forKey: id) }
            _ = renew(id)
        case .truncate(let length, let forgetting):
            try await truncate(to: length, forgetting: forgetting)
        case .checkpoint(let mark):
            startCheckpoint(mark, continuation: continuation)
        case .wait(let id, let delay):
            cancel(id)
            let generation = renew(id)
            start(id, generation) { [environment] in
                do { try await environment.clock.sleep(delay) } catch { return }
                continuation.yield(.waitEnded(id, generation))
            }
        case .report(let report):
            try await tell(report)
        case .progress(let progress):
            environment.events.emit(
                .progress(
                    DownloadProgress(
                        id: id, receivedBytes: progress.receivedBytes, totalBytes: progress.totalBytes,
                        bytesPerSecond: progress.bytesPerSecond, secondsRemaining: progress.secondsRemaining,
                        connections: progress.connections)))
        case .finalize(let total):
            await awaitConnections()
            try await tellManager(.finishing)
            let outcome: TransferMachine.FinalizeOutcome
            let result: DownloadResult
            do { result = try await finalize(total: total) } catch let error as DownloadError
                where error.code == .checksumMismatch
            {
                outcome = .checksumMismatch(error)
                let next = machine.withLock { $0.finalized(outcome, now: now()) }
                try await tellManager(.transferring)
                for action in next {
                    if let ended = try await perform(action, continuation: continuation) { return ended }
                }
                return nil
            }
            _ = machine.withLock { $0.finalized(.completed, now: now()) }
            return .completed(result)
        case .fail(let error):
            cancelAll()
            await awaitConnections()
            await flush(machine.withLock { $0.checkpointMark })
            return .failed(error)
        case .failDiscardingPart(let error):
            cancelAll()
            await awaitConnections()
            // One unlink of Haul's own file.
            if let part { state.withLock { $0.folder }?.delete(part.name, identity: part.identity) }
            return .failed(error)
        case .stopped:
            await awaitConnections()
            // The machine's mark now, not the stop's: it counts the chunks granted before the stop and written after.
            await flush(machine.withLock { $0.checkpointMark })
            return .stopped
        }
        return nil
    }

    /// Runs `work` as the task of connection `id` (generation `generation`); `writes` for a body's task.
    func start(
        _ id: Int, _ generation: UInt64, writes: Bool = false, _ work: @escaping @Sendable () async -> Void
    ) {
        let key = state.withLock { state in
            state.nextTask += 1
            return state.nextTask
        }
        let task = Task { [self] in
            await work()
            if writes { _ = state.withLock { $0.closing.removeValue(forKey: key) } }
        }
        state.withLock { $0.tasks[id] = (key, task, writes) }
    }

    /// Cancels connection `id`'s task; it is awaited before the next truncate or flush.
    func cancel(_ id: Int) {
        let task = state.withLock { state -> Task<Void, Never>? in
            guard let (key, task, writes) = state.tasks.removeValue(forKey: id) else { return nil }
            if writes { state.closing[key] = task }
            return task
        }
        task?.cancel()
    }

    func cancelAll() {
        let tasks = state.withLock { state in
            defer { state.tasks.removeAll() }
            return state.tasks.values.map(\.task)
        }
        for task in tasks { task.cancel() }
        state.withLock { $0.responses.removeAll() }
    }

    /// Waits until the tasks of closed connections ended (a cancelled body stream ends at its next chunk).
    func awaitClosed() async {
        let tasks = state.withLock { state in
            defer { state.closing.removeAll() }
            return Array(state.closing.values)
        }
        for task in tasks { await task.value }
    }

    /// Waits until no connection writes any more (their tasks ended), and for the checkpoint in flight.
    func awaitConnections() async {
        let tasks = state.withLock { state in
            defer {
                state.tasks.removeAll()
                state.closing.removeAll()
            }
            return state.tasks.values.map(\.task) + Array(state.closing.values)
                + (state.checkpoint.map { [$0] } ?? [])
        }
        for task in tasks {
            task.cancel()
            await task.value
        }
    }

    /// After a stop or a failure: every write of this run has ended, so after a sync the bytes written are
    /// durable, and the store gets them exactly.
    func flush(_ mark: TransferMachine.Checkpoint) async {
        guard let part, state.withLock({ $0.record.isPartVerified }) else { return }
        guard (try? await Blocking.run({ try part.syncData() })) != nil else { return }
        if let (_, intact) = await Self.tampering(of: part, with: mark) {
            try? await storeTampered(intact)
        } else {
            try? await store(mark)
        }
    }

    /// What another program did to the part file behind Haul's back, checked after a sync against the bytes `mark`
    /// counts: deleted (or replaced), or cut short. Nil when every byte is there. Returns the error to stop with and
    /// the mark of what is left: nothing of a deleted file, each range up to its first missing byte of a cut one.
    static func tampering(of part: PartFile, with mark: TransferMachine.Checkpoint) async -> (
        DownloadError, intact: TransferMachine.Checkpoint?
    )? {
        let found = try? await Blocking.run { checkTampering(of: part, with: mark) }
        return found ?? nil
    }

    /// `tampering(of:with:)` on the calling thread, for work already off the cooperative pool.
    static func checkTampering(of part: PartFile, with mark: TransferMachine.Checkpoint) -> (
        DownloadError, intact: TransferMachine.Checkpoint?
    )? {
        guard part.isStillInFolder() else {
            let what =
                part.folder.isDeleted
                ? "the folder \(part.folder.path) was deleted"
                : "the part file \(part.path) was deleted or replaced by another program"
            let message = "\(what) while downloading; its bytes are gone (run the command again to start over)"
            return (DownloadError(.fileSystem, message), nil)
        }
        let ranges: [(start: Int64, end: Int64)] =
            switch mark {
            case .offset(let offset): [(0, offset)]
            case .segments(let segments, _): segments.map { ($0.start, $0.offset) }
            }
        let cuts = ranges.map { part.firstMissingByte(from: $0.start, to: $0.end) }
        guard let first = cuts.compactMap({ $0 }).min() else { return nil }
        let intact: TransferMachine.Checkpoint
        switch mark {
        case .offset(let offset): intact = .offset(min(offset, cuts[0] ?? offset))
        case .segments(let segments, _):
            let kept = zip(segments, cuts).map { segment, cut in
                var segment = segment
                if let cut { segment.offset = max(segment.start, min(segment.offset, cut)) }
                return segment
            }
            intact = .segments(kept, bytes: kept.reduce(0) { $0 + $1.offset - $1.start })
        }
        let error = DownloadError(
            .fileSystem,
            "the part file \(part.path) was cut short by another program while downloading (bytes from about "
                + "\(first) on are missing); run the command again to resume from what is left")
        return (error, intact)
    }

    /// Stores what is left after another program changed the part file: the intact bytes, or, for a file that is
    /// gone, nothing (and whatever is at its path later is compared before it is trusted).
    func storeTampered(_ intact: TransferMachine.Checkpoint?) async throws(DownloadError) {
        guard let intact else {
            try await saveTransfer(waiting: true) { record in
                record.durableOffset = 0
                record.segments = nil
                record.isPartVerified = false
            }
            return
        }
        try await store(intact)
    }

    func stop() async throws -> RunOutcome {
        let actions = machine.withLock { $0.stop() }
        for action in actions {
            switch action {
            case .close(let id): cancel(id)
            case .stopped:
                await awaitConnections()
                // The machine's mark now, not the stop's: it counts the chunks granted before the stop and written
                // after.
                await flush(machine.withLock { $0.checkpointMark })
            default: break
            }
        }
        return .stopped
    }
}
