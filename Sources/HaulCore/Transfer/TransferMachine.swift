/// The loop of one download as a value: what to request, what to do with each answer and each byte, when to
/// checkpoint, retry, wait, split over more connections, restart or finalise. Events go in (`start`,
/// `responseReceived`, `claim` and `wrote` for the bytes of a body, `bodyEnded`, `connectionFailed`, `waitEnded`,
/// `checkpointed`, `pieceChecked`, `tick`, `finalized`, `stop`); each returns the `Action`s for the runner to perform,
/// in order. One file may come from several servers (`TransferMachine+Mirrors`) and be checked piece by piece
/// (`TransferMachine+Pieces`).
///
/// It never sleeps, reads a clock or touches a file: times come in with the events, and the runner does the I/O. One
/// connection and several are the same loop: with one, the part file grows from its start; with several, a
/// `SegmentMap` hands out the ranges. The rules are DESIGN.md's resume table (through `ResumePlanner`,
/// `ResponseValidator`, `SegmentValidator`), with three that are the machine's own:
///
/// - **No wasted byte.** Every byte of a body that was written counts, and after a connection breaks, the next request
///   starts exactly after it (within a run; after a crash, at the last checkpoint). A break after bytes arrived is
///   retried at once; only attempts that brought nothing back off.
/// - **A restart is not a failure.** A changed file, a server that stops honouring ranges, a bad segment answer, an
///   overlap that differs or a checksum mismatch after a resumed download start the download again at once: no retry
///   is spent, no backoff waited, and a 200 that carries the whole new file is kept as its body. The runner tells it
///   as `restarted(reason)`. Versions are never mixed: the part file is emptied first.
/// - **Waiting for the network is not a failure either.** A server that answered before and cannot be reached at all
///   makes the download wait, probing with backoff, until it answers again.
public struct TransferMachine: Sendable {
    /// A connection of this download, as the machine numbers them.
    public typealias ConnectionID = Int

    // MARK: State

    struct Connection: Sendable, Equatable {
        enum Phase: Sendable, Equatable {
            /// A request is out; waiting for its answer's head.
            case requesting
            /// Its answer's body is being taken.
            case streaming
            /// Waiting before sending again.
            case waiting
        }

        var phase: Phase
        /// The last request sent.
        var request: RangeRequest
        /// The segment it fetches (several connections).
        var segment: Int?
        /// Where its answer's body began, and where the next byte of it belongs.
        var bodyStart: Int64 = 0
        var position: Int64 = 0
        /// Bytes before this are compared, not written.
        var compareUntil: Int64 = 0
        /// One past the last byte its answer may write.
        var end: Int64?
        /// Attempts in a row that brought no byte.
        var failures = 0
        /// Bytes were written since the last request.
        var progressed = false
        /// Bytes arrived since the last tick; when it was last quiet.
        var wasActive = false
        var quietSince: Duration
        /// Asked to close once its segment or its answer ends, taking no new work (the ramp dropping a connection).
        var retiring = false
        /// The first connection of a segmented transfer carries the probe's answer.
        var isFlowing = false
        /// The server it talks to (`RangeRequest.source`).
        var source = 0
        /// It fetches the sample range of a mirror not trusted yet: its bytes are compared, never written.
        var isSample = false
        /// It compares the held bytes at the end of the file (`TransferMachine+Checks`): nothing is written.
        var checksTail = false
    }

    enum Mode: Sendable, Equatable {
        case single
        case segmented(SegmentMap)
    }

    enum Phase: Sendable, Equatable {
        case idle, transferring, finalizing, stopping, done
    }

    /// The settings.
    public let settings: Settings
    var mode: Mode = .single
    var facts: RemoteFacts?
    /// Whether the part file's bytes are trusted as this download's (false: bytes handed over, compared first).
    public internal(set) var isPartVerified = true
    /// The length of the file the user handed over (`Start.isHandedOver`) while the part file still holds exactly
    /// that: no byte of this run written into it, never cut shorter. A failure then gives it back
    /// (`PartFate.handBack`). Nil otherwise.
    var handedOverLength: Int64?
    /// One connection: bytes before this are in the part file (written by this run or trusted from before).
    var written: Int64 = 0
    /// One connection: the stored durable offset.
    var durable: Int64 = 0
    /// Whether `start` was called: from then on the machine holds the transfer's state.
    public var hasStarted: Bool { phase != .idle }
    /// Whether one connection writes the file in order from its first byte (no segments): the bytes held are
    /// exactly the first `heldBytes` of the file.
    public var isSingleStream: Bool {
        if case .single = mode { return true }
        return false
    }
    /// The offset the store holds as durable, as far as the machine knows (one connection).
    public var durableOffset: Int64 { durable }
    /// Several: per segment, bytes `start..<written` are written.
    var segmentWritten: [Int64] = []
    var connections: [ConnectionID: Connection] = [:]
    var nextID = 0
    var freshFetchTried = false
    var segmentationDisabled = false
    var networkWaits = 0
    /// Whether a retry was reported and no byte has arrived since (`recovered` is reported with the next).
    var retryReported = false
    var restartsWithoutProgress = 0
    var ramp: ConnectionRamp
    /// When the last checkpoint started (or the run, before the first), and the bytes it holds.
    var lastCheckpoint: (time: Duration, bytes: Int64) = (.zero, 0)
    /// What the last checkpoint took from start to stored; before the first, a guess (`checkpointLead`).
    var checkpointCost: Duration?
    var isCheckpointing = false
    var lastProgress: Duration?
    var meter = SpeedMeter()
    var phase: Phase = .idle
    var shownConnections = 0
    /// Whether bytes held from before this run were kept (resumed, not fetched whole).
    public internal(set) var wasResumed = false
    /// Where this run started from: the bytes it did not fetch.
    public internal(set) var resumedFrom: Int64?
    /// The servers: the URL the user gave (the reference), then the mirrors.
    var sources: [Source]
    /// With piece hashes: each piece's check (empty until the length is known).
    var pieces: [Piece] = []
    var pieceTicket: UInt64 = 0
    /// Every byte is written and the file of this length waits for its pieces' checks.
    var awaitingPieces: Int64?
    /// Segments whose next request compares the held bytes before their offset (resumed without a strong validator).
    var uncheckedBefore: Set<Int> = []
    /// The held bytes at the end of the file are still to be compared.
    var tailUnchecked = false
    /// The link was replaced and the new one's first answer has not shown the stored strong validator yet.
    var linkUnconfirmed = false

    /// A machine for one run of a download.
    public init(settings: Settings) {
        self.settings = settings
        ramp = ConnectionRamp(maximum: settings.maxConnections, window: settings.rampWindow)
        sources = (0..<settings.sources).map { index in
            Source(status: MirrorStatus(state: index == 0 ? .active : .waiting), cap: settings.connectionsPerSource)
        }
    }

    /// The bytes held now, over all connections.
    public var heldBytes: Int64 {
        switch mode {
        case .single: written
        case .segmented(let map): zip(map.segments, segmentWritten).reduce(0) { $0 + $1.1 - $1.0.start }
        }
    }

    /// The file's length, when known.
    public var totalBytes: Int64? {
        if case .segmented(let map) = mode { return map.total }
        return facts?.totalLength
    }

    /// The connections open (requesting or streaming, not waiting).
    public var openConnections: Int { connections.values.filter { $0.phase != .waiting }.count }

    /// What the remote file is, as last learned.
    public var remoteFacts: RemoteFacts? { facts }

    /// What a checkpoint now would store.
    public var checkpointMark: Checkpoint {
        switch mode {
        case .single: .offset(written)
        case .segmented(let map):
            .segments(map.segments(withOffsets: segmentWritten), bytes: heldBytes)
        }
    }

    // MARK: Starting

    /// The first actions of a run, from what the runner found; with piece hashes, the pieces held from before are
    /// checked too.
    public mutating func start(_ start: Start, now: Duration) -> [Action] {
        let actions = begin(start, now: now)
        guard hasPieces, phase == .transferring, awaitingPieces == nil else { return actions }
        return actions + checkHeldPieces()
    }

    mutating func begin(_ given: Start, now: Duration) -> [Action] {
        let start = beginChecks(given)
        phase = .transferring
        facts = start.facts
        isPartVerified = start.isPartVerified
        handedOverLength = start.isHandedOver ? start.partLength : nil
        durable = start.durableOffset
        lastCheckpoint = (now, 0)
        if let stored = start.segments, let restored = restoreSegments(stored, start: start, now: now) {
            return restored
        }
        if start.segments != nil {
            // A map that does not fit the part file or the facts: the download starts over.
            facts = nil
            isPartVerified = true
            durable = 0
            written = 0
            return [.report(.restarted(reason: "the stored segment map is unusable"))]
                + [truncating(to: 0)] + send(newConnection(now: now), .whole, now: now)
        }
        let plan = ResumePlanner(overlapLength: settings.overlapLength).plan(
            ResumePlanner.Input(
                partLength: start.partLength, durableOffset: start.durableOffset, hasRecord: start.isPartVerified,
                boundsUnverified: start.holdsHandedOver, remote: start.facts))
        var actions: [Action] = []
        switch plan {
        case .finalize(let truncateTo):
            if let truncateTo { actions.append(truncating(to: truncateTo)) }
            written = truncateTo ?? start.partLength ?? 0
            durable = min(durable, written)
            resumedFrom = written
            wasResumed = written > 0
            lastCheckpoint.bytes = written
            return actions + finishing(total: written)
        case .request(let request, let truncateTo):
            if let truncateTo {
                actions.append(truncating(to: truncateTo))
                if truncateTo == 0 { facts = nil }
            }
            written = truncateTo ?? start.partLength ?? 0
            written = min(written, request.offset)
            durable = min(durable, written)
            lastCheckpoint.bytes = written
            return actions + send(newConnection(now: now), request, now: now)
        }
    }

    // MARK: Answers

    /// The head of the answer to the last request on `connection` arrived.
    public mutating func responseReceived(_ id: ConnectionID, _ head: ResponseHead, now: Duration) -> [Action] {
        guard var connection = connections[id], connection.phase == .requesting, phase == .transferring else {
            return [.discard(id)]
        }
        connection.wasActive = true
        connections[id] = connection
        var actions: [Action] = []
        if networkWaits > 0 {
            networkWaits = 0
            actions.append(.report(.networkReturned))
        }
        if connection.isSample { return actions + sampleAnswer(id, head: head, now: now) }
        if connection.checksTail { return actions + tailAnswer(id, head: head, now: now) }
        if let segment = connection.segment, case .segmented(let map) = mode {
            return actions + segmentAnswer(id, segment: segment, head: head, map: map, now: now)
        }
        return actions + singleAnswer(id, head: head, now: now)
    }

    // MARK: Bytes

    /// A chunk of `count` bytes arrived on `connection`: what to compare and write of it, and where. Call `wrote` once
    /// it is done.
    public mutating func claim(_ id: ConnectionID, count: Int) -> Grant {
        guard var connection = connections[id], connection.phase == .streaming, phase == .transferring else {
            return Grant(offset: 0, compare: 0, write: 0, stop: true, overrun: false)
        }
        connection.wasActive = true
        connection.isFlowing = true
        defer { connections[id] = connection }
        let position = connection.position
        var compare = 0
        if position < connection.compareUntil {
            compare = Int(min(Int64(count), connection.compareUntil - position))
        }
        var remaining = Int64(count - compare)
        var overrun = false
        if let end = connection.end, position + Int64(compare) + remaining > end {
            remaining = max(0, end - position - Int64(compare))
            overrun = connection.segment == nil
        }
        var stop = overrun
        if let segment = connection.segment, case .segmented(var map) = mode {
            let start = position + Int64(compare)
            let granted = map.claim(segment, at: start, count: remaining)
            mode = .segmented(map)
            if granted < remaining || start + granted >= map.segments[segment].end { stop = true }
            remaining = granted
        }
        connection.position = position + Int64(compare) + remaining
        if remaining > 0 { handedOverLength = nil }
        return Grant(offset: position, compare: compare, write: Int(remaining), stop: stop, overrun: overrun)
    }

    /// The chunk `claim` granted on `connection` is compared and written.
    public mutating func wrote(_ id: ConnectionID, now: Duration) -> [Action] {
        guard var connection = connections[id], phase == .transferring else { return [] }
        if connection.position > connection.compareUntil { connection.progressed = true }
        connections[id] = connection
        let bytes = count(writtenBy: connection)
        restartsWithoutProgress = 0
        var actions: [Action] = []
        if retryReported, !bytes.isEmpty {
            retryReported = false
            actions.append(.report(.recovered))
        }
        if hasPieces, !bytes.isEmpty { actions += piecesWritten(bytes, by: connection.source) }
        return actions + checkpointIfDue(now: now)
    }

    /// Counts the bytes `connection` has written, up to its position; returns those new to the file.
    private mutating func count(writtenBy connection: Connection) -> Range<Int64> {
        let position = connection.position
        if connection.isSample || connection.checksTail { return 0..<0 }
        if let segment = connection.segment, case .segmented = mode {
            if position >= connection.compareUntil { uncheckedBefore.remove(segment) }
            let before = segmentWritten[segment]
            segmentWritten[segment] = max(before, position)
            if position > before {
                sources[connection.source].status.receivedBytes += position - before
                sources[connection.source].failures = 0
                return before..<position
            }
        } else if position > connection.compareUntil || position > written {
            let before = written
            written = max(written, position)
            if !isPartVerified, position >= connection.compareUntil, connection.compareUntil > 0 {
                isPartVerified = true
            }
            return before..<written
        }
        return 0..<0
    }

    /// `connection` is busy though no byte arrived (it waits for a rate limit): not idle.
    public mutating func touch(_ id: ConnectionID) {
        connections[id]?.wasActive = true
    }

    /// The bytes held before the resume point differ from the server's: the download starts again.
    public mutating func overlapDiffered(_ id: ConnectionID, now: Duration) -> [Action] {
        guard let connection = connections[id], phase == .transferring else { return [] }
        if connection.isSample {
            return drop(
                connection.source, reason: "its last \(settings.overlapLength) bytes differ from the first server's",
                now: now)
        }
        return restart(
            "the bytes held differ from the server's; fetching it again from 0", closing: Array(connections.keys),
            now: now)
    }

    /// The body on `connection` ended cleanly.
    public mutating func bodyEnded(_ id: ConnectionID, now: Duration) -> [Action] {
        guard let connection = connections[id], connection.phase == .streaming, phase == .transferring else {
            return []
        }
        if connection.isSample { return sampleEnded(id, connection: connection, now: now) }
        if connection.checksTail { return tailEnded(id, connection: connection, now: now) }
        if let segment = connection.segment, case .segmented = mode {
            return segmentBodyEnded(id, segment: segment, connection: connection, now: now)
        }
        return singleBodyEnded(id, connection: connection, now: now)
    }

    // MARK: Failures

    /// The body on `connection` broke in the network (a reset, a timeout, a closed stream: `error` says which). The
    /// bytes written before it count, and the break is retried like any other, except a TLS failure, which another
    /// attempt would only meet again.
    public mutating func bodyBroke(
        _ id: ConnectionID, _ error: DownloadError, now: Duration, jitter: Double = 1
    ) -> [Action] {
        var failure = error
        failure.isRetryable = error.code != .tls
        failure.message += " while the file was arriving"
        return connectionFailed(id, failure, now: now, jitter: jitter)
    }

    /// The runner could not perform an action (a file it could not write, sync or move; a store that cannot write):
    /// the download fails with that error, keeping what it holds.
    public mutating func actionFailed(_ error: DownloadError) -> [Action] {
        guard phase != .done, phase != .stopping else { return [] }
        return fail(error)
    }

    /// The request or the body on `connection` failed with `error` (the bytes written before it still count).
    /// `jitter` in 0...1 scales the backoff (`RetryPolicy`); the runner draws it.
    public mutating func connectionFailed(
        _ id: ConnectionID, _ error: DownloadError, now: Duration, jitter: Double = 1
    ) -> [Action] {
        guard let connection = connections[id], phase == .transferring else { return [] }
        if connection.isSample { return mirrorFailed(id, error, now: now, jitter: jitter) }
        if connection.checksTail { return tailFailed(id, error, now: now, jitter: jitter) }
        if let segment = connection.segment, case .segmented = mode {
            return segmentFailed(id, segment: segment, error: error, now: now, jitter: jitter)
        }
        return singleFailed(id, error: error, now: now, jitter: jitter)
    }

    /// The wait of `connection` ended: send again.
    public mutating func waitEnded(_ id: ConnectionID, now: Duration) -> [Action] {
        guard let connection = connections[id], connection.phase == .waiting, phase == .transferring else {
            return []
        }
        if connection.checksTail { return resendTail(id, now: now) }
        if case .segmented = mode {
            return resendSegment(id, now: now)
        }
        return resendSingle(id, now: now)
    }

    // MARK: Checkpoints

    /// A checkpoint is synced and stored (`now`: when it was).
    public mutating func checkpointed(_ mark: Checkpoint, now: Duration) -> [Action] {
        isCheckpointing = false
        checkpointCost = max(.zero, now - lastCheckpoint.time)
        if case .offset(let offset) = mark { durable = max(durable, offset) }
        return []
    }

    /// A checkpoint failed: the download fails with its error (a full disk keeps its bytes).
    public mutating func checkpointFailed(_ error: DownloadError) -> [Action] {
        isCheckpointing = false
        guard phase == .transferring else { return [] }
        return fail(error)
    }

    /// How early a checkpoint starts, so that it is stored by one interval after the last one started: a power cut
    /// then costs at most one interval of bytes (DESIGN.md's invariant 3), where starting on the interval would let
    /// the sync's own time be lost too. The lead is what the last checkpoint took; the first, which also syncs the
    /// part file's new name, has no measure yet and takes half an interval. It never passes half an interval, so
    /// checkpoints start at most twice an interval however fast or slow the disk.
    var checkpointLead: Duration {
        let half = settings.checkpointInterval / 2
        return min(checkpointCost ?? half, half)
    }

    mutating func checkpointIfDue(now: Duration) -> [Action] {
        guard !isCheckpointing else { return [] }
        let held = heldBytes
        let dueByBytes = held - lastCheckpoint.bytes >= settings.checkpointBytes
        let dueByTime =
            now - lastCheckpoint.time >= settings.checkpointInterval - checkpointLead && held > lastCheckpoint.bytes
        guard dueByBytes || dueByTime else { return [] }
        lastCheckpoint = (now, held)
        isCheckpointing = true
        return [.checkpoint(checkpointMark)]
    }

    // MARK: Time

    /// Time passed (called often, about every tenth of the idle timeout or the ramp's window): idle connections,
    /// checkpoints due by time, the ramp, progress.
    public mutating func tick(now: Duration, jitter: Double = 1) -> [Action] {
        guard phase == .transferring else { return [] }
        var actions: [Action] = []
        for id in connections.keys.sorted() {
            guard var connection = connections[id], connection.phase != .waiting else { continue }
            if connection.wasActive {
                connection.wasActive = false
                connection.quietSince = now
                connections[id] = connection
            } else if now - connection.quietSince >= settings.idleTimeout {
                let seconds =
                    Double(settings.idleTimeout.components.seconds)
                    + Double(settings.idleTimeout.components.attoseconds) / 1e18
                let error = DownloadError(
                    .idleTimeout, "no data for \(seconds.formatted()) s; abandoning the connection")
                actions.append(.close(id))
                actions += connectionFailed(id, error, now: now, jitter: jitter)
                guard phase == .transferring else { return actions }
            }
        }
        actions += checkpointIfDue(now: now)
        if case .segmented = mode { actions += rampStep(now: now) }
        actions += progressIfDue(now: now)
        return actions
    }

    /// Whether the runner should tick fast now (the ramp is measuring or judging a connection).
    public var wantsFastTicks: Bool {
        guard case .segmented = mode else { return false }
        return ramp.isMeasuring
    }

    mutating func progressIfDue(now: Duration, force: Bool = false) -> [Action] {
        var actions: [Action] = []
        let open = openConnections
        if open != shownConnections, case .segmented = mode {
            shownConnections = open
            actions.append(.report(.connections(open)))
        }
        if !force, let last = lastProgress, now - last < settings.progressInterval { return actions }
        lastProgress = now
        let held = heldBytes
        meter.record(bytes: held, at: now)
        return actions + [
            .progress(
                Progress(
                    receivedBytes: held, totalBytes: totalBytes, bytesPerSecond: meter.bytesPerSecond,
                    secondsRemaining: meter.secondsRemaining(total: totalBytes), connections: max(1, open),
                    mirrors: measureMirrors(now: now)))
        ]
    }

    // MARK: Ending

    /// The runner verified (or failed to verify) the file `finalize` asked for.
    public mutating func finalized(_ outcome: FinalizeOutcome, now: Duration) -> [Action] {
        guard phase == .finalizing else { return [] }
        switch outcome {
        case .completed:
            phase = .done
            return [.end(.completed)]
        case .checksumMismatch(let error):
            if settings.verifiesChecksum, wasResumed || (resumedFrom ?? 0) > 0, !freshFetchTried {
                freshFetchTried = true
                phase = .transferring
                wasResumed = false
                return restart(
                    "checksum mismatch after a resumed download; fetching it whole", closing: [], now: now)
            }
            phase = .done
            return [.end(.failed(error, .discard))]
        }
    }

    /// Stop (a pause, a cancel, a shutdown): close every connection; the runner then syncs and stores what was
    /// written, exactly. Before the transfer started, nothing of this run is stored; a file the user handed over
    /// that this run never wrote to goes back as it came (`PartFate.handBack`), and the next run hands it over again.
    public mutating func stop() -> [Action] {
        guard phase != .done, phase != .stopping else { return [] }
        let ids = connections.keys.sorted()
        connections.removeAll()
        let fate = handedOverLength != nil ? .handBack : partFate
        phase = .stopping
        return ids.map { .close($0) } + [.end(.stopped(fate))]
    }

    /// What a run that ends now without completing keeps of its part file: what it holds, once it started.
    var partFate: PartFate { phase == .idle ? .leave : .keep(checkpointMark) }

    /// Cuts the part file to `length` (0 mostly): a file the user handed over that this makes shorter is not as it
    /// came any more.
    mutating func truncating(to length: Int64) -> Action {
        if let handed = handedOverLength, length < handed { handedOverLength = nil }
        return .truncate(to: length)
    }
}
