/// Segments resumed without a strong validator: the stored one was weak or missing, or the link was replaced (a new
/// URL's validators say nothing about the old one's bytes). Before a segment appends, the bytes held right before its
/// offset (up to `overlapLength`) are fetched again and compared; the bytes held at the end of the file, which no
/// segment continues from, are compared by a connection of their own (`checksTail`) before the file is finished. A
/// difference anywhere starts the download again: the bytes of two files are never mixed.
extension TransferMachine {
    /// After a stored map is restored without a strong validator: what must be compared.
    mutating func planHeldChecks(_ map: SegmentMap) {
        uncheckedBefore = Set(map.segments.indices.filter { map.segments[$0].offset < map.segments[$0].end })
        tailUnchecked = map.total > 0 && heldStart(before: map.total, in: map) < map.total
    }

    /// The first byte of the held bytes that end at `position`, going back at most `overlapLength`.
    func heldStart(before position: Int64, in map: SegmentMap) -> Int64 {
        var start = position
        let floor = max(0, position - settings.overlapLength)
        while start > floor,
            let holder = map.segments.indices.first(where: {
                map.segments[$0].start < start && start <= segmentHeldEnd($0, in: map)
            })
        {
            start = max(floor, map.segments[holder].start)
        }
        return start
    }

    /// One past the last byte segment `index` holds.
    private func segmentHeldEnd(_ index: Int, in map: SegmentMap) -> Int64 {
        index < segmentWritten.count ? segmentWritten[index] : map.segments[index].offset
    }

    /// The request for what is left of segment `index` from `source`: with the held bytes before it to compare when
    /// they are unchecked.
    mutating func segmentRequest(_ index: Int, map: SegmentMap, source: Int, validators: Validators?) -> RangeRequest {
        let segment = map.segments[index]
        var request = RangeRequest(
            offset: segment.offset, ifRange: validators?.ifRangeValue, end: segment.end, source: source)
        if uncheckedBefore.contains(index) {
            request.overlap = segment.offset - heldStart(before: segment.offset, in: map)
            if request.overlap == 0 { uncheckedBefore.remove(index) }
        }
        return request
    }

    /// Opens the connection that compares the held bytes at the end of the file.
    mutating func checkTail(now: Duration) -> [Action] {
        guard case .segmented(let map) = mode else { return [] }
        let id = newConnection(now: now)
        connections[id]?.checksTail = true
        return sendTailCheck(id, map: map, now: now)
    }

    private mutating func sendTailCheck(_ id: ConnectionID, map: SegmentMap, now: Duration) -> [Action] {
        let start = heldStart(before: map.total, in: map)
        return send(id, RangeRequest(offset: start, end: map.total), now: now)
    }

    /// The answer to the tail check: the same file, then every byte compared.
    mutating func tailAnswer(_ id: ConnectionID, head: ResponseHead, now: Duration) -> [Action] {
        guard let connection = connections[id], let known = facts, case .segmented(let map) = mode else {
            return [.discard(id)]
        }
        let start = connection.request.offset
        switch SegmentValidator().decide(start: start, end: map.total, head: head, known: known) {
        case .write(let length) where length == map.total - start:
            return [.stream(id, acceptSegment(id, from: start, compareUntil: map.total, length: length))]
        case .write(let length):
            return [.discard(id)]
                + restart(
                    "the server sent \(length) bytes for the last \(map.total - start)",
                    closing: Array(connections.keys), now: now)
        case .versionChanged(let reason):
            return restartAnswered(id, head, reason: reason, oneConnection: false, now: now)
        case .oneConnection(let reason):
            return restartAnswered(id, head, reason: reason, oneConnection: true, now: now)
        case .fail(let error):
            return [.discard(id)] + tailFailed(id, error, now: now, jitter: 1)
        }
    }

    /// The tail check's body ended: every byte was the same, and the connection takes work (or the file finishes).
    mutating func tailEnded(_ id: ConnectionID, connection: Connection, now: Duration) -> [Action] {
        guard connection.position >= connection.compareUntil, case .segmented(let map) = mode else {
            let error = DownloadError(
                .bodyTooShort, "connection closed after \(connection.position - connection.bodyStart) bytes",
                isRetryable: true)
            return tailFailed(id, error, now: now, jitter: 1)
        }
        tailUnchecked = false
        connections[id]?.checksTail = false
        connections[id]?.failures = 0
        if isComplete {
            let ids = connections.keys.sorted()
            connections.removeAll()
            return ids.map { .close($0) } + finishing(total: map.total)
        }
        return takeWork(id, now: now)
    }

    /// The tail check failed in the network: retried like any connection.
    mutating func tailFailed(_ id: ConnectionID, _ error: DownloadError, now: Duration, jitter: Double) -> [Action] {
        guard let connection = connections[id] else { return [] }
        guard error.isRetryable else { return fail(error) }
        return retryAfterFailure(
            id, connection, error: error, jitter: jitter, gaveUp: "the check of the held bytes gave up after",
            reportsAttempts: false
        ) { machine in
            machine.resendTail(id, now: now)
        }
    }

    /// Sends the tail check again (after a wait or a break).
    mutating func resendTail(_ id: ConnectionID, now: Duration) -> [Action] {
        guard case .segmented(let map) = mode else { return [] }
        return sendTailCheck(id, map: map, now: now)
    }
}

/// A replaced link. Its first requests still carry the old strong validator, as a precondition (`If-Match`, or
/// `If-Unmodified-Since` for a date): a server of the same file (a presigned URL signed again, the same object behind
/// another host) answers 206 and nothing is fetched twice; another version answers 412, without a body. A 412, a
/// 200 (a server that ignores the precondition), or a 206 with other validators, of the same length, does not restart
/// the download: the held bytes are compared instead (the old validators are forgotten). Another length is another
/// file, and the download starts again, saying so.
extension TransferMachine {
    /// The start as it is used: a replaced link without a strong validator compares at once.
    mutating func beginChecks(_ given: Start) -> Start {
        var start = given
        guard start.linkReplaced, var facts = start.facts else { return start }
        if facts.validators.isStrong {
            linkUnconfirmed = true
        } else {
            facts.validators = Validators()
            start.facts = facts
        }
        return start
    }

    /// The answer's total length, when it says one.
    private func answeredTotal(_ head: ResponseHead) -> Int64? {
        if head.status == 206, case .satisfied(_, _, let total) = head.contentRange { return total }
        if head.status == 200, case .length(let length) = head.contentLength { return length }
        return nil
    }

    /// Whether `head`, the first answer on a replaced link, calls for comparing the held bytes (the same length,
    /// other validators or no range); nil when it is an answer the usual rules take (it confirmed the link, or is no
    /// file at all). The reason to restart when it is another file.
    enum LinkVerdict {
        case usual, compare, otherFile(String)
    }

    mutating func judgeReplacedLink(_ head: ResponseHead) -> LinkVerdict {
        guard linkUnconfirmed, let known = facts else { return .usual }
        if head.status == 412, !known.validators.isEmpty {
            // Another version than the stored validator's: what is held is compared. The comparing request's answer
            // is judged here too, for its length.
            facts?.validators = Validators()
            return .compare
        }
        guard head.status == 200 || head.status == 206 else { return .usual }
        linkUnconfirmed = false
        if let total = answeredTotal(head), let stored = known.totalLength, total != stored {
            return .otherFile("the new link serves another file (\(total) bytes, not \(stored)); fetching it from 0")
        }
        // The same validator, or the answer to the comparing request: the usual rules from here.
        if known.validators.isEmpty || head.status == 206 && !head.validators.isChanged(comparedTo: known.validators) {
            return .usual
        }
        facts?.validators = Validators()
        return .compare
    }

    /// Compares the held bytes before the offset of the one connection's part file: `id` asks again.
    mutating func compareSingle(_ id: ConnectionID, now: Duration) -> [Action] {
        let overlap = min(settings.overlapLength, written)
        return [.discard(id)] + send(id, RangeRequest(offset: written, overlap: overlap), now: now)
    }

    /// Compares the held bytes before every segment's offset and at the end: `id` asks again, with the checks.
    mutating func compareSegments(_ id: ConnectionID, now: Duration) -> [Action] {
        guard case .segmented(let map) = mode else { return [] }
        planHeldChecks(map)
        let tail = tailUnchecked && !connections.values.contains(where: \.checksTail) ? checkTail(now: now) : []
        return [.discard(id)] + resendSegment(id, now: now) + tail
    }
}
