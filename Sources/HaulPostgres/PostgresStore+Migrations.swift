import Foundation
import Haul
import HaulCore
import Logging
import PostgresNIO

/// The schema of a shared store: its migrations, applied in order under an advisory lock when a worker opens it.
extension PostgresStore {
    // MARK: Schema

    /// The key of the advisory lock the schema's migrations run under ("haul" in ASCII).
    static let migrationLock: Int64 = 0x6861_756C

    /// The schema's history; append-only, never edited once shipped. Each runs in its own transaction.
    static let migrations: [(version: Int, name: String, statements: [String])] = [
        (
            1, "downloads, runs, settings",
            [
                // The record's columns but those later migrations add (as they add them, to stores made before).
                "CREATE TABLE download ("
                    + DownloadRecord.columnNames.filter { !["notice", "handOver"].contains($0) }.map { name in
                        "\"\(name)\" \(columnKinds[name]!.sqlType)" + (name == "id" ? " PRIMARY KEY" : "")
                    }.joined(separator: ", ") + ")",
                "CREATE INDEX download_queue ON download (priority DESC, \"queuePosition\") WHERE state = 'queued'",
                "CREATE INDEX download_on_destination ON download (destination) WHERE destination IS NOT NULL",
                "CREATE TABLE run (id BIGSERIAL PRIMARY KEY, \"startedAt\" TIMESTAMPTZ NOT NULL DEFAULT now())",
                "CREATE TABLE setting (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
            ]
        ),
        (
            2, "workers and leases",
            [
                // The worker that holds a download, its lease's number (from one sequence: a later lease always has a
                // higher number, which is what fences the earlier holder's writes) and when the lease expires.
                "ALTER TABLE download ADD COLUMN worker TEXT, ADD COLUMN lease BIGINT, "
                    + "ADD COLUMN \"leaseExpires\" TIMESTAMPTZ",
                "CREATE SEQUENCE lease_number",
                "DROP INDEX download_queue",
                "CREATE INDEX download_claimable ON download (priority DESC, \"queuePosition\") "
                    + "WHERE state IN ('queued', 'running', 'waitingForNetwork')",
            ]
        ),
        (
            3, "changes",
            [
                // The transaction that last changed the row (its record, or who holds it; not a lease's renewal):
                // `changes()` reads the rows changed by transactions that had not ended when it last read, so a row
                // committed late by a transaction that began early is not missed.
                "ALTER TABLE download ADD COLUMN \"changedIn\" BIGINT NOT NULL DEFAULT 0",
                """
                CREATE FUNCTION download_changed() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF TG_OP = 'INSERT' THEN
                        NEW."changedIn" := pg_current_xact_id()::text::bigint;
                    ELSIF NEW."updatedAt" IS DISTINCT FROM OLD."updatedAt" OR NEW.worker IS DISTINCT FROM OLD.worker
                        OR NEW.state IS DISTINCT FROM OLD.state THEN
                        NEW."changedIn" := pg_current_xact_id()::text::bigint;
                    END IF;
                    RETURN NEW;
                END $$
                """,
                "CREATE TRIGGER download_changed BEFORE INSERT OR UPDATE ON download "
                    + "FOR EACH ROW EXECUTE FUNCTION download_changed()",
                "CREATE INDEX download_changes ON download (\"changedIn\")",
            ]
        ),
        (
            4, "workers",
            [
                // Each worker's heartbeat: `GET /api/v1/workers` and `haul workers` show the fleet from it.
                "CREATE TABLE worker (name TEXT PRIMARY KEY, \"startedAt\" TIMESTAMPTZ NOT NULL DEFAULT now(), "
                    + "\"heartbeatAt\" TIMESTAMPTZ NOT NULL DEFAULT now())",
                "CREATE INDEX download_by_worker ON download (worker) WHERE lease IS NOT NULL",
            ]
        ),
        (
            5, "queries of a queue larger than memory",
            [
                // Pages in queue order, of all downloads and of each state (`PostgresStore+Queries`).
                "CREATE INDEX download_order ON download ((-priority), \"queuePosition\", id COLLATE \"C\")",
                "CREATE INDEX download_state_order ON download "
                    + "(state, (-priority), \"queuePosition\", id COLLATE \"C\")",
                "CREATE INDEX download_position ON download (\"queuePosition\")",
                // An add's lookup of the same URL and a destination's claim: hash indexes, which take keys of any
                // length (a B-tree refuses a row whose key is over about 2,700 bytes, and URLs and paths can be).
                "CREATE INDEX download_by_url ON download USING hash (url)",
                "DROP INDEX download_on_destination",
                "CREATE INDEX download_on_destination ON download USING hash (destination) "
                    + "WHERE destination IS NOT NULL",
                // The queued downloads that wait for given ones: `dependents(of:)`, when those fail.
                "CREATE INDEX download_waiting ON download USING gin ((prerequisites::jsonb)) "
                    + "WHERE state = 'queued' AND prerequisites <> '[]'",
                // The part file a lease writes, and the worker that wrote it: where a takeover finds the bytes.
                "ALTER TABLE download ADD COLUMN \"partWorker\" TEXT, ADD COLUMN \"partPath\" TEXT",
                // How many downloads each worker transfers (its pulse): the fleet's rate limit is shared among the
                // workers that transfer.
                "ALTER TABLE worker ADD COLUMN transferring INTEGER NOT NULL DEFAULT 0",
            ]
        ),
        (
            6, "connections to one host across the fleet",
            [
                // The slots of connections to a host each worker holds (`hostSlots`): together at most the limit.
                "CREATE TABLE host_slot (host TEXT NOT NULL, worker TEXT NOT NULL, slots INTEGER NOT NULL, "
                    + "wanted INTEGER NOT NULL, expires TIMESTAMPTZ NOT NULL, PRIMARY KEY (host, worker))",
                "CREATE INDEX host_slot_by_worker ON host_slot (worker)",
                // A download found by its brief id (aria2's gid), as `DownloadID.brief` computes it.
                """
                CREATE FUNCTION haul_brief_id(id TEXT) RETURNS TEXT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
                    SELECT CASE
                        WHEN length(hex) = 32 THEN
                            CASE WHEN substr(hex, 13, 1) = '7' THEN right(hex, 16) ELSE left(hex, 16) END
                        WHEN length(hex) >= 16 THEN left(hex, 16)
                        ELSE left(encode(sha256(convert_to(id, 'UTF8')), 'hex'), 16)
                    END
                    FROM (SELECT regexp_replace(lower(id), '[^0-9a-f]', '', 'g') AS hex) AS digits
                $$
                """,
                "CREATE INDEX download_by_brief_id ON download ((\(briefID)))",
            ]
        ),
        (
            7, "the fleet's events",
            [
                // Every change of a download (its record, or who holds it; not a lease's renewal), numbered: the
                // transaction that made it, then a number from a sequence. Every worker reads them in that order and
                // only once every transaction before them has ended (`events(after:limit:)`), so each event's id is
                // the same on every worker, and a client that reconnects to any worker with the last id it saw
                // misses nothing.
                "CREATE SEQUENCE event_number",
                """
                CREATE TABLE event ("transaction" BIGINT NOT NULL, number BIGINT NOT NULL, kind TEXT NOT NULL, \
                download TEXT NOT NULL, at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY ("transaction", number))
                """,
                "CREATE INDEX event_at ON event (at)",
                """
                CREATE FUNCTION download_event() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    INSERT INTO event ("transaction", number, kind, download) VALUES (
                        pg_current_xact_id()::text::bigint, nextval('event_number'),
                        CASE TG_OP WHEN 'INSERT' THEN 'added' WHEN 'DELETE' THEN 'removed' ELSE 'changed' END,
                        CASE TG_OP WHEN 'DELETE' THEN OLD.id ELSE NEW.id END);
                    RETURN NULL;
                END $$
                """,
                "CREATE TRIGGER download_added AFTER INSERT ON download FOR EACH ROW EXECUTE FUNCTION download_event()",
                // What the events replace: each row's last changing transaction, which a feed of rows read.
                "DROP TRIGGER download_changed ON download",
                "DROP FUNCTION download_changed()",
                "ALTER TABLE download DROP COLUMN \"changedIn\"",
                """
                CREATE TRIGGER download_event AFTER UPDATE ON download FOR EACH ROW \
                WHEN (NEW."updatedAt" IS DISTINCT FROM OLD."updatedAt" OR NEW.worker IS DISTINCT FROM OLD.worker \
                OR NEW.state IS DISTINCT FROM OLD.state) EXECUTE FUNCTION download_event()
                """,
                """
                CREATE TRIGGER download_removed AFTER DELETE ON download FOR EACH ROW \
                EXECUTE FUNCTION download_event()
                """,
            ]
        ),
        (
            8, "each download's count of leases",
            [
                // How many leases a download has had (`claim`): a download on its first lease has no part file of an
                // earlier one to look for, so its worker lists no folder when it finishes. Downloads stored before
                // count as leased once already, since their earlier leases may have left part files.
                "ALTER TABLE download ADD COLUMN leases INTEGER NOT NULL DEFAULT 1",
                "ALTER TABLE download ALTER COLUMN leases SET DEFAULT 0",
            ]
        ),
        (
            9, "notices",
            [
                // The notice of a download's end that a hook or webhook has yet to hear, as JSON (`PendingNotice`).
                "ALTER TABLE download ADD COLUMN notice TEXT",
                "CREATE INDEX download_notice ON download (id) WHERE notice IS NOT NULL",
            ]
        ),
        (
            10, "the process behind each worker's name",
            [
                // The `haul serve` that beats under the name now (a random id each start), NULL once it stopped:
                // a second process given a name in use waits to see whether its holder is alive (`takeName`).
                "ALTER TABLE worker ADD COLUMN instance TEXT"
            ]
        ),
        (
            11, "files handed over",
            [
                // Which part files are the user's (`DownloadRecord.handOver`). A shared store takes no `-c`, so its
                // rows leave it NULL; the column is there for the record's one shape.
                "ALTER TABLE download ADD COLUMN \"handOver\" BIGINT"
            ]
        ),
    ]

    /// Applies the migrations the database lacks, holding the advisory lock on `connection` meanwhile.
    static func migrate(on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("SELECT pg_advisory_lock(\(migrationLock))", logger: logger)
        do {
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS haul_schema (
                    version INTEGER PRIMARY KEY, name TEXT NOT NULL, "appliedAt" TIMESTAMPTZ NOT NULL DEFAULT now())
                """, logger: logger)
            var applied = Set<Int>()
            for try await version in try await connection.query("SELECT version FROM haul_schema", logger: logger)
                .decode(Int.self)
            {
                applied.insert(version)
            }
            for migration in migrations where !applied.contains(migration.version) {
                try await connection.query("BEGIN", logger: logger)
                do {
                    for statement in migration.statements {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                    }
                    try await connection.query(
                        "INSERT INTO haul_schema (version, name) VALUES (\(migration.version), \(migration.name))",
                        logger: logger)
                    try await connection.query("COMMIT", logger: logger)
                } catch {
                    _ = try? await connection.query("ROLLBACK", logger: logger)
                    throw error
                }
            }
        } catch {
            _ = try? await connection.query("SELECT pg_advisory_unlock(\(migrationLock))", logger: logger)
            throw error
        }
        try await connection.query("SELECT pg_advisory_unlock(\(migrationLock))", logger: logger)
    }

    /// A download's brief id in SQL, as the index of migration 6 has it (a query must say it the same way to use
    /// that index). Every row's index entry is made again on each change of the row: a time-ordered UUID (as
    /// Haul's ids are) takes a few string operations, the general function only any other id.
    static let briefID = """
        CASE WHEN length(id) = 36 AND substr(id, 15, 1) = '7' AND substr(id, 9, 1) = '-' AND substr(id, 14, 1) = '-' \
        AND substr(id, 19, 1) = '-' AND substr(id, 24, 1) = '-' THEN lower(substr(id, 20, 4) || substr(id, 25, 12)) \
        ELSE haul_brief_id(id) END
        """

    /// The versions of the migrations applied, in order.
    public func appliedMigrations() throws(DownloadError) -> [Int] {
        try queue.perform { [logger] connection in
            try connection.query("SELECT version FROM haul_schema ORDER BY version", logger: logger).blockingGet().map {
                try $0.decode(Int.self)
            }
        }
    }
}
