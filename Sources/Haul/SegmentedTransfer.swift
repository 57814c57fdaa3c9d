import Foundation
import HaulCore
import NIOCore
import Synchronization

/// Why a segmented transfer handed its download back to the runner.
enum SegmentFallback: Error {
    /// The remote file changed: every segment is discarded and the download starts again.
    case versionChanged(String)
    /// The server does not serve segments correctly: the download starts again with one connection.
    case oneConnection(String)
}

/// The first connection's answer, already validated, handed over to become the first segment's connection.
struct OpenedBody: Sendable {
    /// The body, whose first byte belongs at `start`.
    var body: any AsyncSequence<ByteBuffer, any Error> & Sendable
    /// Where the body's first byte belongs.
    var start: Int64
    /// One past the last byte the answer carries.
    var end: Int64
    /// Its activity (the idle watchdog's ticks).
    var activity: TransferActivity
}

/// The state the connections of one segmented transfer share: the segment map, how far each segment is written, and
/// the connection counts the ramp reads.
final class SegmentBoard: Sendable {
    private struct State {
        var map: SegmentMap
        /// Per segment: bytes `start..<written` are written to the part file.
        var written: [Int64]
        var connections = 0
        var flowing = 0
        var retireRequests = 0
        var overloaded = false
    }

    private let state: Mutex<State>

    init(map: SegmentMap) {
        state = Mutex(State(map: map, written: map.segments.map(\.offset)))
    }

    /// Work for a connection: a segment index and its range still to fetch.
    func take() -> (index: Int, from: Int64, end: Int64)? {
        state.withLock { state in
            guard let index = state.map.take() else { return nil }
            if state.written.count < state.map.segments.count {
                state.written += state.map.segments[state.written.count...].map(\.offset)
            }
            let segment = state.map.segments[index]
            return (index, segment.offset, segment.end)
        }
    }

    /// The range of segment `index` still to fetch.
    func range(_ index: Int) -> (from: Int64, end: Int64) {
        state.withLock { state in
            let segment = state.map.segments[index]
            return (segment.offset, segment.end)
        }
    }

    /// Claims up to `count` bytes at `position` of segment `index` for writing; fewer when a split moved its end.
    func claim(_ index: Int, at position: Int64, count: Int64) -> Int64 {
        state.withLock { $0.map.claim(index, at: position, count: count) }
    }

    /// Bytes of segment `index` before `offset` are written.
    func wrote(_ index: Int, upTo offset: Int64) {
        state.withLock { $0.written[index] = offset }
    }

    /// Whether segment `index` has every byte written.
    func isDone(_ index: Int) -> Bool {
        state.withLock { $0.written[index] >= $0.map.segments[index].end }
    }

    /// Frees segment `index`; bytes claimed but not written are handed out again.
    func release(_ index: Int) {
        state.withLock { state in state.map.release(index, keepingUpTo: state.written[index]) }
    }

    /// The segments with their written offsets, and the bytes written in all.
    func snapshot() -> (segments: [Segment], bytes: Int64) {
        state.withLock { state in
            let segments = state.map.segments(withOffsets: state.written)
            return (segments, segments.reduce(0) { $0 + $1.offset - $1.start })
        }
    }

    /// Bytes written over all segments.
    var writtenBytes: Int64 {
        state.withLock { state in
            zip(state.map.segments, state.written).reduce(0) { $0 + $1.1 - $1.0.start }
        }
    }

    /// Whether every byte of the file is written.
    var isComplete: Bool {
        state.withLock { state in zip(state.map.segments, state.written).allSatisfy { $0.1 >= $0.0.end } }
    }

    /// Whether one more connection would find work.
    var hasWorkToTake: Bool { state.withLock { $0.map.hasWorkToTake } }

    var counts: (connections: Int, flowing: Int) { state.withLock { ($0.connections, $0.flowing) } }

    func connectionOpened() { state.withLock { $0.connections += 1 } }
    func connectionClosed() { state.withLock { $0.connections -= 1 } }
    func setFlowing(_ isFlowing: Bool) { state.withLock { $0.flowing += isFlowing ? 1 : -1 } }

    /// Asks one connection to close at its next chunk.
    func requestRetire() { state.withLock { $0.retireRequests += 1 } }

    /// Whether the asking connection should close now (consumes one request).
    func shouldRetire() -> Bool {
        state.withLock { state in
            guard state.retireRequests > 0, state.connections > 1 else { return false }
            state.retireRequests -= 1
            return true
        }
    }

    /// A connection was answered 429 or 503 and closed; returns whether it may close (others remain).
    func closeOverloaded() -> Bool {
        state.withLock { state in
            guard state.connections > 1 else { return false }
            state.overloaded = true
            return true
        }
    }

    /// Whether a connection closed on 429 or 503 since the last call.
    func takeOverloaded() -> Bool {
        state.withLock { state in
            defer { state.overloaded = false }
            return state.overloaded
        }
    }
}

/// How often the coordinator of a segmented transfer looks at its connections.
private final class TickPace: Sendable {
    private let fast = Atomic<Bool>(false)

    /// Whether it looks at the fast pace.
    var isFast: Bool {
        get { fast.load(ordering: .relaxed) }
        set { fast.store(newValue, ordering: .relaxed) }
    }
}

/// Fetches one download over several connections into one part file: each connection fetches one segment with
/// `Range: bytes=a-b` and positional writes; a connection that finishes takes half of the largest remaining segment;
/// a ramp adds connections while they make the download faster. Checkpoints store the segment map after an fsync.
final class SegmentedTransfer: Sendable {
    private let id: DownloadID
    private let url: URL
    private let part: PartFile
    private let facts: RemoteFacts
    private let validator: String
    private let options: DownloadOptions
    private let environment: RunnerEnvironment
    private let makeHeaders: @Sendable (_ range: String, _ ifRange: String) -> [(name: String, value: String)]
    private let board: SegmentBoard
    private let stored: Mutex<(segments: [Segment], bytes: Int64)?>

    /// A transfer of the file `facts` describe (total length and strong validator known) over `map`.
    init(
        id: DownloadID,
        url: URL,
        part: PartFile,
        facts: RemoteFacts,
        validator: String,
        map: SegmentMap,
        options: DownloadOptions,
        environment: RunnerEnvironment,
        makeHeaders: @escaping @Sendable (_ range: String, _ ifRange: String) -> [(name: String, value: String)]
    ) {
        self.id = id
        self.url = url
        self.part = part
        self.facts = facts
        self.validator = validator
        self.options = options
        self.environment = environment
        self.makeHeaders = makeHeaders
        board = SegmentBoard(map: map)
        stored = Mutex(nil)
    }

    /// What the store holds for the segments after the transfer (nil if it stored nothing).
    var storedSegments: (segments: [Segment], bytes: Int64)? { stored.withLock { $0 } }

    private var host: String { url.host ?? url.absoluteString }

    private enum Signal: Sendable {
        case tick
        case ended((any Error)?)
    }

    /// Runs until every segment is written and durable, or throws (`SegmentFallback`, a `DownloadError`, or
    /// cancellation). On every way out the written bytes are fsynced and the segment map stored with them.
    func run(first: OpenedBody?) async throws {
        let checkpointer = Checkpointer<(segments: [Segment], bytes: Int64)>(part: part) {
            [self] mark throws(DownloadError) in
            try environment.store.saveSegments(mark.segments, durableBytes: mark.bytes, for: id.rawValue)
            stored.withLock { $0 = mark }
        }
        do {
            try await coordinate(first: first, checkpointer: checkpointer)
        } catch {
            try? await checkpointer.drain()
            await flush()
            try? environment.store.saveActiveConnections(0, for: id.rawValue)
            throw error
        }
        try await checkpointer.drain()
        await flush()
        try? environment.store.saveActiveConnections(0, for: id.rawValue)
    }

    /// Syncs the part file and stores the exact segment map (after every connection stopped writing).
    private func flush() async {
        let mark = board.snapshot()
        let part = part
        guard (try? await Blocking.run({ try part.syncData() })) != nil else { return }
        if (try? environment.store.saveSegments(mark.segments, durableBytes: mark.bytes, for: id.rawValue)) != nil {
            stored.withLock { $0 = mark }
        }
    }

    private func coordinate(
        first: OpenedBody?, checkpointer: Checkpointer<(segments: [Segment], bytes: Int64)>
    ) async throws {
        let (signals, continuation) = AsyncStream<Signal>.makeStream()
        let settings = environment.settings
        let tickLength = max(.milliseconds(5), min(settings.progressInterval, settings.connectionRampWindow / 20))
        // While the ramp measures or judges it looks every millisecond, so it acts as soon as its window is full or an
        // added connection shows its share (on nginx at 20 MiB/s a connection's first burst shows it within 2–4 ms).
        // The first look still comes at the normal pace: the first window starts there, mostly past a server's first
        // burst, which would double the rate it measures.
        let judgingTickLength = min(tickLength, .milliseconds(1))
        let pace = TickPace()
        try await withThrowingTaskGroup(of: Void.self) { group in
            defer {
                group.cancelAll()
                continuation.finish()
            }
            func spawn(_ opened: OpenedBody?) {
                board.connectionOpened()
                group.addTask {
                    var failure: (any Error)?
                    do { try await self.connection(first: opened) } catch { failure = error }
                    self.board.connectionClosed()
                    continuation.yield(.ended(failure))
                }
            }
            group.addTask { [clock = environment.idleClock] in
                while true {
                    try await clock.sleep(pace.isFast ? judgingTickLength : tickLength)
                    continuation.yield(.tick)
                }
            }
            spawn(first)
            var ramp = ConnectionRamp(maximum: options.maxConnectionsPerDownload, window: settings.connectionRampWindow)
            var open = 1
            var lastCheckpoint = (time: environment.clock.now(), bytes: board.writtenBytes)
            var lastProgress = Duration.zero - settings.progressInterval
            var meter = SpeedMeter()
            var shownConnections = -1
            meter.record(bytes: board.writtenBytes, at: environment.clock.now())
            for await signal in signals {
                switch signal {
                case .ended(let failure):
                    open -= 1
                    if let failure { throw failure }
                    if board.isComplete {
                        if open == 0 { return }
                        continue
                    }
                    if open == 0 { spawn(nil); open += 1 }
                case .tick:
                    let now = environment.clock.now()
                    let written = board.writtenBytes
                    if written - lastCheckpoint.bytes >= settings.checkpointBytes
                        || (now - lastCheckpoint.time >= settings.checkpointInterval && written > lastCheckpoint.bytes)
                    {
                        try checkpointer.request(board.snapshot())
                        lastCheckpoint = (now, written)
                    }
                    let counts = board.counts
                    if board.takeOverloaded() { ramp.serverOverloaded(connections: counts.connections + 1) }
                    switch ramp.decide(
                        now: environment.idleClock.now(), bytes: written, connections: counts.connections,
                        flowing: counts.flowing, canAdd: board.hasWorkToTake)
                    {
                    case .add:
                        environment.logger.info(
                            "\(url): adding connection \(counts.connections + 1) at \(written) bytes")
                        spawn(nil)
                        open += 1
                    case .drop(let count):
                        environment.logger.info(
                            "\(url): connection \(counts.connections) did not make it faster; closing \(count)")
                        for _ in 0..<count { board.requestRetire() }
                    case .hold:
                        break
                    }
                    pace.isFast = ramp.isMeasuring
                    if counts.connections != shownConnections {
                        shownConnections = counts.connections
                        try? environment.store.saveActiveConnections(shownConnections, for: id.rawValue)
                    }
                    if now - lastProgress >= settings.progressInterval {
                        lastProgress = now
                        meter.record(bytes: written, at: now)
                        environment.events.emit(
                            .progress(
                                DownloadProgress(
                                    id: id, receivedBytes: written, totalBytes: facts.totalLength,
                                    bytesPerSecond: meter.bytesPerSecond,
                                    secondsRemaining: meter.secondsRemaining(total: facts.totalLength),
                                    connections: max(1, counts.connections)
                                )))
                    }
                }
            }
            try Task.checkCancellation()
        }
    }

    // MARK: One connection

    /// One connection: takes segments and fetches them until none is left, retrying on its own; throws only what ends
    /// the whole transfer.
    private func connection(first: OpenedBody?) async throws {
        var opened = first
        var index: Int? = first == nil ? nil : board.take()?.index
        var failures = 0
        defer { if let index { board.release(index) } }
        while true {
            try Task.checkCancellation()
            if index == nil {
                guard let taken = board.take() else { return }
                index = taken.index
            }
            guard let current = index else { return }
            let before = board.range(current).from
            let result: Result<Bool, any Error>
            do {
                if let body = opened {
                    opened = nil
                    result = .success(
                        try await withIdleWatchdog(
                            body.activity, seconds: options.idleTimeoutSeconds, clock: environment.idleClock,
                            host: host
                        ) { try await self.stream(body, segment: current) })
                } else {
                    result = .success(try await fetch(segment: current))
                }
            } catch {
                result = .failure(error)
            }
            if board.range(current).from > before { failures = 0 }
            switch result {
            case .success(let retire):
                if retire { return }
                if board.isDone(current) {
                    board.release(current)
                    index = nil
                }
            case .failure(let error):
                guard let error = error as? DownloadError, error.isRetryable, !Task.isCancelled else { throw error }
                if error.status == 429 || error.status == 503, board.closeOverloaded() {
                    environment.logger.info("\(url): \(error.message); closing one connection")
                    return
                }
                if error.code == .connectionFailed {
                    // A server that refuses one more connection while others run limits connections: close this
                    // one. Alone, the runner waits for the network.
                    if board.counts.connections > 1 { return }
                    throw error
                }
                failures += 1
                switch environment.retryPolicy(for: options).decide(
                    failures: failures, error: error, jitter: environment.settings.jitter())
                {
                case .giveUp:
                    var final = error
                    final.isRetryable = false
                    final.message =
                        "\(error.message) (one connection gave up after \(failures) attempts without progress)"
                    throw final
                case .retry(let delay):
                    environment.logger.info("\(url): \(error.message); this connection retries in \(delay)")
                    await environment.report(.retrying(error, delay: delay, attempts: nil))
                    try await environment.clock.sleep(delay)
                }
            }
        }
    }

    /// Requests what is left of segment `index`, validates the answer and streams it. Returns whether the connection
    /// was asked to close.
    private func fetch(segment index: Int) async throws -> Bool {
        let (from, end) = board.range(index)
        guard from < end else { return false }
        let request = TransportRequest(url: url, headers: makeHeaders("bytes=\(from)-\(end - 1)", validator))
        let activity = TransferActivity()
        let transport = environment.transport
        let response = try await withIdleWatchdog(
            activity, seconds: options.idleTimeoutSeconds, clock: environment.idleClock, host: host
        ) {
            let response = try await transport.send(request)
            activity.touch()
            return response
        }
        switch SegmentValidator().decide(start: from, end: end, head: response.head, known: facts) {
        case .write(let length):
            let body = OpenedBody(body: response.body, start: from, end: from + length, activity: activity)
            return try await withIdleWatchdog(
                activity, seconds: options.idleTimeoutSeconds, clock: environment.idleClock, host: host
            ) { try await self.stream(body, segment: index) }
        case .versionChanged(let reason):
            throw SegmentFallback.versionChanged(reason)
        case .oneConnection(let reason):
            throw SegmentFallback.oneConnection(reason)
        case .fail(let error):
            throw error
        }
    }

    /// Streams an answer into segment `index` until the segment's end (which a split may move) or the answer's end.
    /// Returns whether the connection was asked to close.
    private func stream(_ opened: OpenedBody, segment index: Int) async throws -> Bool {
        var position = opened.start
        var writeback = WritebackStarter(part: part, from: position)
        let limiters = environment.limiters
        let clock = environment.clock
        var isFlowing = false
        defer { if isFlowing { board.setFlowing(false) } }
        do {
            for try await chunk in opened.body {
                opened.activity.touch()
                if !isFlowing {
                    isFlowing = true
                    board.setFlowing(true)
                }
                let count = Int64(chunk.readableBytes)
                let granted = board.claim(index, at: position, count: min(count, opened.end - position))
                if granted > 0 {
                    let slice = chunk.getSlice(at: chunk.readerIndex, length: Int(granted)) ?? ByteBuffer()
                    try part.write(slice, at: position)
                    position += granted
                    board.wrote(index, upTo: position)
                    writeback.wrote(upTo: position)
                }
                for limiter in limiters {
                    try await limiter.acquire(Int(count), clock: clock, activity: opened.activity)
                }
                if granted < count || position >= opened.end { break }
                if board.shouldRetire() { return true }
            }
        } catch {
            if error is DownloadError || error is CancellationError || Task.isCancelled { throw error }
            throw DownloadError(.connectionLost, "connection to \(host) broke during a segment", underlying: error)
        }
        if position < opened.end, position < board.range(index).end {
            throw DownloadError(
                .bodyTooShort,
                "connection closed after \(position - opened.start) of \(opened.end - opened.start) bytes",
                isRetryable: true)
        }
        return false
    }
}
