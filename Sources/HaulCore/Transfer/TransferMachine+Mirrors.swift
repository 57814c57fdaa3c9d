/// The rules of one file fetched from several servers: the URL the user gave (source 0, the reference) and its
/// mirrors.
///
/// The reference is what one server is alone: its first answer says what the file is, its validators guard every
/// resume, and a change of its file restarts the download. A mirror's bytes count only once it is trusted, and it is
/// trusted only when:
/// - it answers the sample range, the file's last `overlapLength` bytes (64 KiB), with the reference's total; and
/// - its bytes there equal those a trusted server sent, compared in the part file and never written. No mirror is
///   asked before those bytes are held, so the first connection added after the split fetches them from the
///   reference.
///
/// From then on a mirror's answers keep its own validators and the total. A mirror whose file changes, that stops
/// serving ranges as asked, that sends other bytes, or that fails more often in a row than the retry policy allows,
/// is dropped with its reason; the download goes on with the others. Only the last trusted server's failures are
/// the download's (its network waits, its retries, its end).
///
/// Work goes by speed. A new connection checks a waiting mirror first, else goes to the trusted server whose
/// connections are fastest, within `connectionsPerSource` each. A connection that finds nothing free steals from the
/// segment that would finish last, cut where both finish together, so a slow mirror's last segment goes mostly to a
/// fast one.
extension TransferMachine {
    /// One server of the download.
    struct Source: Sendable {
        var status: MirrorStatus
        /// Its own validators, learned from its sample answer (the reference's are `facts`).
        var validators: Validators?
        /// Attempts in a row that brought nothing.
        var failures = 0
        /// The most connections it gets (lowered when it says it is overloaded).
        var cap: Int
        var meter = SpeedMeter(window: .seconds(2))
    }

    /// Whether the file is fetched from more than one server.
    var isMirrored: Bool { sources.count > 1 }

    /// The smallest piece a steal takes.
    var minimumSteal: Int64 { min(settings.minimumSplitSize, 1 << 20) }

    /// The first byte of the sample range mirrors are compared on.
    var sampleStart: Int64? {
        guard case .segmented(let map) = mode else { return nil }
        return max(0, map.total - settings.overlapLength)
    }

    /// Whether every byte of the sample range is written.
    var isSampleHeld: Bool {
        guard case .segmented(let map) = mode, let start = sampleStart else { return false }
        return zip(map.segments, segmentWritten).allSatisfy { segment, written in
            segment.end <= start || written >= segment.end
        }
    }

    func isTrusted(_ source: Int) -> Bool { sources[source].status.state == .active }

    func hasOtherTrustedSource(than source: Int) -> Bool {
        sources.indices.contains { $0 != source && isTrusted($0) }
    }

    /// Connections of `source`.
    func load(_ source: Int) -> Int { connections.values.count { $0.source == source } }

    /// What one connection of `source` brings, a second.
    func speedPerConnection(_ source: Int) -> Double {
        sources[source].meter.bytesPerSecond / Double(max(1, load(source)))
    }

    /// The server a new connection goes to, nil when none may take one.
    func pickSource() -> Int? {
        if !isSampleHeld {
            // The sample range comes first, from a trusted server: one connection for it even past the cap.
            if let open = sources.indices.first(where: { isTrusted($0) && load($0) < sources[$0].cap }) { return open }
            guard case .segmented(let map) = mode, let start = sampleStart,
                let tail = map.segments.indices.first(where: {
                    map.segments[$0].start <= start && start < map.segments[$0].end
                }), !map.isHeld[tail]
            else { return nil }
            return sources.indices.first(where: isTrusted)
        }
        if let waiting = sources.indices.first(where: { sources[$0].status.state == .waiting }) { return waiting }
        let open = sources.indices.filter { isTrusted($0) && load($0) < sources[$0].cap }
        // An idle server first (it has no measure yet), then the fastest connections; the fewest connections, then
        // the user's order, on a tie.
        return open.min { left, right in
            let (a, b) = (
                load(left) == 0 ? Double.infinity : speedPerConnection(left),
                load(right) == 0 ? Double.infinity : speedPerConnection(right)
            )
            if a != b { return a > b }
            if load(left) != load(right) { return load(left) < load(right) }
            return left < right
        }
    }

    /// Opens a connection to the server `pickSource` chooses and gives it work.
    mutating func addConnection(now: Duration) -> [Action] {
        guard let source = pickSource() else { return [] }
        return takeWork(newConnection(now: now, source: source), now: now)
    }

    /// The speeds a steal by connection `id` weighs.
    func speeds(taking id: ConnectionID) -> SegmentMap.Speeds {
        var holders: [Int: Double] = [:]
        for connection in connections.values {
            if let segment = connection.segment { holders[segment] = speedPerConnection(connection.source) }
        }
        let taker = connections[id].map { speedPerConnection($0.source) } ?? 0
        return SegmentMap.Speeds(holder: { holders[$0] ?? 0 }, taker: taker, minimumSteal: minimumSteal)
    }

    // MARK: The sample

    /// Asks `id`'s server, not trusted yet, for the sample range.
    mutating func sendSample(_ id: ConnectionID, now: Duration) -> [Action] {
        guard let start = sampleStart, case .segmented(let map) = mode, let connection = connections[id] else {
            return []
        }
        sources[connection.source].status.state = .checking
        connections[id]?.isSample = true
        connections[id]?.segment = nil
        return send(id, RangeRequest(offset: start, end: map.total, source: connection.source), now: now)
    }

    /// A mirror's answer for the sample range: the same total, then every byte compared.
    mutating func sampleAnswer(_ id: ConnectionID, head: ResponseHead, now: Duration) -> [Action] {
        guard let connection = connections[id], case .segmented(let map) = mode else { return [.discard(id)] }
        let source = connection.source
        let start = connection.request.offset
        var theirs: Int64?
        if head.status == 206, case .satisfied(_, _, let total) = head.contentRange { theirs = total }
        if head.status == 200, case .length(let length) = head.contentLength { theirs = length }
        if head.status == 416, case .unsatisfied(let total) = head.contentRange { theirs = total }
        if let theirs, theirs != map.total {
            return [.discard(id)]
                + drop(source, reason: "its file is \(theirs) bytes, the first server's \(map.total)", now: now)
        }
        let known = RemoteFacts(totalLength: map.total, validators: head.validators, isResumable: true)
        switch SegmentValidator().decide(start: start, end: map.total, head: head, known: known) {
        case .write(let length) where length == map.total - start:
            sources[source].validators = head.validators
            return [.stream(id, acceptSegment(id, from: start, compareUntil: map.total, length: length))]
        case .write(let length):
            return [.discard(id)]
                + drop(source, reason: "it sent \(length) bytes for the last \(map.total - start)", now: now)
        case .versionChanged(let reason), .oneConnection(let reason):
            return [.discard(id)] + drop(source, reason: reason, now: now)
        case .fail(let error):
            return [.discard(id)] + mirrorFailed(id, error, now: now, jitter: 1)
        }
    }

    /// A sample's body ended: every byte was the same, so the mirror is trusted and takes work.
    mutating func sampleEnded(_ id: ConnectionID, connection: Connection, now: Duration) -> [Action] {
        guard connection.position >= connection.compareUntil else {
            let error = DownloadError(
                .bodyTooShort, "connection closed after \(connection.position - connection.bodyStart) bytes",
                isRetryable: true)
            return mirrorFailed(id, error, now: now, jitter: 1)
        }
        connections[id]?.isSample = false
        connections[id]?.failures = 0
        sources[connection.source].status.state = .active
        sources[connection.source].failures = 0
        return takeWork(id, now: now)
    }

    // MARK: Failures

    /// A connection to a mirror failed (or to the reference while a mirror is trusted): its server's failure, not
    /// the download's. It retries on the same server with backoff, and the server is dropped when its failures in a
    /// row reach the retry policy's bound or the error is not one a retry helps.
    mutating func mirrorFailed(_ id: ConnectionID, _ error: DownloadError, now: Duration, jitter: Double) -> [Action] {
        guard var connection = connections[id], case .segmented(var map) = mode else { return [] }
        let source = connection.source
        connection.isFlowing = false
        if let segment = connection.segment {
            map.release(segment, keepingUpTo: segmentWritten[segment])
            mode = .segmented(map)
            connection.segment = nil
        }
        let others = load(source) - 1
        if others > 0, error.status == 429 || error.status == 503 || error.code == .connectionFailed {
            // The server limits connections: it keeps those it serves.
            sources[source].cap = others
            connections[id] = nil
            return [.close(id)]
        }
        connection.phase = .waiting
        connections[id] = connection
        guard error.isRetryable else { return drop(source, reason: error.message, now: now) }
        if connection.progressed {
            connections[id]?.progressed = false
            return takeWork(id, now: now)
        }
        sources[source].failures += 1
        let failures = sources[source].failures
        switch settings.retryPolicy.decide(failures: failures, error: error, jitter: jitter) {
        case .giveUp:
            let attempts = "\(failures) attempt\(failures == 1 ? "" : "s")"
            return drop(source, reason: "\(error.message) (\(attempts) in a row without progress)", now: now)
        case .retry(let delay):
            retryReported = true
            return [.report(.retrying(error, delay: delay, attempts: nil)), .wait(id, delay)]
        }
    }

    /// Leaves `source` out of this run: its connections close, their segments free with what they wrote. The
    /// download fails only when no server is left that could serve it.
    mutating func drop(_ source: Int, reason: String, now: Duration) -> [Action] {
        sources[source].status.state = .dropped
        sources[source].status.reason = reason
        var actions: [Action] = [.report(.mirrorDropped(source: source, reason: reason))]
        guard case .segmented(var map) = mode else { return actions }
        for (id, connection) in connections.sorted(by: { $0.key < $1.key }) where connection.source == source {
            if let segment = connection.segment { map.release(segment, keepingUpTo: segmentWritten[segment]) }
            connections[id] = nil
            actions.append(.close(id))
        }
        mode = .segmented(map)
        let canGoOn =
            sources.indices.contains { isTrusted($0) || sources[$0].status.state == .checking }
            || (isSampleHeld && sources.contains { $0.status.state == .waiting })
        guard canGoOn else {
            let error = DownloadError(.invalidResponse, "no server is left to fetch the file from: \(reason)")
            return actions + fail(error)
        }
        if connections.isEmpty { actions += addConnection(now: now) }
        return actions
    }

    // MARK: Reports

    /// Each server's status now, its speed measured at `now` (empty without mirrors).
    mutating func measureMirrors(now: Duration) -> [MirrorStatus] {
        guard isMirrored else { return [] }
        for index in sources.indices {
            sources[index].meter.record(bytes: sources[index].status.receivedBytes, at: now)
            sources[index].status.bytesPerSecond = sources[index].meter.bytesPerSecond
            sources[index].status.connections = load(index)
        }
        return sources.map(\.status)
    }

    /// After a restart: the reference's file may be another, so every mirror not dropped is checked again.
    mutating func forgetMirrors() {
        for index in sources.indices.dropFirst() where sources[index].status.state != .dropped {
            sources[index].status.state = .waiting
            sources[index].validators = nil
            sources[index].failures = 0
            sources[index].cap = settings.connectionsPerSource
        }
    }
}
