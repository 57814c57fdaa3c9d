/// The steps every rule of the machine shares: opening a connection, sending, what follows a failure, failing, and
/// restarting from 0.
extension TransferMachine {
    mutating func newConnection(now: Duration, source: Int = 0) -> ConnectionID {
        let id = nextID
        nextID += 1
        connections[id] = Connection(phase: .requesting, request: .whole, quietSince: now, source: source)
        return id
    }

    mutating func send(_ id: ConnectionID, _ given: RangeRequest, now: Duration) -> [Action] {
        guard var connection = connections[id] else { return [] }
        var request = given
        // A replaced link not confirmed yet: its validator is a precondition, not If-Range (`TransferMachine+Checks`).
        if linkUnconfirmed, request.ifRange != nil, request.source == 0 { request.requiresSame = true }
        connection.phase = .requesting
        connection.request = request
        connection.progressed = false
        connection.wasActive = false
        connection.quietSince = now
        connection.isFlowing = false
        connections[id] = connection
        if resumedFrom == nil { resumedFrom = request.offset }
        return [.send(id, request)]
    }

    /// What follows a connection's failure, the same for one connection and several:
    /// - a server that answered before and cannot be reached at all: the network is away. The download waits for it,
    ///   probing with backoff, without spending the retries (a host that never answered still fails after them);
    /// - a connection that brought bytes before it broke is resumed at once (`resend`), where it stopped, and its
    ///   count of attempts without progress starts again;
    /// - otherwise the retry policy backs off, or gives up and the download fails, its message saying after how many
    ///   attempts (`gaveUp` names who gave up).
    mutating func retryAfterFailure(
        _ id: ConnectionID, _ failed: Connection, error: DownloadError, jitter: Double, gaveUp: String,
        reportsAttempts: Bool, resend: (inout TransferMachine) -> [Action]
    ) -> [Action] {
        var connection = failed
        connection.phase = .waiting
        if error.code == .connectionFailed, facts != nil {
            networkWaits += 1
            connections[id] = connection
            let delay = settings.retryPolicy.backoff(failures: networkWaits, jitter: jitter)
            return (networkWaits == 1 ? [.report(.waitingForNetwork(error))] : []) + [.wait(id, delay)]
        }
        if connection.progressed {
            connection.failures = 0
            connection.progressed = false
            connections[id] = connection
            return resend(&self)
        }
        connection.failures += 1
        connections[id] = connection
        switch settings.retryPolicy.decide(failures: connection.failures, error: error, jitter: jitter) {
        case .giveUp:
            var final = error
            final.isRetryable = false
            let attempts = connection.failures
            final.message =
                "\(error.message) (\(gaveUp) \(attempts) attempt\(attempts == 1 ? "" : "s") without progress)"
            return fail(final)
        case .retry(let delay):
            retryReported = true
            return [
                .report(.retrying(error, delay: delay, attempts: reportsAttempts ? connection.failures : nil)),
                .wait(id, delay),
            ]
        }
    }

    mutating func fail(_ error: DownloadError) -> [Action] {
        let ids = connections.keys.sorted()
        connections.removeAll()
        // A file the user handed over (-c) that this run never wrote to goes back as it came, as `curl -C -` and
        // `wget -c` leave the file they were given when the server answers 404. Otherwise a part file that holds no
        // byte of the file is deleted, not kept: a download that fails before its first byte (a 404, a host that
        // cannot be reached) leaves no empty file behind, as aria2 and `curl -f` leave none; a retry makes it again.
        let fate: PartFate =
            handedOverLength != nil ? .handBack : partFate == .leave || heldBytes > 0 ? partFate : .discard
        phase = .done
        return ids.map { .close($0) } + [.end(.failed(LinkExpiry.afterProgress(error, held: heldBytes), fate))]
    }

    /// Starts the download again from 0 on one connection: closes `closing`, empties the part file, forgets what
    /// was known, and either keeps `body` (a 200 with the whole file arrived on `keeping`) or sends a new request.
    mutating func restart(
        _ reason: String, closing: [ConnectionID], keeping: (ConnectionID, ResponseHead)? = nil, now: Duration
    ) -> [Action] {
        restartsWithoutProgress += 1
        var actions: [Action] = []
        for id in closing.sorted() where id != keeping?.0 {
            connections[id] = nil
            actions.append(.close(id))
        }
        actions.append(.report(.restarted(reason: reason)))
        if restartsWithoutProgress > 3 {
            // A server that makes every answer a restart would loop for ever: this counts as a failure.
            return actions
                + fail(
                    DownloadError(
                        .invalidResponse, "gave up after \(restartsWithoutProgress - 1) restarts in a row: \(reason)"))
        }
        mode = .single
        segmentWritten = []
        uncheckedBefore = []
        tailUnchecked = false
        forgetMirrors()
        pieces = []
        awaitingPieces = nil
        facts = nil
        isPartVerified = true
        durable = 0
        written = 0
        lastCheckpoint.bytes = 0
        wasResumed = false
        resumedFrom = 0
        shownConnections = 0
        actions.append(truncating(to: 0))
        if let (id, head) = keeping {
            var connection = connections[id] ?? Connection(phase: .requesting, request: .whole, quietSince: now)
            connection.segment = nil
            connection.phase = .requesting
            connection.request = .whole
            connections[id] = connection
            return actions + singleAnswer(id, head: head, now: now)
        }
        let id = newConnection(now: now)
        return actions + send(id, .whole, now: now)
    }
}
