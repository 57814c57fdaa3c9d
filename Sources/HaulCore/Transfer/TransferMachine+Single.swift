/// The rules of one connection: the part file grows from its start, each answer checked by `ResponseValidator`.
extension TransferMachine {
    /// The answer to a request of the one connection.
    mutating func singleAnswer(_ id: ConnectionID, head: ResponseHead, now: Duration) -> [Action] {
        guard let connection = connections[id] else { return [.discard(id)] }
        switch judgeReplacedLink(head) {
        case .usual: break
        case .compare: return compareSingle(id, now: now)
        case .otherFile(let reason):
            connections[id] = nil
            return [.discard(id)] + restart(reason, closing: [], now: now)
        }
        let request = connection.request
        let held = request.offset
        switch ResponseValidator().decide(request: request, head: head, known: facts, partLength: held) {
        case .fail(let error):
            return [.discard(id)] + singleFailed(id, error: error, now: now, jitter: 1)
        case .restart(let reason):
            connections[id] = nil
            return [.discard(id)] + restart(reason, closing: [], now: now)
        case .complete(let known):
            // The part file already holds the whole file (416 with its length).
            facts = known
            written = held
            connections[id] = nil
            return [.discard(id), .report(.factsLearned(known))] + finishing(total: held)
        case .rewrite(let length, let known):
            // A 200: the whole file from 0, kept as the body (the range was ignored, or the file changed).
            var actions: [Action] = []
            if held > 0 || written > 0 {
                let changed = facts.map { known.validators.isChanged(comparedTo: $0.validators) } ?? false
                actions.append(
                    .report(
                        .restarted(
                            reason: changed
                                ? "the remote file changed; its new version is fetched from 0"
                                : "the server sent the whole file instead of the range; it is kept from 0")))
                actions.append(truncating(to: 0))
            }
            facts = known
            isPartVerified = true
            written = 0
            durable = 0
            lastCheckpoint.bytes = 0
            wasResumed = false
            resumedFrom = 0
            actions.append(.report(.factsLearned(known)))
            return actions + accept(id, Body(start: 0, compareUntil: 0, end: length), now: now)
        case .write(let offset, let overlap, let length, let known):
            facts = known
            if offset > 0 { wasResumed = true }
            let start = offset - overlap
            return [.report(.factsLearned(known))]
                + accept(id, Body(start: start, compareUntil: offset, end: length.map { start + $0 }), now: now)
        }
    }

    /// Takes an accepted answer's body on `id`; when the answer allows it, it becomes the first connection of a
    /// segmented transfer.
    mutating func accept(_ id: ConnectionID, _ body: Body, now: Duration) -> [Action] {
        guard var connection = connections[id] else { return [] }
        connection.phase = .streaming
        connection.bodyStart = body.start
        connection.position = body.start
        connection.compareUntil = body.compareUntil
        connection.end = body.end
        connection.wasActive = true
        connection.isFlowing = false
        if shouldSplit(body), let end = body.end {
            var map = SegmentMap(
                total: end, minimumSize: settings.minimumSplitSize, fetched: body.start,
                pieces: settings.maxConnections)
            map.alignment = settings.pieceLength ?? 1
            if isMirrored { map.separate(from: max(body.start, end - settings.overlapLength)) }
            if let index = map.take() {
                connection.segment = index
                mode = .segmented(map)
                segmentWritten = map.segments.map(\.offset)
                ramp = ConnectionRamp(maximum: settings.maxConnections, window: settings.rampWindow)
                ramp.begin(now: now)
                shownConnections = 0
            }
        }
        connections[id] = connection
        return [.stream(id, body)]
    }

    /// Whether an answer may be split over several connections: more than one allowed, ranges honoured, the length
    /// and a strong validator known (so that every segment's answer can be checked to be the same version), no
    /// overlap being compared, and at least two minimum segments to fetch.
    func shouldSplit(_ body: Body) -> Bool {
        guard !segmentationDisabled, settings.maxConnections > 1, isPartVerified, body.compareUntil == body.start,
            let facts, facts.isResumable, facts.validators.ifRangeValue != nil, let total = facts.totalLength,
            let end = body.end, end == total
        else { return false }
        return end - body.start >= 2 * settings.minimumSplitSize
    }

    /// The body of the one connection ended cleanly.
    mutating func singleBodyEnded(_ id: ConnectionID, connection: Connection, now: Duration) -> [Action] {
        let position = connection.position
        if let end = connection.end, position < end {
            let error = DownloadError(
                .bodyTooShort,
                "connection closed after \(position - connection.bodyStart) of \(end - connection.bodyStart) bytes",
                isRetryable: true)
            return singleFailed(id, error: error, now: now, jitter: 1)
        }
        var actions: [Action] = []
        // No length announced and a clean end: that end is the file's end.
        if facts?.totalLength == nil, let known = facts {
            facts = RemoteFacts(totalLength: position, validators: known.validators, isResumable: known.isResumable)
            actions.append(.report(.factsLearned(facts!)))
        }
        let total = facts?.totalLength ?? position
        if written >= total {
            connections[id] = nil
            return actions + finishing(total: total)
        }
        // The answer ended before the file did (a server may send less than asked): ask for the rest.
        return actions + resendSingle(id, now: now)
    }

    /// The request or body of the one connection failed.
    mutating func singleFailed(_ id: ConnectionID, error: DownloadError, now: Duration, jitter: Double) -> [Action] {
        guard var connection = connections[id] else { return [] }
        // A server that answered before and cannot be reached at all waits for the network even when the error
        // is not otherwise retried.
        guard error.isRetryable || (error.code == .connectionFailed && facts != nil) else { return fail(error) }
        connection.isFlowing = false
        return retryAfterFailure(
            id, connection, error: error, jitter: jitter, gaveUp: "gave up after", reportsAttempts: true
        ) { machine in machine.resendSingle(id, now: now) }
    }

    /// Sends the one connection's next request: from the bytes held, with `If-Range` when the validator is strong,
    /// else with an overlap to compare; from 0 when the server does not resume.
    mutating func resendSingle(_ id: ConnectionID, now: Duration) -> [Action] {
        guard let connection = connections[id] else { return [] }
        return (written > 0 && facts?.isResumable == false ? startOver() : [])
            + send(
                id, nextSingleRequest(connection), now: now)
    }

    /// A server that does not resume: the bytes held go, and the next request is for the whole file.
    private mutating func startOver() -> [Action] {
        written = 0
        durable = 0
        lastCheckpoint.bytes = 0
        return [
            .report(.restarted(reason: "the server does not resume downloads; starting again from 0")),
            truncating(to: 0),
        ]
    }

    func nextSingleRequest(_ connection: Connection) -> RangeRequest {
        guard written > 0, let facts, facts.isResumable else { return .whole }
        if isPartVerified, let validator = facts.validators.ifRangeValue {
            return RangeRequest(offset: written, ifRange: validator)
        }
        return RangeRequest(offset: written, overlap: min(settings.overlapLength, written))
    }
}
