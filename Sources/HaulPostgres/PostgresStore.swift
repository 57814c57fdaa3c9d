import Foundation
import GRDB
import Haul
import HaulCore
import Logging
import PostgresNIO
import Synchronization

/// The downloads of several workers in one PostgreSQL database: the same rows as the SQLite store (`DownloadStore`),
/// with the same record mapping (`DownloadRecord.columnValues()` and GRDB's decoding of a row), so one download reads
/// back the same from either.
///
/// Opening it checks that the server answers (its error names the host and never the password), then brings the
/// schema up to date under an advisory lock: workers starting at the same moment take turns, and each migration runs
/// once (`migrations`, append-only, recorded in `haul_schema`).
///
/// Writes go through the same queue as the SQLite store's (`CommitQueue`): in the order they were asked for, a group
/// in one transaction on the store's own connection, a write no one waits for committed without waiting for the
/// server's disk (`synchronous_commit = off`), one someone waits for durable. The queue's callers block for what they
/// wait for, as with SQLite; the connection's work runs on NIO's threads, never on the threads that wait.
public final class PostgresStore: LeasingStore {
    public let location: PostgresLocation
    public let worker: String
    public let leaseDuration: Duration
    /// This process's own id beside its name in the fleet's list of workers (`takeName`).
    let instance = UUID().uuidString
    /// Whether this process has beaten under the name (it serves as a worker, not as `haul ls --store`).
    let hasBeaten = Mutex(false)
    let link: PostgresLink
    /// A second connection, for reads that scan much of the table and need no order with the writes (`counts`): on
    /// the writes' connection, a count of a million rows held every write back for a tenth of a second.
    let scans: PostgresLink
    let queue: CommitQueue<PostgresConnection>
    let logger: Logger
    /// The leases this worker holds, by download: every write of one of these is fenced by its lease.
    let held = Mutex<[String: Int64]>([:])
    /// The downloads this worker holds under a lease that is not their first (`followsEarlierLeases`).
    let laterLeases = Mutex<Set<String>>([])
    /// The leases this worker lost, by download (until it claims the download again).
    let lostLeases = Mutex<[String: Int64]>([:])
    let lostLeaseHandler = Mutex<(@Sendable (String) -> Void)?>(nil)
    /// What listens for commands from other workers (`onCommand`).
    let listener = Mutex<Task<Void, Never>?>(nil)

    private init(
        location: PostgresLocation, worker: String, lease: Duration, link: PostgresLink, scans: PostgresLink,
        logger: Logger
    ) {
        self.location = location
        self.worker = worker
        leaseDuration = lease
        self.link = link
        self.scans = scans
        self.logger = logger
        queue = CommitQueue(
            transact: { durable, body in
                // BEGIN finds a broken connection before anything of the group ran: the group runs on a new one.
                let connection = try link.run { connection in
                    try connection.query("BEGIN", logger: logger).blockingGet()
                    return connection
                }
                do {
                    if !durable {
                        try connection.query("SET LOCAL synchronous_commit = off", logger: logger).blockingGet()
                    }
                    try body(connection)
                    try connection.query("COMMIT", logger: logger).blockingGet()
                } catch {
                    if PostgresLink.isBroken(error) {
                        // Gone quiet or gone: closed, so that the next group makes a new connection at once.
                        let _: EventLoopFuture<Void> = connection.close()
                    } else {
                        _ = try? connection.query("ROLLBACK", logger: logger).blockingGet()
                    }
                    throw error
                }
            },
            describe: { error in
                if let error = error as? DownloadError { return error }
                return PostgresStore.describe(error, at: location, doing: "cannot write to the store at")
            })
    }

    /// The name a worker has unless it is given one: the host's.
    public static var defaultWorkerName: String { ProcessInfo.processInfo.hostName }

    /// Connects to the store at `location` as `worker`, whose leases last `lease` unless renewed, and migrates the
    /// schema; the error says where it failed and why. Any number of workers may open one store: each runs only the
    /// downloads it claims.
    public static func open(
        _ location: PostgresLocation, worker: String = defaultWorkerName, lease: Duration = .seconds(15),
        logger: Logger = Logger(label: "haul.store")
    ) async throws(DownloadError) -> PostgresStore {
        do {
            let connection = try await PostgresConnection.connect(
                on: StoreLoop.group.next(), configuration: try location.connectionConfiguration(), id: 0,
                logger: logger
            ).get()
            do { try await migrate(on: connection, logger: logger) } catch {
                try? await connection.close()
                throw error
            }
            let link = PostgresLink(connection, location: location, logger: logger)
            let scanning: PostgresConnection
            do {
                scanning = try await PostgresConnection.connect(
                    on: StoreLoop.group.next(), configuration: try location.connectionConfiguration(), id: 1,
                    logger: logger
                ).get()
            } catch {
                await link.close()
                throw error
            }
            return PostgresStore(
                location: location, worker: worker, lease: lease, link: link,
                scans: PostgresLink(scanning, location: location, logger: logger), logger: logger)
        } catch let error as DownloadError {
            throw error
        } catch {
            throw describe(error, at: location, doing: "cannot open the store at")
        }
    }

    /// Commits what is queued and closes the connection.
    public func close() async {
        leaveName()
        if let listening = listener.withLock({ $0.take() }) {
            listening.cancel()
            await listening.value
        }
        queue.waitUntilIdle()
        await link.close()
        await scans.close()
    }

    // MARK: Downloads

    /// How each of the record's columns is kept: the record's values are SQLite's (`DatabaseValue`), turned into
    /// PostgreSQL's types here and back on reading.
    enum ColumnKind {
        case text, integer, real, boolean

        var sqlType: String {
            switch self {
            case .text: "TEXT"
            case .integer: "BIGINT"
            case .real: "DOUBLE PRECISION"
            case .boolean: "BOOLEAN"
            }
        }
    }

    static let columnKinds: [String: ColumnKind] = {
        let booleans: Set = ["isLastModifiedStrong", "isResumable", "isPartVerified", "mayReplaceDestination"]
        let integers: Set = [
            "totalLength", "durableOffset", "attempts", "priority", "rateLimit", "activeConnections", "errorStatus",
            "folderDevice", "folderInode", "partDevice", "partInode", "handOver",
        ]
        let reals: Set = ["queuePosition", "createdAt", "updatedAt", "completedAt"]
        var kinds: [String: ColumnKind] = [:]
        for name in DownloadRecord.columnNames {
            kinds[name] =
                booleans.contains(name)
                ? .boolean : integers.contains(name) ? .integer : reals.contains(name) ? .real : .text
        }
        return kinds
    }()

    static let quotedColumns = DownloadRecord.columnNames.map { "\"\($0)\"" }.joined(separator: ", ")
    static let qualifiedColumns = DownloadRecord.columnNames.map { "download.\"\($0)\"" }.joined(separator: ", ")
    /// What a read of a download selects: its columns, and the worker that holds a live lease of it
    /// (`DownloadRecord.worker`; nil while none does).
    static let readColumns =
        quotedColumns + ", CASE WHEN lease IS NOT NULL AND \"leaseExpires\" >= now() THEN worker END AS worker"
    static let qualifiedReadColumns =
        qualifiedColumns
        + ", CASE WHEN download.lease IS NOT NULL AND download.\"leaseExpires\" >= now() THEN download.worker END AS worker"

    public func save(_ record: DownloadRecord) throws(DownloadError) { try save([record]) }

    public func save(_ records: [DownloadRecord]) throws(DownloadError) {
        guard !records.isEmpty else { return }
        let now = Date()
        let writes = try fencedUpserts(
            records.map {
                var record = $0
                record.updatedAt = now
                return record
            })
        try queue.perform { connection in try self.run(writes, on: connection) }
    }

    public func insert(_ records: [DownloadRecord], saving changed: [DownloadRecord] = []) throws(DownloadError) {
        let work = try writes(inserting: records, saving: changed)
        try queue.perform(work)
    }

    public func submitInsert(_ records: [DownloadRecord], saving changed: [DownloadRecord] = []) -> StoreCommit {
        do {
            let work = try writes(inserting: records, saving: changed)
            return StoreCommit(ticket: queue.submit(awaited: true, startsAtOnce: true, work))
        } catch {
            // Nothing to write: the write fails with the encoding's error, for whoever waits for it.
            return StoreCommit(ticket: queue.submit(awaited: true, startsAtOnce: true) { _ in throw error })
        }
    }

    /// What inserting `records` and saving `changed` writes, in one transaction.
    func writes(inserting records: [DownloadRecord], saving changed: [DownloadRecord]) throws(DownloadError)
        -> @Sendable (PostgresConnection) throws -> Void
    {
        let now = Date()
        let stamped = changed.map {
            var record = $0
            record.updatedAt = now
            return record
        }
        let inserts = try Self.upserts(records, replacing: false)
        let saves = try fencedUpserts(stamped)
        return { [logger] connection in
            for query in inserts { try connection.query(query, logger: logger).blockingGet() }
            try self.run(saves, on: connection)
        }
    }

    public func submit(_ update: DownloadStore.RowUpdate, awaited: Bool) -> StoreCommit {
        let write: FencedWrite
        do {
            let fence = fence(of: update.id)
            write = FencedWrite(
                id: update.id, fence: fence, query: try Self.query(for: update, fence: fence, worker: worker))
        } catch {
            return StoreCommit(ticket: queue.submit(awaited: awaited) { _ in throw error })
        }
        return StoreCommit(
            ticket: queue.submit(awaited: awaited, startsAtOnce: true) { connection in
                try self.run([write], on: connection)
            })
    }

    public func committed(_ commit: StoreCommit) async throws(DownloadError) {
        if let failure = await queue.completion(of: commit.ticket) { throw failure }
    }

    public func onLostWrite(_ handler: @escaping @Sendable (DownloadError) -> Void) { queue.onLostWrite(handler) }

    public func flush() { queue.waitUntilIdle() }

    /// The record with `id`.
    public func record(id: String) throws(DownloadError) -> DownloadRecord? {
        try records("SELECT \(Self.readColumns) FROM download WHERE id = $1", [id]).first
    }

    public func record(brief: String) throws(DownloadError) -> DownloadRecord? {
        try records("SELECT \(Self.readColumns) FROM download WHERE \(Self.briefID) = $1 LIMIT 1", [brief]).first
    }

    public func allRecords() throws(DownloadError) -> [DownloadRecord] {
        try records("SELECT \(Self.readColumns) FROM download ORDER BY \"createdAt\", id", [])
    }

    /// Deletes the row unless another worker holds it.
    public func delete(id: String) throws(DownloadError) {
        var bindings = PostgresBindings(capacity: 2)
        bindings.append(id)
        let sql = "DELETE FROM download WHERE id = $1 AND " + fence(of: id).condition(into: &bindings)
        let query = PostgresQuery(unsafeSQL: sql, binds: bindings)
        try queue.perform { [logger] connection in
            guard try connection.query(query, logger: logger).blockingGet().metadata.rows == 0 else { return }
            guard try connection.query("SELECT 1 FROM download WHERE id = \(id)", logger: logger).blockingGet().isEmpty
            else {
                throw DownloadError(
                    .locked, "download \(id) is running on another worker; it cannot be removed meanwhile")
            }
        }
        held.withLock { $0[id] = nil }
        laterLeases.withLock { _ = $0.remove(id) }
    }

    // MARK: Runs and settings

    public func beginRun() throws(DownloadError) -> Int64 {
        try queue.perform { [logger] connection in
            let rows = try connection.query("INSERT INTO run DEFAULT VALUES RETURNING id", logger: logger).blockingGet()
            guard let id = try rows.first?.decode(Int64.self) else {
                throw DownloadError(.store, "the store recorded no run")
            }
            return id
        }
    }

    public func settings() throws(DownloadError) -> ManagerSettings? {
        let text: String? = try queue.perform { [logger] connection in
            try connection.query("SELECT value FROM setting WHERE name = 'manager'", logger: logger).blockingGet()
                .first?
                .decode(String.self)
        }
        return text.flatMap(ManagerSettings.init(storedText:))
    }

    /// The fleet's API token: one secret in the store that every worker reads, so one token works with any of them.
    /// The first worker that asks makes it (32 random bytes, in hex).
    public func fleetToken() throws(DownloadError) -> String {
        var generator = SystemRandomNumberGenerator()
        let fresh = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
        let token: String? = try queue.perform { [logger] connection in
            try connection.query(
                "INSERT INTO setting (name, value) VALUES ('token', \(fresh)) ON CONFLICT (name) DO NOTHING",
                logger: logger
            ).blockingGet()
            return try connection.query("SELECT value FROM setting WHERE name = 'token'", logger: logger)
                .blockingGet().first?.decode(String.self)
        }
        guard let token, !token.isEmpty else { throw DownloadError(.store, "the store holds no fleet token") }
        return token
    }

    public func saveSettings(_ settings: ManagerSettings) throws(DownloadError) {
        let text = try settings.storedText()
        try queue.perform { [logger] connection in
            try connection.query(
                """
                INSERT INTO setting (name, value) VALUES ('manager', \(text))
                ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value
                """, logger: logger
            ).blockingGet()
        }
    }

    // MARK: Mapping

    /// One INSERT a record (`replacing`: or an update of every column when its id is there).
    /// With `fence`, an existing row is replaced only as the fence allows.
    static func upserts(_ records: [DownloadRecord], replacing: Bool, fence: Fence? = nil) throws(DownloadError)
        -> [PostgresQuery]
    {
        let names = DownloadRecord.columnNames
        let placeholders = (1...names.count).map { "$\($0)" }.joined(separator: ", ")
        var sql = "INSERT INTO download (\(quotedColumns)) VALUES (\(placeholders))"
        if replacing {
            sql +=
                " ON CONFLICT (id) DO UPDATE SET "
                + names.dropFirst().map { "\"\($0)\" = EXCLUDED.\"\($0)\"" }.joined(separator: ", ")
        }
        var queries: [PostgresQuery] = []
        for record in records {
            var bindings = PostgresBindings(capacity: names.count + 1)
            let values: [DatabaseValue]
            do { values = try record.columnValues() } catch {
                throw DownloadError(.store, "cannot encode download \(record.id): \(error)", underlying: error)
            }
            for (name, value) in zip(names, values) { try bind(value, as: columnKinds[name] ?? .text, into: &bindings) }
            var fenced = sql
            if replacing, let fence { fenced += " WHERE " + fence.condition(into: &bindings) }
            queries.append(PostgresQuery(unsafeSQL: fenced, binds: bindings))
        }
        return queries
    }

    /// The UPDATE of one of the store's row updates: the columns it names, and `updatedAt`; with `fence`, only as the
    /// fence allows. An update of a lease holder's part file (`worker`'s) also records which worker holds it, and
    /// where: `partWorker` and `partPath` (the lease's own part file beside the destination).
    static func query(for update: DownloadStore.RowUpdate, fence: Fence? = nil, worker: String? = nil)
        throws(DownloadError) -> PostgresQuery
    {
        var bindings = PostgresBindings(capacity: update.values.count + 4)
        var sets: [String] = []
        var destination: String?
        var hasPart = false
        for (column, value) in zip(update.columns, update.values) {
            try bind(value, as: columnKinds[column] ?? .text, into: &bindings)
            sets.append("\"\(column)\" = $\(bindings.count)")
            if column == "destination" { destination = String.fromDatabaseValue(value) }
            if column == "partInode" { hasPart = !value.isNull }
        }
        if update.columns.contains("partInode"), case .lease(let lease) = fence, let worker {
            if hasPart, let destination {
                bindings.append(worker)
                sets.append("\"partWorker\" = $\(bindings.count)")
                bindings.append(destination + ".lease\(lease).part")
                sets.append("\"partPath\" = $\(bindings.count)")
            } else {
                sets.append("\"partWorker\" = NULL, \"partPath\" = NULL")
            }
        } else if update.columns.contains("completedAt") {
            // Finished: the part file is the file now, under its final name.
            sets.append("\"partWorker\" = NULL, \"partPath\" = NULL")
        }
        bindings.append(Date().timeIntervalSince1970)
        sets.append("\"updatedAt\" = $\(bindings.count)")
        bindings.append(update.id)
        var sql = "UPDATE download SET \(sets.joined(separator: ", ")) WHERE id = $\(bindings.count)"
        if let fence { sql += " AND " + fence.condition(into: &bindings) }
        return PostgresQuery(unsafeSQL: sql, binds: bindings)
    }

    static func bind(_ value: DatabaseValue, as kind: ColumnKind, into bindings: inout PostgresBindings)
        throws(DownloadError)
    {
        switch (value.storage, kind) {
        case (.null, _): bindings.appendNull()
        case (.int64(let number), .boolean): bindings.append(number != 0)
        case (.int64(let number), .real): bindings.append(Double(number))
        case (.int64(let number), .text): bindings.append(String(number))
        case (.int64(let number), .integer): bindings.append(number)
        case (.double(let number), .integer): bindings.append(Int64(number))
        case (.double(let number), .text): bindings.append(String(number))
        case (.double(let number), _): bindings.append(number)
        case (.string(let text), _): bindings.append(text)
        case (.blob, _): throw DownloadError(.store, "a download column holds bytes, which the store does not keep")
        }
    }

    /// A row whose first cell is a `Leading` and whose others are the record's columns.
    static func databaseRow<Leading: PostgresDecodable>(_ row: PostgresRow, after: Leading.Type) throws -> (
        Leading, Row
    ) {
        var cells = row.makeIterator()
        guard let first = cells.next() else { throw DownloadError(.store, "the store answered an empty row") }
        return (try first.decode(Leading.self), try databaseRow(IteratorSequence(cells)))
    }

    /// A row as GRDB's `Row`, for the record's own decoding.
    static func databaseRow<Cells: Sequence<PostgresCell>>(_ row: Cells) throws -> Row {
        var values: [String: DatabaseValue] = [:]
        for cell in row {
            guard cell.bytes != nil else {
                values[cell.columnName] = .null
                continue
            }
            switch cell.dataType {
            case .bool: values[cell.columnName] = (try cell.decode(Bool.self) ? 1 : 0).databaseValue
            case .int2, .int4, .int8: values[cell.columnName] = try cell.decode(Int64.self).databaseValue
            case .float4, .float8: values[cell.columnName] = try cell.decode(Double.self).databaseValue
            default: values[cell.columnName] = try cell.decode(String.self).databaseValue
            }
        }
        return Row(values)
    }

    func records(_ sql: String, _ arguments: [String]) throws(DownloadError) -> [DownloadRecord] {
        var bindings = PostgresBindings(capacity: arguments.count)
        for argument in arguments { bindings.append(argument) }
        return try records(PostgresQuery(unsafeSQL: sql, binds: bindings))
    }

    // MARK: Errors

    /// What went wrong, with the store's place (host, port, database) and never its password: postgres-nio's own
    /// descriptions are generic, the server's message is not secret, and the network's error says why it failed.
    static func describe(_ error: any Error, at location: PostgresLocation, doing what: String) -> DownloadError {
        let cause: String
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] {
                cause = message
            } else if let underlying = error.underlying {
                cause = "\(underlying)"
            } else {
                cause = "\(error.code)"
            }
        } else {
            cause = "\(error)"
        }
        // The underlying error is not kept: nothing reachable from the error may hold the password.
        var shown = cause
        if let password = location.password, !password.isEmpty {
            shown = shown.replacingOccurrences(of: password, with: "***")
        }
        return DownloadError(.store, "\(what) \(location.place): \(shown)")
    }
}
