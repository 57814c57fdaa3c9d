import Foundation
import GRDB
import Haul
import HaulCore
import Logging
import PostgresNIO

/// Workers claim downloads with leases: a claim takes queued downloads in queue order (priority, then position),
/// skipping the rows another worker is claiming at that moment (`FOR UPDATE SKIP LOCKED`), and so do downloads whose
/// holder's lease expired (a worker that died, was cut off or stopped). Each claim takes a new lease number from one
/// sequence; a write fenced by a lease (`fencedUpdate`) changes the row only while that lease is the row's, so a
/// worker that lost its lease can write nothing more to it, whatever it still believes.
extension PostgresStore {
    /// A download a worker holds: its row as claimed, and the lease that fences its writes.
    public struct Claim: Sendable {
        public var record: DownloadRecord
        public var lease: Int64
        /// Whether this is the download's first lease: no earlier one can have left a part file.
        public var isFirst: Bool
    }

    /// Claims up to `limit` downloads for `worker`, each under a new lease that expires after `duration` unless
    /// renewed: queued or running downloads that no lease holds (none, or one that expired) and whose prerequisites
    /// completed. Highest priority first, then queue order.
    ///
    /// With `folders` (the worker's allowed folders), a download confined to allowed folders (added over the
    /// network) is claimed only when it lies in one of them: a worker never takes what it may not write.
    public func claim(
        worker: String, limit: Int, for duration: Duration, within folders: [String] = [], fleetTotal: Int? = nil
    ) throws(DownloadError) -> [Claim] {
        guard limit > 0 else { return [] }
        // How many it may take (the fleet's total counts every live lease), asked first: the claim's LIMIT is then a
        // value the planner sees, and it walks the queue-order index for that many rows. With the LIMIT a subquery,
        // it planned for an unknown share of the queue and sorted the whole queue at every claim.
        let roomQuery: PostgresQuery = """
            SELECT LEAST(\(limit), GREATEST(0, COALESCE(
                COALESCE(\(fleetTotal)::bigint, (SELECT value::bigint FROM setting WHERE name = 'fleetJobs'))
                    - (SELECT count(*) FROM download WHERE lease IS NOT NULL AND "leaseExpires" >= now()),
                \(limit))))::bigint
            """
        let confined = DownloadOrigin.allCases.filter(\.isConfined).map(\.rawValue)
        let query = { @Sendable (room: Int) -> PostgresQuery in
            var bindings = PostgresBindings(capacity: 5)
            bindings.append(room)
            bindings.append(worker)
            bindings.append(Self.seconds(duration))
            bindings.append(folders)
            bindings.append(confined)
            return PostgresQuery(
                unsafeSQL: """
                    WITH picked AS (
                        SELECT id FROM download
                        WHERE state IN ('queued', 'running', 'waitingForNetwork')
                          AND ("leaseExpires" IS NULL OR "leaseExpires" < now())
                          AND NOT EXISTS (
                            SELECT 1 FROM jsonb_array_elements_text(prerequisites::jsonb) AS waited(id)
                            JOIN download AS other ON other.id = waited.id WHERE other.state <> 'completed')
                          AND (cardinality($4::text[]) = 0 OR NOT (origin = ANY($5::text[])) OR EXISTS (
                            SELECT 1 FROM unnest($4::text[]) AS allowed(folder)
                            WHERE allowed.folder = '/' OR COALESCE(directory, destination) = allowed.folder
                               OR starts_with(COALESCE(directory, destination), allowed.folder || '/')))
                        ORDER BY priority DESC, "queuePosition"
                        LIMIT $1
                        FOR UPDATE SKIP LOCKED)
                    UPDATE download SET worker = $2, lease = nextval('lease_number'),
                        "leaseExpires" = now() + make_interval(secs => $3), leases = download.leases + 1
                    FROM picked WHERE download.id = picked.id
                    RETURNING download.lease, download.leases, \(Self.qualifiedReadColumns)
                    """, binds: bindings)
        }
        let claims = try queue.perform { [logger] connection in
            // Claims take turns, so that the fleet's total (`fleetJobs`) counts every lease taken before.
            try connection.query("SELECT pg_advisory_xact_lock(\(Self.claimLock))", logger: logger).blockingGet()
            let room = try connection.query(roomQuery, logger: logger).blockingGet().first?.decode(Int.self) ?? 0
            guard room > 0 else { return [Claim]() }
            return try connection.query(query(room), logger: logger).blockingGet().map { row in
                var cells = row.makeIterator()
                guard let lease = cells.next(), let leases = cells.next() else {
                    throw DownloadError(.store, "the store answered a claim without its lease")
                }
                return Claim(
                    record: try DownloadRecord(row: Self.databaseRow(IteratorSequence(cells))),
                    lease: try lease.decode(Int64.self), isFirst: try leases.decode(Int64.self) <= 1)
            }
        }
        return claims.sorted {
            DownloadManager.QueueCursor($0.record).precedes(DownloadManager.QueueCursor($1.record))
        }
    }

    /// Extends the leases `worker` holds by `duration` from now (its heartbeat); returns the downloads whose lease it
    /// still held. A download missing from the answer was taken over: its worker stops it at once.
    public func renewLeases(worker: String, _ leases: [String: Int64], for duration: Duration) throws(DownloadError)
        -> Set<String>
    {
        guard !leases.isEmpty else { return [] }
        var bindings = PostgresBindings(capacity: 4)
        bindings.append(Array(leases.keys))
        bindings.append(Array(leases.values))
        bindings.append(Self.seconds(duration))
        bindings.append(worker)
        let query = PostgresQuery(
            unsafeSQL: """
                UPDATE download SET "leaseExpires" = now() + make_interval(secs => $3)
                FROM unnest($1::text[], $2::bigint[]) AS held(id, lease)
                WHERE download.id = held.id AND download.lease = held.lease AND download.worker = $4
                RETURNING download.id
                """, binds: bindings)
        let renewed = try queue.perform { [logger] connection in
            try connection.query(query, logger: logger).blockingGet().map { try $0.decode(String.self) }
        }
        return Set(renewed)
    }

    /// Writes `update` only while `lease` is the download's lease; throws `locked` when another worker took the
    /// download over (nothing is written then).
    public func fencedUpdate(_ update: DownloadStore.RowUpdate, lease: Int64) throws(DownloadError) {
        let query = try Self.query(for: update, fence: .lease(lease), worker: worker)
        let changed = try queue.perform { [logger] connection in
            try connection.query(query, logger: logger).blockingGet().metadata.rows ?? 0
        }
        guard changed > 0 else {
            throw DownloadError(
                .locked, "download \(update.id) was taken over by another worker (its lease \(lease) expired)")
        }
    }

    /// Gives up `worker`'s lease of download `id`, when it is still `lease` (the download stopped here).
    public func release(_ id: String, lease: Int64) throws(DownloadError) {
        try queue.perform { [logger] connection in
            try connection.query(
                """
                UPDATE download SET worker = NULL, lease = NULL, "leaseExpires" = NULL
                WHERE id = \(id) AND lease = \(lease)
                """, logger: logger
            ).blockingGet()
        }
    }

    /// The key of the advisory lock claims take turns under ("haulclam" in ASCII).
    static let claimLock: Int64 = 0x6861_756C_636C_616D

    /// Limits the downloads the whole fleet runs at once to `jobs` (nil: each worker's `-j` alone). Stored: every
    /// worker's claims keep to it.
    public func setFleetLimit(_ jobs: Int?) throws(DownloadError) {
        try queue.perform { [logger] connection in
            if let jobs {
                try connection.query(
                    """
                    INSERT INTO setting (name, value) VALUES ('fleetJobs', \(String(jobs)))
                    ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value
                    """, logger: logger
                ).blockingGet()
            } else {
                try connection.query("DELETE FROM setting WHERE name = 'fleetJobs'", logger: logger).blockingGet()
            }
        }
    }

    // MARK: This worker's leases

    public func claim(limit: Int, within folders: [String], fleetTotal: Int?) throws(DownloadError)
        -> [DownloadRecord]
    {
        let claims = try claim(
            worker: worker, limit: limit, for: leaseDuration, within: folders, fleetTotal: fleetTotal)
        held.withLock { held in
            for claim in claims { held[claim.record.id] = claim.lease }
        }
        laterLeases.withLock { later in
            for claim in claims {
                if claim.isFirst { later.remove(claim.record.id) } else { later.insert(claim.record.id) }
            }
        }
        lostLeases.withLock { lost in
            for claim in claims { lost[claim.record.id] = nil }
        }
        return claims.map(\.record)
    }

    public func renewLeases() throws(DownloadError) -> Set<String> {
        try heartbeat()
        let leases = held.withLock { $0 }
        let renewed = try renewLeases(worker: worker, leases, for: leaseDuration)
        var lost: Set<String> = []
        for (id, lease) in leases where !renewed.contains(id) {
            // Released meanwhile (the download ended here) is not lost.
            guard held.withLock({ $0[id] == lease }) else { continue }
            lose(id, lease: lease)
            lost.insert(id)
        }
        return lost
    }

    public func holds(_ id: String) -> Bool { held.withLock { $0[id] != nil } }

    public func lease(of id: String) -> Int64? { held.withLock { $0[id] } }

    public func followsEarlierLeases(_ id: String) -> Bool { laterLeases.withLock { $0.contains(id) } }

    public func release(_ id: String) {
        laterLeases.withLock { _ = $0.remove(id) }
        guard let lease = held.withLock({ $0.removeValue(forKey: id) }) else {
            // The run of a lease that was lost has ended: its fence is lifted for what this worker does next.
            lostLeases.withLock { $0[id] = nil }
            return
        }
        let query: PostgresQuery = """
            UPDATE download SET worker = NULL, lease = NULL, "leaseExpires" = NULL WHERE id = \(id) AND lease = \(lease)
            """
        _ = queue.submit(awaited: false) { [logger] connection in
            try connection.query(query, logger: logger).blockingGet()
        }
    }

    public func eventPosition() throws(DownloadError) -> EventID {
        // The events to come are those of transactions still running and of those to begin.
        let query: PostgresQuery = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
        let horizon = try queue.perform { [logger] connection in
            try connection.query(query, logger: logger).blockingGet().first?.decode(Int64.self) ?? 0
        }
        return EventID(run: horizon, sequence: 0)
    }

    public func events(after position: EventID, limit: Int) throws(DownloadError) -> [FleetEvent] {
        var bindings = PostgresBindings(capacity: 3)
        bindings.append(position.run)
        bindings.append(Int64(clamping: position.sequence))
        bindings.append(limit)
        // Only the events of transactions older than every one still running: none can come before them any more,
        // so what one worker reads, in this order, every worker reads.
        let query = PostgresQuery(
            unsafeSQL: """
                WITH picked AS (
                    SELECT event.* FROM event
                    WHERE ("transaction", number) > ($1, $2)
                      AND "transaction" < pg_snapshot_xmin(pg_current_snapshot())::text::bigint
                    ORDER BY "transaction", number LIMIT $3)
                SELECT picked."transaction", picked.number, picked.kind, picked.download, \(Self.qualifiedReadColumns)
                FROM picked LEFT JOIN download ON download.id = picked.download
                ORDER BY picked."transaction", picked.number
                """, binds: bindings)
        return try queue.perform { [logger] connection in
            try connection.query(query, logger: logger).blockingGet().map { row in
                var cells = row.makeIterator()
                guard let transaction = cells.next(), let number = cells.next(), let kind = cells.next(),
                    let download = cells.next()
                else { throw DownloadError(.store, "the store answered an event without its id") }
                let columns = try Self.databaseRow(IteratorSequence(cells))
                let id = EventID(
                    run: try transaction.decode(Int64.self), sequence: UInt64(max(0, try number.decode(Int64.self))))
                let record = (columns["id"] as String?) == nil ? nil : try DownloadRecord(row: columns)
                return FleetEvent(
                    id: id, kind: FleetEvent.Kind(rawValue: try kind.decode(String.self)) ?? .changed,
                    download: try download.decode(String.self), record: record)
            }
        }
    }

    public func pruneEvents(olderThan age: Duration) throws(DownloadError) {
        let seconds = Self.seconds(age)
        try queue.perform { [logger] connection in
            try connection.query(
                "DELETE FROM event WHERE at < now() - make_interval(secs => \(seconds))", logger: logger
            ).blockingGet()
        }
    }

    /// Records that this worker is alive now (with each renewal, the first when its manager starts running). Throws
    /// `locked` when another process holds the name (`nameTaken`).
    func heartbeat() throws(DownloadError) {
        hasBeaten.withLock { $0 = true }
        let query: PostgresQuery = """
            INSERT INTO worker (name, instance) VALUES (\(worker), \(instance))
            ON CONFLICT (name) DO UPDATE SET "heartbeatAt" = now(), instance = EXCLUDED.instance
            WHERE \(unescaped: Self.nameIsFree(lease: leaseDuration))
            RETURNING name
            """
        let beat = try queue.perform { [logger] connection in
            try connection.query(query, logger: logger).blockingGet().first != nil
        }
        guard beat else { throw nameTaken() }
    }

    /// When a beat may write the worker's row: the name is this process's, or no live process has it (given up, or
    /// its last beat older than a lease). `EXCLUDED` is this process's row.
    static func nameIsFree(lease: Duration) -> String {
        """
        worker.instance IS NULL OR worker.instance = EXCLUDED.instance
            OR worker."heartbeatAt" < now() - make_interval(secs => \(seconds(lease)))
        """
    }

    /// A process stopped (SIGSTOP, a machine suspended) for longer than a lease may find its name taken when it runs
    /// again: another process, started under the name meanwhile, waited out its lease (`takeName`). This one then
    /// stops, as a worker whose leases ran out must: two processes under one name would share one heartbeat and one
    /// share of each host's connections.
    func nameTaken() -> DownloadError {
        DownloadError(
            .locked,
            "another process took the worker name \(worker) while this one did not run for longer than a lease (\(leaseDuration.spoken)); this one stops"
        )
    }

    public func pulse(transferring: Int) throws(DownloadError) -> FleetPulse {
        hasBeaten.withLock { $0 = true }
        let staleAfter = Self.seconds(leaseDuration)
        let query: PostgresQuery = """
            WITH me AS (
                INSERT INTO worker (name, transferring, instance) VALUES (\(worker), \(transferring), \(instance))
                ON CONFLICT (name) DO UPDATE SET "heartbeatAt" = now(), transferring = EXCLUDED.transferring,
                    instance = EXCLUDED.instance
                WHERE \(unescaped: Self.nameIsFree(lease: leaseDuration))
                RETURNING name)
            SELECT
                (SELECT count(*) FROM worker WHERE transferring > 0 AND name <> \(worker)
                    AND "heartbeatAt" >= now() - make_interval(secs => \(staleAfter))),
                (SELECT value FROM setting WHERE name = 'manager'),
                EXISTS (SELECT 1 FROM me)
            """
        let (others, text, beat) = try queue.perform { [logger] connection in
            let row = try connection.query(query, logger: logger).blockingGet().first
            return try row?.decode((Int, String?, Bool).self) ?? (0, nil, false)
        }
        guard beat else { throw nameTaken() }
        return FleetPulse(
            otherWorkersTransferring: others, settings: text.flatMap(ManagerSettings.init(storedText:)))
    }

    /// Makes sure no other running `haul serve` uses this worker's name, before this one beats under it: two
    /// processes under one name would share one heartbeat, one count of transfers and one share of each host's
    /// connections. A name whose last beat is older than a lease, or whose process stopped, is free. Otherwise the
    /// holder may have been killed a moment ago (a service manager restarting it): this waits, reading the name's
    /// beat every `poll`, until its lease has passed without a beat (then the name is free) or it beats again (then
    /// it is alive, and this throws, saying to give this worker another name). `waiting` is told once, when there is
    /// something to wait for.
    public func takeName(
        clock: any Clock<Duration> = ContinuousClock(), poll: Duration = .milliseconds(250),
        waiting: (_ beatSecondsAgo: Double) -> Void = { _ in }
    ) async throws(DownloadError) {
        let lease = Self.seconds(leaseDuration)
        let query: PostgresQuery = """
            SELECT "heartbeatAt"::text, extract(epoch FROM now() - "heartbeatAt")::float8 FROM worker
            WHERE name = \(worker) AND instance IS NOT NULL AND instance <> \(instance)
                AND "heartbeatAt" >= now() - make_interval(secs => \(lease))
            """
        var first: String?
        while true {
            let beat = try queue.perform { [logger] connection in
                try connection.query(query, logger: logger).blockingGet().first?.decode((String, Double).self)
            }
            guard let (at, age) = beat else { return }
            if first == nil {
                first = at
                waiting(age)
            } else if at != first {
                throw DownloadError(
                    .locked,
                    "another worker named \(worker) is running (its heartbeat came \(Duration.seconds(age).spoken) ago); give "
                        + "this one another name with --worker NAME")
            }
            do { try await clock.sleep(for: poll) } catch { throw DownloadError(.cancelled, "cancelled") }
        }
    }

    /// Gives up this worker's name as a process stops: a process started next under it need not wait for its lease.
    func leaveName() {
        // Only a worker that beat has a name to leave; and a store that is gone is not waited for (the name is then
        // free once a lease has passed).
        guard hasBeaten.withLock({ $0 }), link.isOpen else { return }
        _ = try? queue.perform { [logger, worker, instance] connection in
            try connection.query(
                "UPDATE worker SET instance = NULL, transferring = 0 WHERE name = \(worker) AND instance = \(instance)",
                logger: logger
            ).blockingGet()
        }
    }

    /// The fleet's workers. One whose last beat is older than this worker's lease is `unresponsive` (the same test
    /// `takeName` makes of a name).
    public func workers() throws(DownloadError) -> [WorkerStatus] {
        let query: PostgresQuery = """
            SELECT worker.name,
                CASE WHEN worker.instance IS NULL THEN 'stopped'
                    WHEN worker."heartbeatAt" < now() - make_interval(secs => \(Self.seconds(leaseDuration)))
                        THEN 'unresponsive'
                    ELSE 'running' END,
                extract(epoch FROM worker."heartbeatAt")::float8,
                COALESCE(array_agg(download.id ORDER BY download.id) FILTER (WHERE download.id IS NOT NULL), '{}')
            FROM worker LEFT JOIN download
                ON download.worker = worker.name AND download.lease IS NOT NULL AND download."leaseExpires" >= now()
            GROUP BY worker.name, worker."heartbeatAt", worker.instance ORDER BY worker.name
            """
        return try queue.perform { [logger] connection in
            try connection.query(query, logger: logger).blockingGet().map { row in
                let (name, state, seconds, downloads) = try row.decode((String, String, Double, [String]).self)
                return WorkerStatus(
                    name: name, state: WorkerStatus.State(rawValue: state) ?? .running,
                    heartbeatAt: Date(timeIntervalSince1970: seconds), downloads: downloads)
            }
        }
    }

    /// Seconds, as PostgreSQL's `make_interval` takes them.
    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

// MARK: Connections to one host across the fleet

extension PostgresStore {
    /// The first key of the advisory locks of hosts' slots ("host" in ASCII); the second is the host's hash.
    static let hostLock: Int32 = 0x686F_7374

    /// Grants this worker slots of connections to each host in `demands`, under each host's advisory lock (workers
    /// take turns per host), and gives up its slots of every other host. A worker keeps the slots it uses, and gets
    /// what it wants of the free ones; while another worker waits for slots of a host, it gets at most its fair share
    /// (the limit split evenly among the workers that want any), so that the others' turn comes as its connections
    /// end. A dead worker's slots count until its lease's length has passed without a renewal.
    ///
    /// When the limit does not split evenly, the slots left over go to some of the workers in turn: the turn changes
    /// with each lease's length of the store's clock, so that a worker left out in one turn has its share in the
    /// next, whatever its name.
    public func hostSlots(_ demands: [String: HostDemand], limit: Int) throws(DownloadError) -> HostGrants {
        try hostSlots(demands, limit: limit, turn: nil)
    }

    /// `hostSlots(_:limit:)` in turn `turn` (nil: the store clock's).
    public func hostSlots(_ demands: [String: HostDemand], limit: Int, turn: Int?) throws(DownloadError) -> HostGrants {
        let duration = Self.seconds(leaseDuration)
        return try queue.perform { [logger, worker] connection in
            var grants = HostGrants(slots: [:], contested: [])
            let turn =
                try turn
                ?? connection.query(
                    "SELECT floor(extract(epoch FROM now()) / \(duration))::bigint", logger: logger
                ).blockingGet().first.map { Int(try $0.decode(Int64.self)) } ?? 0
            // In one order, so that two workers asking for the same hosts never wait for each other's locks.
            for (host, demand) in demands.sorted(by: { $0.key < $1.key }) {
                try connection.query(
                    "SELECT pg_advisory_xact_lock(\(Self.hostLock), hashtext(\(host)))", logger: logger
                ).blockingGet()
                let others = try connection.query(
                    """
                    SELECT worker, slots, wanted FROM host_slot
                    WHERE host = \(host) AND worker <> \(worker) AND expires >= now()
                    """, logger: logger
                ).blockingGet().map { try $0.decode((String, Int, Int).self) }
                let held = others.reduce(0) { $0 + $1.1 }
                let contested = others.contains { $0.2 > $0.1 }
                // The fair share: the limit split among the workers that want slots, the remainder to the workers
                // whose turn it is.
                let wanting = (others.filter { $0.2 > 0 }.map(\.0) + [worker]).sorted()
                let rank =
                    ((wanting.firstIndex(of: worker) ?? 0) - turn % wanting.count + wanting.count) % wanting.count
                let fair = limit / wanting.count + (rank < limit % wanting.count ? 1 : 0)
                let target = contested ? min(demand.wanted, fair) : demand.wanted
                let slots = max(demand.inUse, min(target, max(0, limit - held)))
                if slots == 0 && demand.wanted == 0 {
                    try connection.query(
                        "DELETE FROM host_slot WHERE host = \(host) AND worker = \(worker)", logger: logger
                    ).blockingGet()
                } else {
                    try connection.query(
                        """
                        INSERT INTO host_slot (host, worker, slots, wanted, expires)
                        VALUES (\(host), \(worker), \(slots), \(demand.wanted), now() + make_interval(secs => \(duration)))
                        ON CONFLICT (host, worker) DO UPDATE
                        SET slots = EXCLUDED.slots, wanted = EXCLUDED.wanted, expires = EXCLUDED.expires
                        """, logger: logger
                    ).blockingGet()
                }
                grants.slots[host] = slots
                if contested { grants.contested.insert(host) }
            }
            let hosts = Array(demands.keys)
            try connection.query(
                "DELETE FROM host_slot WHERE worker = \(worker) AND NOT (host = ANY(\(hosts)))", logger: logger
            ).blockingGet()
            return grants
        }
    }
}
