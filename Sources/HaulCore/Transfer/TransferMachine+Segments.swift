/// The rules of several connections: a `SegmentMap` hands out ranges, each answer checked by `SegmentValidator`, a
/// `ConnectionRamp` adds connections while they make the download faster.
extension TransferMachine {
    /// A stored map, restored: each segment continues at its stored offset (bytes past it, or past the part file's
    /// end, are fetched again); without a strong validator the held bytes are compared first
    /// (`TransferMachine+Checks`). Nil when it cannot be used.
    mutating func restoreSegments(_ stored: [Segment], start: Start, now: Duration) -> [Action]? {
        guard let partLength = start.partLength, start.isPartVerified, let facts = start.facts,
            facts.isResumable, let total = facts.totalLength
        else { return nil }
        let clamped = stored.map { segment in
            var segment = segment
            segment.offset = min(segment.offset, max(segment.start, partLength))
            return segment
        }
        guard
            var map = SegmentMap(
                restoring: clamped, total: total, minimumSize: settings.minimumSplitSize,
                pieces: settings.maxConnections)
        else { return nil }
        map.alignment = settings.pieceLength ?? 1
        resumedFrom = map.fetchedBytes
        wasResumed = map.fetchedBytes > 0
        lastCheckpoint.bytes = map.fetchedBytes
        if isMirrored { map.separate(from: max(0, total - settings.overlapLength)) }
        mode = .segmented(map)
        segmentWritten = map.segments.map(\.offset)
        if isComplete { return finishing(total: total) }
        if !facts.validators.isStrong { planHeldChecks(map) }
        let check = tailUnchecked ? checkTail(now: now) : []
        if isMirrored { return check + addConnection(now: now) }
        return check + takeWork(newConnection(now: now), now: now)
    }

    /// Whether every segment has every byte written.
    var isComplete: Bool {
        guard case .segmented(let map) = mode else { return false }
        return zip(map.segments, segmentWritten).allSatisfy { $0.1 >= $0.0.end }
    }

    /// Gives `id` a segment to fetch and sends its request; closes `id` when there is none.
    mutating func takeWork(_ id: ConnectionID, now: Duration) -> [Action] {
        if isMirrored, let connection = connections[id], !isTrusted(connection.source) {
            return sendSample(id, now: now)
        }
        guard case .segmented(var map) = mode,
            let index = isMirrored
                ? map.take(first: isSampleHeld ? nil : sampleStart, speeds: speeds(taking: id)) : map.take()
        else {
            connections[id] = nil
            return [.close(id)]
        }
        mode = .segmented(map)
        if segmentWritten.count < map.segments.count {
            segmentWritten += map.segments[segmentWritten.count...].map(\.offset)
        }
        connections[id]?.segment = index
        return resendSegment(id, now: now)
    }

    /// Sends the request for what is left of `id`'s segment, or takes other work when it is done.
    mutating func resendSegment(_ id: ConnectionID, now: Duration) -> [Action] {
        guard case .segmented(var map) = mode, let connection = connections[id], let index = connection.segment else {
            return takeWork(id, now: now)
        }
        // Bytes claimed but not written are handed out again.
        map.rewind(index, to: segmentWritten[index])
        mode = .segmented(map)
        let segment = map.segments[index]
        guard segment.offset < segment.end else {
            map.release(index)
            mode = .segmented(map)
            connections[id]?.segment = nil
            return takeWork(id, now: now)
        }
        let source = connection.source
        let validators = source == 0 ? facts?.validators : sources[source].validators
        let request = segmentRequest(index, map: map, source: source, validators: validators)
        return send(id, request, now: now)
    }

    /// The answer to a segment's request.
    mutating func segmentAnswer(
        _ id: ConnectionID, segment: Int, head: ResponseHead, map: SegmentMap, now: Duration
    ) -> [Action] {
        guard let connection = connections[id], let known = facts, let end = connection.request.end else {
            return [.discard(id)]
        }
        let from = connection.request.rangeStart ?? connection.request.offset
        let compareUntil = connection.request.offset
        let source = connection.source
        if source == 0, let sent = connection.request.ifRange, sent != known.validators.ifRangeValue {
            // Sent with validators forgotten since (a replaced link's): asked again as the rules are now.
            return [.discard(id)] + resendSegment(id, now: now)
        }
        if source == 0 {
            switch judgeReplacedLink(head) {
            case .usual: break
            case .compare: return compareSegments(id, now: now)
            case .otherFile(let reason): return restart(reason, closing: Array(connections.keys), now: now)
            }
        }
        if source != 0 {
            // A mirror's answer is checked against its own version, learned from its sample.
            let own = RemoteFacts(
                totalLength: known.totalLength, validators: sources[source].validators ?? Validators(),
                isResumable: true)
            switch SegmentValidator().decide(start: from, end: end, head: head, known: own) {
            case .write(let length):
                return [.stream(id, acceptSegment(id, from: from, compareUntil: compareUntil, length: length))]
            case .versionChanged(let reason):
                return [.discard(id)] + drop(source, reason: "its file changed (\(reason))", now: now)
            case .oneConnection(let reason):
                return [.discard(id)] + drop(source, reason: reason, now: now)
            case .fail(let error):
                return [.discard(id)] + segmentFailed(id, segment: segment, error: error, now: now, jitter: 1)
            }
        }
        switch SegmentValidator().decide(start: from, end: end, head: head, known: known) {
        case .write(let length):
            return [.stream(id, acceptSegment(id, from: from, compareUntil: compareUntil, length: length))]
        case .versionChanged(let reason):
            return restartAnswered(id, head, reason: reason, oneConnection: false, now: now)
        case .oneConnection(let reason):
            return restartAnswered(id, head, reason: reason, oneConnection: true, now: now)
        case .fail(let error):
            return [.discard(id)] + segmentFailed(id, segment: segment, error: error, now: now, jitter: 1)
        }
    }

    /// A segment's answer (or the check of the held bytes at the end) shows another version, or a server that does
    /// not serve ranges correctly: every segment goes, and a 200 carrying the file is kept as the whole file; without
    /// ranges, one connection goes on from 0.
    mutating func restartAnswered(
        _ id: ConnectionID, _ head: ResponseHead, reason: String, oneConnection: Bool, now: Duration
    ) -> [Action] {
        if oneConnection { segmentationDisabled = true }
        return restart(
            oneConnection ? reason + "; going on with one connection" : reason, closing: Array(connections.keys),
            keeping: head.status == 200 ? (id, head) : nil, now: now)
    }

    mutating func acceptSegment(_ id: ConnectionID, from: Int64, compareUntil: Int64, length: Int64) -> Body {
        let body = Body(start: from, compareUntil: compareUntil, end: from + length)
        connections[id]?.phase = .streaming
        connections[id]?.bodyStart = from
        connections[id]?.position = from
        connections[id]?.compareUntil = compareUntil
        connections[id]?.end = body.end
        connections[id]?.wasActive = true
        connections[id]?.isFlowing = false
        return body
    }

    /// A segment's answer ended, or its connection stopped reading (the segment's end moved, or it retires).
    mutating func segmentBodyEnded(
        _ id: ConnectionID, segment: Int, connection: Connection, now: Duration
    ) -> [Action] {
        guard case .segmented(var map) = mode else { return [] }
        let position = connection.position
        let segmentEnd = map.segments[segment].end
        connections[id]?.isFlowing = false
        if position < segmentEnd, let end = connection.end, position < end, !connection.retiring {
            let error = DownloadError(
                .bodyTooShort,
                "connection closed after \(position - connection.bodyStart) of \(end - connection.bodyStart) bytes",
                isRetryable: true)
            return segmentFailed(id, segment: segment, error: error, now: now, jitter: 1)
        }
        if isComplete, tailUnchecked {
            // Every byte is written, but the held bytes at the end are not compared yet: only that check goes on.
            let others = connections.keys.filter { connections[$0]?.checksTail != true }.sorted()
            for other in others { connections[other] = nil }
            let check = connections.isEmpty ? checkTail(now: now) : []
            return others.map { .close($0) } + check
        }
        if isComplete {
            // Every byte is written: whatever else is open has nothing left to do.
            let others = connections.keys.filter { $0 != id }.sorted()
            connections.removeAll()
            return others.map { .close($0) } + [.close(id)] + finishing(total: map.total)
        }
        if connection.retiring, connections.count == 1 {
            // The others ended since the ramp chose this one to go: the last connection stays.
            connections[id]?.retiring = false
        } else if connection.retiring {
            map.release(segment, keepingUpTo: segmentWritten[segment])
            mode = .segmented(map)
            connections[id] = nil
            return [.close(id)]
        }
        if segmentWritten[segment] >= segmentEnd {
            map.release(segment)
            mode = .segmented(map)
            connections[id]?.segment = nil
            connections[id]?.failures = 0
            return takeWork(id, now: now)
        }
        // The answer ended before the segment did (a server may send less than asked): ask for the rest.
        return resendSegment(id, now: now)
    }

    /// A connection of several failed.
    mutating func segmentFailed(
        _ id: ConnectionID, segment: Int, error: DownloadError, now: Duration, jitter: Double
    ) -> [Action] {
        guard var connection = connections[id], case .segmented(var map) = mode else { return [] }
        if isMirrored, hasOtherTrustedSource(than: connection.source) {
            return mirrorFailed(id, error, now: now, jitter: jitter)
        }
        let others = connections.keys.filter { $0 != id }.count
        let streaming = connections.contains { $0.key != id && $0.value.phase == .streaming }
        if !error.isRetryable, streaming, error.code == .linkExpired || LinkExpiry.statuses.contains(error.status ?? 0)
        {
            // The link expired for new requests, but a signed link is checked when asked: the answers streaming go
            // on and their bytes are kept. The download fails once the last of them ends and its next request meets
            // the same answer.
            ramp.serverOverloaded(connections: others)
            map.release(segment, keepingUpTo: segmentWritten[segment])
            mode = .segmented(map)
            connections[id] = nil
            return [.close(id)]
        }
        guard error.isRetryable else { return fail(error) }
        connection.isFlowing = false
        // A 429 or 503 while others run, or a refused connection beside others (an FTP server's 421 "too many
        // connections" is one): the server limits connections. This one closes, and the ramp adds none beyond those
        // left.
        if others > 0, error.status == 429 || error.status == 503 || error.code == .connectionFailed {
            ramp.serverOverloaded(connections: others + 1)
            map.release(segment, keepingUpTo: segmentWritten[segment])
            mode = .segmented(map)
            connections[id] = nil
            return [.close(id)]
        }
        // Otherwise as any connection's failure: wait for the network, resend, back off or give up.
        return retryAfterFailure(
            id, connection, error: error, jitter: jitter, gaveUp: "one connection gave up after",
            reportsAttempts: false
        ) { machine in machine.resendSegment(id, now: now) }
    }

    /// The ramp's look at the connections: add one, drop some, or hold.
    mutating func rampStep(now: Duration) -> [Action] {
        guard case .segmented(let map) = mode else { return [] }
        let hasWork = isMirrored ? map.hasWorkToTake(minimumSteal: minimumSteal) : map.hasWorkToTake
        if connections.isEmpty, phase == .transferring, hasWork {
            // Work left and no connection at all (the last ones ended or were refused): one opens, whatever the ramp
            // would say.
            return isMirrored ? addConnection(now: now) : takeWork(newConnection(now: now), now: now)
        }
        if isMirrored, hasWork, !isSampleHeld, connections.count == 1, phase == .transferring,
            sources.contains(where: { $0.status.state == .waiting })
        {
            // The user named other servers: the sample they are checked on is fetched at once, not when the ramp
            // would add a second connection to the first server (it may never, and then no mirror is ever asked).
            return addConnection(now: now)
        }
        if isMirrored, hasWork, isSampleHeld, sources.contains(where: { $0.status.state == .waiting }) {
            // Each mirror not asked yet is asked at once, whatever the ramp would say: it is another server, whose
            // connection the others' measure says nothing about.
            var actions: [Action] = []
            for _ in sources.indices where sources.contains(where: { $0.status.state == .waiting }) {
                guard phase == .transferring else { break }
                let before = connections.count
                actions += addConnection(now: now)
                if connections.count == before { break }
            }
            return actions
        }
        let flowing = connections.values.filter { $0.phase == .streaming && $0.isFlowing }.count
        let canAdd = hasWork && (!isMirrored || pickSource() != nil)
        switch ramp.decide(
            now: now, bytes: heldBytes, connections: connections.count, flowing: flowing, canAdd: canAdd)
        {
        case .add:
            return isMirrored ? addConnection(now: now) : takeWork(newConnection(now: now), now: now)
        case .drop(let count):
            // The newest streaming connections close when their segment ends (or their answer does): closing one
            // mid-segment would throw away the bytes already on their way to it.
            let streaming = connections.filter { $0.value.phase == .streaming && !$0.value.retiring }.keys.sorted()
            for id in streaming.reversed().prefix(count) where connections.count > 1 {
                connections[id]?.retiring = true
            }
            return []
        case .hold:
            return []
        }
    }
}
