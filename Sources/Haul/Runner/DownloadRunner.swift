import Foundation
import HaulCore
import Logging
import NIOCore

/// Runs one download from the manager's record to a completed file, a failure, or a clean stop, by performing the
/// actions of its `TransferMachine`: it sends the requests, writes the bodies into the part file with positional
/// writes (comparing an overlap where the machine asks), syncs and stores checkpoints, sleeps the backoffs, ticks the
/// machine's clock, and verifies and moves the finished file into place. The decisions are all the machine's.
///
/// One serial context drives the machine: the task that runs the runner. Connections are tasks that only report what
/// happened to them as events (an answer, a chunk, a break, the end of a body) and wait for the loop's word where it
/// decides (read on? take a body that may not be a file's?); the loop hands every event to the machine, performs its
/// actions, and writes every byte itself. So the machine, the part file and the runner's state are touched by that one
/// task, no write can be in flight when the loop truncates, syncs or moves the file, and every run ends through
/// `end(_:)`.
final class DownloadRunner {
    let environment: RunnerEnvironment
    let id: DownloadID
    let startedAt: Duration
    /// What does not change while it runs: the URL the user gave and the download's options.
    let source: String
    let options: DownloadOptions
    /// What the connections' tasks need (they never touch the runner).
    let connector: Connector

    /// The download's names and identities. Its transfer fields are the stored row's, the machine's start; from
    /// then on the machine has the transfer's state.
    var record: DownloadRecord
    var machine: TransferMachine
    /// The download's folder, held for the whole run: every file operation goes through it.
    var folder: DownloadFolder?
    var part: PartFile?
    /// The part file is a file the user handed over with `-c` at this start (`DownloadFolder.handOver`), and, when
    /// it was moved from the download's own name to the part file's then, that name: where a failure that wrote
    /// nothing into it gives it back.
    var handedOver: (isHandedOver: Bool, movedFrom: String?) = (false, nil)
    /// False from the moment a part file is made or adopted until its identity is in the store: the first body
    /// waits for that commit before it writes, so a part file with bytes always has its row's record of it.
    var isPartIdentityStored = true
    /// False from the moment a part file is made until a sync of its folder: no mark counting bytes of it may be
    /// stored before its name is on the disk (after a power cut the bytes would be counted in a file that is gone).
    var isPartNameDurable = true
    /// The file's length the store holds for certain: the row's at the start, or that of a save waited for.
    var storedTotal: Int64?
    /// Whether the store counts the part file's bytes as Haul's (`isPartVerified`) for certain, likewise: a file the
    /// user handed over is not, until a mark after its comparison.
    var isStoredVerified: Bool
    /// The connections' tasks, by the machine's connection id.
    var connections: [Int: ConnectionTask] = [:]
    var nextGeneration: UInt64 = 0
    /// The checkpoint in flight: its sync and store run off the loop.
    var checkpoint: Task<Void, Never>?
    /// The Metalink the URL answered, once read.
    var metalink: Metalink?
    /// The HLS playlist the URL answered, once read, and the URL that answered it (`DownloadRunner+Stream`).
    var playlist: (text: [UInt8], url: URL)?
    /// The checks of pieces, one after the other, off the loop.
    var pieceChecks: Task<Void, Never>?
    /// Ticks every millisecond while the machine measures its connections (`wantsFastTicks`).
    var fastTicker: Task<Void, Never>?
    /// Tasks of closed connections, awaited when the run ends.
    var retired: [Task<Void, Never>] = []
    var result: DownloadResult?
    /// What the connections and helper tasks tell the loop.
    let inbox = RunnerInbox()

    /// One connection's task and what it waits for. A class: the loop changes its fields in place through the
    /// dictionary (a struct's every change went through the dictionary's modify accessor, which allocated).
    final class ConnectionTask {
        /// Events of an older generation of the same connection are stale.
        var generation: UInt64
        var task: Task<Void, Never>?
        /// An answer whose body waits for the machine's decision (`Event.responded`).
        var answer: Answer?
        /// The flow control of the body it reads; stopped once the loop reads no further of it.
        var credit: BodyCredit?
        var writeback: WritebackStarter?
        /// The server it talks to (`RangeRequest.source`).
        var source = 0

        init(generation: UInt64) { self.generation = generation }
    }

    /// An answer's head, what its body is, and how its task reads the body: it waits for `take` (a credit to read
    /// the body with, or nil to drop it), or it already reads within `credit` (`Connector.readsAtOnce`).
    struct Answer: Sendable {
        let response: TransportResponse
        /// Judged once, by the connection's task: whether it reads on at once and whether the loop reads the body
        /// itself (a Metalink, a playlist) are the same judgement, so that a body never has two readers.
        let body: AnswerBody
        let take: CheckedContinuation<BodyCredit?, Never>?
        let credit: BodyCredit?

        /// The body is not taken: a waiting task hears so, a reading one stops.
        func decline() {
            take?.resume(returning: nil)
            credit?.stop()
        }
    }

    /// Something that happened, for the loop. The continuations are the loop's word to the task that waits.
    enum Event: Sendable {
        /// An answer's head arrived.
        case responded(Int, UInt64, Answer)
        /// A request failed, or a body failed with an error of its own kind.
        case failed(Int, UInt64, DownloadError)
        /// A chunk of a body; its task reads on within its credit's window.
        case chunk(Int, UInt64, ByteBuffer, credit: BodyCredit)
        /// A body broke in the network.
        case bodyBroke(Int, UInt64, DownloadError)
        case bodyEnded(Int, UInt64)
        /// A connection waits for a rate limit: busy, not idle.
        case throttled(Int, UInt64)
        case waitEnded(Int, UInt64)
        case tick
        case fastTick
        case checkpointed(TransferMachine.Checkpoint)
        case checkpointFailed(DownloadError)
        /// Piece `index`, checked for the machine's ticket: whether it matched its hash.
        case pieceChecked(Int, UInt64, Bool)

        /// Answers a task that waits for the loop's word with "no": the event is dropped.
        func decline() {
            switch self {
            case .responded(_, _, let answer): answer.decline()
            case .chunk(_, _, let chunk, let credit): credit.release(chunk.readableBytes, stop: true)
            default: break
            }
        }
    }

    init(record: DownloadRecord, environment: RunnerEnvironment) {
        self.environment = environment
        self.record = record
        id = DownloadID(record.id)
        source = record.url
        options = record.options
        var retry = environment.settings.retryPolicy
        retry.maximumAttemptsWithoutProgress = options.maximumAttemptsWithoutProgress
        // With mirrors, each server opens up to the download's connections, and the download up to the limit.
        let servers = 1 + options.mirrors.count
        machine = TransferMachine(
            settings: TransferMachine.Settings(
                maxConnections: min(
                    options.maxConnectionsPerDownload * servers,
                    max(options.maxConnectionsPerDownload, DownloadOptions.connectionLimit)),
                minimumSplitSize: options.minimumSplitSize,
                retryPolicy: retry,
                idleTimeout: .milliseconds(Int64(options.idleTimeoutSeconds * 1000)),
                checkpointBytes: environment.settings.checkpointBytes,
                checkpointInterval: environment.settings.checkpointInterval,
                progressInterval: environment.settings.progressInterval,
                rampWindow: environment.settings.connectionRampWindow,
                verifiesChecksum: options.checksum != nil, sources: servers,
                connectionsPerSource: options.maxConnectionsPerDownload, pieceLength: options.pieces?.length))
        storedTotal = record.totalLength
        isStoredVerified = record.isPartVerified
        startedAt = environment.idleClock.now()
        connector = Connector(environment: environment, source: record.url, options: record.options)
    }

    /// Runs `record`'s download to its end; never throws. Returns how it ended, and the download's names and
    /// transfer state as the run left them.
    static func run(record: DownloadRecord, environment: RunnerEnvironment) async -> (RunOutcome, TransferReport) {
        let runner = DownloadRunner(record: record, environment: environment)
        let outcome = await runner.run()
        return (outcome, runner.transferReport(mark: nil))
    }

    func run() async -> RunOutcome {
        let ending: TransferMachine.Ending
        do {
            ending = try await prepareAndLoop()
        } catch {
            let actions: [TransferMachine.Action]
            if Self.isCancellation(error) {
                // Stopped in the middle of an action: the writes end, and what they wrote is stored exactly.
                actions = machine.stop()
            } else {
                actions = machine.actionFailed(
                    (error as? DownloadError) ?? DownloadError(.fileSystem, String(describing: error)))
            }
            ending =
                actions.lazy.compactMap { if case .end(let ending) = $0 { ending } else { nil } }.first
                ?? .stopped(.leave)
        }
        let outcome = await end(ending)
        if let metalink, case .stopped = outcome { return .metalink(metalink) }
        if let playlist, case .stopped = outcome { return await runStream(playlist.text, url: playlist.url) }
        return outcome
    }

    static func isCancellation(_ error: any Error) -> Bool {
        error is CancellationError || Task.isCancelled || (error as? DownloadError)?.code == .cancelled
    }

    func prepareAndLoop() async throws -> TransferMachine.Ending {
        // A row stored before Haul recorded identities has none of its folder.
        let isEarlierRow = record.folderIdentity == nil
        let folder = try DownloadFolder.open(for: record, allowed: environment.allowedFolders)
        self.folder = folder
        record.folderIdentity = folder.folder.identity
        if let result = try await recognizeFinishedFile(in: folder) {
            self.result = result
            return .completed
        }
        try await openPart(in: folder, isEarlierRow: isEarlierRow)
        return try await loop()
    }

    // MARK: The loop

    func loop() async throws -> TransferMachine.Ending {
        let ticks = environment.metronome.subscribe { [inbox] in inbox.yield(.tick) }
        defer { environment.metronome.unsubscribe(ticks) }
        var pending = machine.start(
            TransferMachine.Start(
                partLength: try part?.length(), durableOffset: record.durableOffset, segments: record.segments,
                isPartVerified: record.isPartVerified, isHandedOver: handedOver.isHandedOver,
                holdsHandedOver: record.handOver != nil, facts: record.remoteFacts,
                linkReplaced: record.options.linkReplaced),
            now: now())
        while true {
            while !pending.isEmpty {
                let action = pending.removeFirst()
                if case .end(let ending) = action { return ending }
                pending = try await perform(action) + pending
            }
            guard let event = await inbox.next() else {
                // Cancelled: a pause, a cancel or a shutdown.
                throw CancellationError()
            }
            pending = handle(event)
            if machine.wantsFastTicks, fastTicker == nil { startFastTicks() }
        }
    }

    /// While the machine measures its connections' speeds, ticks every millisecond besides the manager's shared
    /// ticks, until the loop sees the measuring is over.
    func startFastTicks() {
        fastTicker = Task { [environment, inbox] in
            while !Task.isCancelled {
                do { try await environment.idleClock.sleep(.milliseconds(1)) } catch { return }
                if !inbox.yield(.fastTick) { return }
            }
        }
    }

    /// The machine's answer to `event` (stale events of a replaced connection are dropped, their tasks told no).
    func handle(_ event: Event) -> [TransferMachine.Action] {
        let time = now()
        switch event {
        case .responded(let id, let generation, let answer):
            guard isCurrent(id, generation) else {
                answer.decline()
                return []
            }
            connections[id]?.answer = answer
            return machine.responseReceived(id, answer.response.head, now: time)
        case .failed(let id, let generation, let error):
            guard isReading(id, generation) else { return [] }
            return machine.connectionFailed(id, error, now: time, jitter: environment.settings.jitter())
        case .chunk(let id, let generation, let chunk, let credit):
            // Chunks read ahead after the loop stopped the reading, or of a replaced connection, are dropped.
            guard isCurrent(id, generation), !credit.isStopped else {
                credit.release(chunk.readableBytes, stop: true)
                return []
            }
            let (readOn, actions) = take(chunk, on: id, now: time)
            credit.release(chunk.readableBytes, stop: !readOn)
            return actions
        case .bodyBroke(let id, let generation, let error):
            guard isReading(id, generation) else { return [] }
            return machine.bodyBroke(id, error, now: time, jitter: environment.settings.jitter())
        case .bodyEnded(let id, let generation):
            guard isReading(id, generation) else { return [] }
            return machine.bodyEnded(id, now: time)
        case .throttled(let id, let generation):
            if isCurrent(id, generation) { machine.touch(id) }
            return []
        case .waitEnded(let id, let generation):
            guard isCurrent(id, generation) else { return [] }
            return machine.waitEnded(id, now: time)
        case .tick:
            return machine.tick(now: time, jitter: environment.settings.jitter())
        case .fastTick:
            guard machine.wantsFastTicks else {
                fastTicker?.cancel()
                fastTicker = nil
                return []
            }
            return machine.tick(now: time, jitter: environment.settings.jitter())
        case .checkpointed(let mark):
            checkpoint = nil
            // Its sync took in the part file's folder when the name was new.
            isPartNameDurable = true
            return machine.checkpointed(mark, now: time)
        case .checkpointFailed(let error):
            checkpoint = nil
            return machine.checkpointFailed(error)
        case .pieceChecked(let index, let ticket, let matches):
            return machine.pieceChecked(index, ticket: ticket, matches: matches, now: time)
        }
    }

    /// Compares and writes a chunk of connection `id`'s body as the machine grants it; returns whether its task
    /// reads on, and what the machine does next.
    func take(_ chunk: ByteBuffer, on id: Int, now time: Duration) -> (Bool, [TransferMachine.Action]) {
        let count = chunk.readableBytes
        let grant = machine.claim(id, count: count)
        var index = chunk.readerIndex
        do {
            guard let part else { throw DownloadError(.fileSystem, "no part file for \(source)") }
            if grant.compare > 0 {
                let held = try part.read(count: grant.compare, at: grant.offset)
                guard let received = chunk.getBytes(at: index, length: grant.compare), held == received else {
                    return (false, machine.overlapDiffered(id, now: time))
                }
                index += grant.compare
            }
            if grant.write > 0, let slice = chunk.getSlice(at: index, length: grant.write) {
                let at = grant.offset + Int64(grant.compare)
                try part.write(slice, at: at)
                connections[id]?.writeback?.wrote(upTo: at + Int64(grant.write))
            }
        } catch {
            let failure = (error as? DownloadError) ?? DownloadError(.fileSystem, "\(error)")
            return (false, machine.connectionFailed(id, failure, now: time))
        }
        var actions = machine.wrote(id, now: time)
        if grant.overrun {
            let error = DownloadError(
                .bodyTooLong, "server sent more than it announced; not saving the excess", isRetryable: true)
            actions += machine.connectionFailed(id, error, now: time, jitter: environment.settings.jitter())
            return (false, actions)
        }
        if grant.stop { return (false, actions + machine.bodyEnded(id, now: time)) }
        return (true, actions)
    }

    func now() -> Duration { environment.idleClock.now() }

    func isCurrent(_ id: Int, _ generation: UInt64) -> Bool { connections[id]?.generation == generation }

    /// Whether what connection `id` (generation `generation`) reports still counts: it is current, and the loop did
    /// not stop reading its body (a task reading ahead may report the end of a body the machine is done with).
    func isReading(_ id: Int, _ generation: UInt64) -> Bool {
        isCurrent(id, generation) && connections[id]?.credit?.isStopped != true
    }
}
