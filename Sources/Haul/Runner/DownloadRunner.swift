import Foundation
import HaulCore
import Logging
import NIOCore

/// Everything a runner needs from its manager. A class: the runner, its connections and its helper tasks each hold
/// it, and each would copy a struct of this size, retaining every field.
final class RunnerEnvironment: Sendable {
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
    /// The connections to each host across all downloads: each connection holds a slot while it is open.
    let hostConnections: HostConnections
    /// Tells the manager what the runner learned or did, in order. The manager is the only writer of a download's
    /// record and its row in the store. Progress goes to `events` directly. The manager queues what it stores; the commit it returns says when
    /// it is in the store.
    let report: @Sendable (RunnerReport) async throws(DownloadError) -> DownloadStore.Commit?
    /// Waits until a commit is in the store.
    let committed: @Sendable (DownloadStore.Commit) async throws(DownloadError) -> Void
    /// The folders confined downloads are opened beneath.
    let allowedFolders: AllowedFolders
    /// The rules that sort a folder download into a folder beneath its own when it takes its name.
    let sorting: SortRules
    /// The lease a worker of a fleet runs this download under: its part file is the lease's own
    /// (`DownloadFolder.partName`). Nil outside a fleet.
    let lease: Int64?
    /// Whether the lease follows earlier ones of the download, whose part files it deletes when it finishes (a first
    /// lease has none to look for).
    let followsEarlierLeases: Bool

    init(
        transport: any HTTPTransport, clock: EngineClock, idleClock: EngineClock, metronome: Metronome,
        events: EventHub, settings: DownloadManager.Configuration.Engine, logger: Logger, limiters: [RateLimiter],
        hostConnections: HostConnections,
        report: @escaping @Sendable (RunnerReport) async throws(DownloadError) -> DownloadStore.Commit?,
        committed: @escaping @Sendable (DownloadStore.Commit) async throws(DownloadError) -> Void,
        allowedFolders: AllowedFolders, sorting: SortRules = SortRules(), lease: Int64? = nil,
        followsEarlierLeases: Bool = false
    ) {
        self.transport = transport
        self.clock = clock
        self.idleClock = idleClock
        self.metronome = metronome
        self.events = events
        self.settings = settings
        self.logger = logger
        self.limiters = limiters
        self.hostConnections = hostConnections
        self.report = report
        self.committed = committed
        self.allowedFolders = allowedFolders
        self.sorting = sorting
        self.lease = lease
        self.followsEarlierLeases = followsEarlierLeases
    }
}

/// What a runner tells its manager while it runs.
enum RunnerReport: Sendable {
    /// What the transfer learned or did to its part file (see `TransferReport`). With `waiting`, the runner waits
    /// for the commit (and hears of its failure). With `claiming`, the report's destination is a name the download
    /// just chose: the manager refuses it (`destinationExists`, nothing stored) when another of its downloads claims
    /// it, so the check and the claim are one step.
    case transfer(TransferReport, waiting: Bool, claiming: Bool = false)
    /// A checkpoint: the part file durably holds the bytes `mark` counts. The runner waits for its commit.
    case checkpoint(TransferMachine.Checkpoint)
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

/// What the runner reports of a download's transfer: its names and identities as the runner has them, and the
/// transfer's state as its machine has it. The machine holds the one copy of that state; this is what of it goes to
/// the store.
struct TransferReport: Sendable {
    var destination: String?
    var finalURL: String?
    var partIdentity: FileIdentity?
    var folderIdentity: FileIdentity?
    var facts: RemoteFacts?
    var isPartVerified: Bool
    /// The bytes the part file durably holds; nil leaves the stored mark as it is (a checkpoint may be on its way).
    var mark: TransferMachine.Checkpoint?
}

/// How a run ended.
enum RunOutcome: Sendable {
    case completed(DownloadResult)
    case failed(DownloadError)
    /// Stopped by cancellation (pause, cancel, shutdown) after flushing the exact offset.
    case stopped
    /// The URL answered this Metalink: nothing was written, and the download is to follow it.
    case metalink(Metalink)
}

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
    /// False from the moment a part file is made or adopted until its identity is in the store: the first body
    /// waits for that commit before it writes, so a part file with bytes always has its row's record of it.
    var isPartIdentityStored = true
    /// False from the moment a part file is made until a sync of its folder: no mark counting bytes of it may be
    /// stored before its name is on the disk (after a power cut the bytes would be counted in a file that is gone).
    var isPartNameDurable = true
    /// The file's length the store holds for certain: the row's at the start, or that of a save waited for.
    var storedTotal: Int64?
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
                isPartVerified: record.isPartVerified, facts: record.remoteFacts,
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

    /// Performs one action; returns the machine's next actions when the action itself had an answer for it.
    func perform(_ action: TransferMachine.Action) async throws -> [TransferMachine.Action] {
        switch action {
        case .send(let id, let request):
            try Task.checkCancellation()
            let generation = renew(id)
            connections[id]?.source = request.source
            connections[id]?.task = Task { [connector, inbox] in
                await connector.connect(id, generation, request: request, events: inbox)
            }
        case .stream(let id, let body):
            guard let answer = connections[id]?.answer else { return [] }
            connections[id]?.answer = nil
            let kind = answer.body
            if part == nil, kind == .metalink, !options.followedMetalink {
                // The URL answers a Metalink: read it (it is small), and the run ends for the download to follow it.
                defer { answer.decline() }
                metalink = try await readMetalink(answer.response)
                return machine.stop()
            }
            if kind == .playlist || kind == .manifest {
                // The URL answers an HLS playlist or a DASH manifest: read it, and the run downloads its stream instead.
                defer { answer.decline() }
                let text = try await Self.readSmall(
                    answer.response, largest: Self.largestPlaylist, what: "the playlist of \(source)")
                playlist = (text, answer.response.finalURL)
                return machine.stop()
            }
            do {
                try await prepareBody(answer.response, source: connections[id]?.source ?? 0)
            } catch {
                answer.decline()
                throw error
            }
            if let part { connections[id]?.writeback = WritebackStarter(part: part, from: body.start) }
            if let credit = answer.credit {
                // Its task reads already; its chunks wait in the inbox behind the answer.
                connections[id]?.credit = credit
            } else {
                let credit = BodyCredit()
                connections[id]?.credit = credit
                answer.take?.resume(returning: credit)
            }
        case .discard(let id), .close(let id):
            closeConnection(id)
        case .truncate(let length):
            try await truncate(to: length)
        case .checkpoint(let mark):
            startCheckpoint(mark)
        case .wait(let id, let delay):
            let generation = renew(id)
            connections[id]?.task = Task { [environment, inbox] in
                do { try await environment.clock.sleep(delay) } catch { return }
                inbox.yield(.waitEnded(id, generation))
            }
        case .report(let report):
            try await tell(report)
        case .progress(let progress):
            environment.events.emit(
                .progress(
                    DownloadProgress(
                        id: id, receivedBytes: progress.receivedBytes, totalBytes: progress.totalBytes,
                        bytesPerSecond: progress.bytesPerSecond, secondsRemaining: progress.secondsRemaining,
                        connections: progress.connections, mirrors: progress.mirrors.isEmpty ? nil : progress.mirrors)))
        case .finalize(let total):
            // A checkpoint in flight ends first: its mark must not land after the finished length.
            await checkpoint?.value
            try await tellManager(.finishing)
            do {
                result = try await finalize(total: total)
                return machine.finalized(.completed, now: now())
            } catch let error as DownloadError where error.code == .checksumMismatch {
                try await tellManager(.transferring)
                return machine.finalized(.checksumMismatch(error), now: now())
            }
        case .checkPiece(let index, let range, let ticket):
            checkPiece(index, range: range, ticket: ticket)
        case .end:
            break
        }
        return []
    }

    /// Hashes piece `index` of the part file after the checks before it, and tells the loop whether it matched.
    func checkPiece(_ index: Int, range: Range<Int64>, ticket: UInt64) {
        guard let part, let pieces = options.pieces else { return }
        let previous = pieceChecks
        pieceChecks = Task { [inbox] in
            await previous?.value
            let expected = index < pieces.hashes.count ? pieces.hashes[index].lowercased() : ""
            let digest = try? await Blocking.run {
                try part.hexDigests(algorithms: [pieces.algorithm], range: range)[pieces.algorithm]
            }
            inbox.yield(.pieceChecked(index, ticket, digest?.lowercased() == expected))
        }
    }

    /// Before the first byte of a body: the name a folder download takes, then one write for what the answer
    /// told (the name, the final URL, the remote file's facts).
    func prepareBody(_ response: TransportResponse, source: Int = 0) async throws {
        // The final URL is the download's own URL's, never a mirror's.
        if source == 0 { record.finalURL = response.finalURL.absoluteString }
        // A folder download's name is chosen now, and stored with all of this as it is claimed (`claimName`).
        if part == nil { return try await resolveDestination(response: response) }
        // The identity of a part file just made is in the store before any byte is written: after a crash the part
        // file is found as this download's own, not left behind while another name is chosen. The part file's name
        // need not be on the disk yet: nothing stored counts bytes of it until a sync of its folder
        // (`isPartNameDurable`).
        let unsaved = !isPartIdentityStored
        try await save(transferReport(mark: nil), waiting: unsaved)
        isPartIdentityStored = true
    }

    /// A new generation of connection `id`, replacing the old one (whose task is cancelled, its events stale).
    func renew(_ id: Int) -> UInt64 {
        closeConnection(id)
        nextGeneration += 1
        connections[id] = ConnectionTask(generation: nextGeneration)
        return nextGeneration
    }

    /// Stops connection `id`: its task is cancelled, an answer waiting for a decision is declined, and what it
    /// still reports is stale.
    func closeConnection(_ id: Int) {
        guard let connection = connections.removeValue(forKey: id) else { return }
        connection.answer?.decline()
        connection.credit?.stop()
        if let task = connection.task {
            task.cancel()
            retired.append(task)
        }
    }
}
