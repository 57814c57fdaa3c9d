import Foundation
import GRDB
import Haul
import HaulCore
import Logging
import PostgresNIO

/// The downloads of several workers in one PostgreSQL database, through postgres-nio's pooled client: the same rows as
/// the SQLite store (`DownloadStore`), the same record mapping (`DownloadRecord.columnValues()` and GRDB's decoding
/// of a row), so one download reads back the same from either.
///
/// Opening it checks that the server answers (one connection, whose error names the host and never the password),
/// then brings the schema up to date under an advisory lock: workers starting at the same moment take turns, and
/// each migration runs once (`migrations`, append-only, recorded in `haul_schema`).
public final class PostgresStore: Sendable {
    public let location: PostgresLocation
    let client: PostgresClient
    let running: Task<Void, Never>
    let logger: Logger

    private init(location: PostgresLocation, client: PostgresClient, running: Task<Void, Never>, logger: Logger) {
        self.location = location
        self.client = client
        self.running = running
        self.logger = logger
    }

    /// Connects to the store at `location` and migrates its schema; the error says where it failed and why.
    public static func open(_ location: PostgresLocation, logger: Logger = Logger(label: "haul.store"))
        async throws(DownloadError) -> PostgresStore
    {
        do {
            let connection = try await PostgresConnection.connect(
                configuration: PostgresConnection.Configuration(
                    host: location.host, port: location.port, username: location.username,
                    password: location.password, database: location.database, tls: try location.connectionTLS()),
                id: 0, logger: logger)
            do {
                try await migrate(on: connection, logger: logger)
                try await connection.close()
            } catch {
                try? await connection.close()
                throw error
            }
        } catch {
            throw describe(error, at: location, doing: "cannot open the store at")
        }
        var configuration = PostgresClient.Configuration(
            host: location.host, port: location.port, username: location.username, password: location.password,
            database: location.database, tls: location.clientTLS)
        configuration.options.maximumConnections = 8
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        let running = Task { await client.run() }
        return PostgresStore(location: location, client: client, running: running, logger: logger)
    }

    /// Closes the pool's connections.
    public func close() async {
        running.cancel()
        await running.value
    }

    // MARK: Schema

    /// The key of the advisory lock the schema's migrations run under ("haul" in ASCII).
    static let migrationLock: Int64 = 0x6861_756C

    /// The schema's history; append-only, never edited once shipped. Each runs in its own transaction.
    static let migrations: [(version: Int, name: String, statements: [String])] = [
        (
            1, "downloads, runs, settings",
            [
                "CREATE TABLE download ("
                    + DownloadRecord.columnNames.map { name in
                        "\"\(name)\" \(columnKinds[name]!.sqlType)" + (name == "id" ? " PRIMARY KEY" : "")
                    }.joined(separator: ", ") + ")",
                "CREATE INDEX download_queue ON download (priority DESC, \"queuePosition\") WHERE state = 'queued'",
                "CREATE INDEX download_on_destination ON download (destination) WHERE destination IS NOT NULL",
                "CREATE TABLE run (id BIGSERIAL PRIMARY KEY, \"startedAt\" TIMESTAMPTZ NOT NULL DEFAULT now())",
                "CREATE TABLE setting (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
            ]
        )
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

    /// The versions of the migrations applied, in order.
    public func appliedMigrations() async throws(DownloadError) -> [Int] {
        try await run("read the schema's versions") { client, logger in
            var versions: [Int] = []
            for try await version in try await client.query(
                "SELECT version FROM haul_schema ORDER BY version", logger: logger
            ).decode(Int.self) {
                versions.append(version)
            }
            return versions
        }
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
            "folderDevice", "folderInode", "partDevice", "partInode",
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

    /// Inserts new records, all or none.
    public func insert(_ records: [DownloadRecord]) async throws(DownloadError) {
        guard !records.isEmpty else { return }
        let queries = try Self.upserts(records, replacing: false)
        try await run("add \(records.count) downloads") { client, logger in
            try await client.withTransaction(logger: logger) { connection in
                for query in queries { try await connection.query(query, logger: logger) }
            }
        }
    }

    /// Inserts or replaces a record, stamping `updatedAt`.
    public func save(_ record: DownloadRecord) async throws(DownloadError) {
        var record = record
        record.updatedAt = Date()
        let queries = try Self.upserts([record], replacing: true)
        try await run("save download \(record.id)") { client, logger in
            for query in queries { try await client.query(query, logger: logger) }
        }
    }

    /// Writes one of the store's row updates (the columns it names, and `updatedAt`).
    public func update(_ update: DownloadStore.RowUpdate) async throws(DownloadError) {
        var bindings = PostgresBindings(capacity: update.values.count + 2)
        var sets: [String] = []
        for (column, value) in zip(update.columns, update.values) {
            try Self.bind(value, as: Self.columnKinds[column] ?? .text, into: &bindings)
            sets.append("\"\(column)\" = $\(bindings.count)")
        }
        bindings.append(Date().timeIntervalSince1970)
        sets.append("\"updatedAt\" = $\(bindings.count)")
        bindings.append(update.id)
        let query = PostgresQuery(
            unsafeSQL: "UPDATE download SET \(sets.joined(separator: ", ")) WHERE id = $\(bindings.count)",
            binds: bindings)
        try await run("update download \(update.id)") { client, logger in
            try await client.query(query, logger: logger)
        }
    }

    /// The record with `id`.
    public func record(id: String) async throws(DownloadError) -> DownloadRecord? {
        try await records("SELECT \(Self.quotedColumns) FROM download WHERE id = $1", [id]).first
    }

    /// Every record, oldest first.
    public func allRecords() async throws(DownloadError) -> [DownloadRecord] {
        try await records("SELECT \(Self.quotedColumns) FROM download ORDER BY \"createdAt\", id", [])
    }

    /// Forgets a record.
    public func delete(id: String) async throws(DownloadError) {
        try await run("delete download \(id)") { client, logger in
            try await client.query("DELETE FROM download WHERE id = \(id)", logger: logger)
        }
    }

    // MARK: Runs and settings

    /// Records a new run of a manager on this store and returns its number (always growing, across workers).
    public func beginRun() async throws(DownloadError) -> Int64 {
        try await run("record a run") { client, logger in
            let rows = try await client.query("INSERT INTO run DEFAULT VALUES RETURNING id", logger: logger)
            for try await id in rows.decode(Int64.self) { return id }
            throw DownloadError(.store, "the store recorded no run")
        }
    }

    /// The stored settings, nil when none were stored.
    public func settings() async throws(DownloadError) -> ManagerSettings? {
        let text: String? = try await run("read the settings") { client, logger in
            let rows = try await client.query("SELECT value FROM setting WHERE name = 'manager'", logger: logger)
            for try await value in rows.decode(String.self) { return value }
            return nil
        }
        guard let text else { return nil }
        return try? JSONDecoder().decode(ManagerSettings.self, from: Data(text.utf8))
    }

    /// Stores the settings.
    public func saveSettings(_ settings: ManagerSettings) async throws(DownloadError) {
        let text: String
        do { text = String(decoding: try JSONEncoder().encode(settings), as: UTF8.self) } catch {
            throw DownloadError(.store, "cannot encode the settings: \(error)", underlying: error)
        }
        try await run("save the settings") { client, logger in
            try await client.query(
                """
                INSERT INTO setting (name, value) VALUES ('manager', \(text))
                ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value
                """, logger: logger)
        }
    }

    // MARK: Mapping

    /// One INSERT a record (`replacing`: or an update of every column when its id is there).
    static func upserts(_ records: [DownloadRecord], replacing: Bool) throws(DownloadError) -> [PostgresQuery] {
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
            var bindings = PostgresBindings(capacity: names.count)
            let values: [DatabaseValue]
            do { values = try record.columnValues() } catch {
                throw DownloadError(.store, "cannot encode download \(record.id): \(error)", underlying: error)
            }
            for (name, value) in zip(names, values) { try bind(value, as: columnKinds[name] ?? .text, into: &bindings) }
            queries.append(PostgresQuery(unsafeSQL: sql, binds: bindings))
        }
        return queries
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

    /// A row as GRDB's `Row`, for the record's own decoding.
    static func databaseRow(_ row: PostgresRow) throws -> Row {
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

    func records(_ sql: String, _ arguments: [String]) async throws(DownloadError) -> [DownloadRecord] {
        var bindings = PostgresBindings(capacity: arguments.count)
        for argument in arguments { bindings.append(argument) }
        let query = PostgresQuery(unsafeSQL: sql, binds: bindings)
        return try await run("read downloads") { client, logger in
            var records: [DownloadRecord] = []
            for try await row in try await client.query(query, logger: logger) {
                records.append(try DownloadRecord(row: try Self.databaseRow(row)))
            }
            return records
        }
    }

    // MARK: Errors

    @discardableResult
    /// Runs `body` against the pool; an error becomes a `DownloadError` that says what was being done, and where.
    func run<T: Sendable>(
        _ what: String, _ body: @Sendable (PostgresClient, Logger) async throws -> T
    ) async throws(DownloadError) -> T {
        do { return try await body(client, logger) } catch {
            if let error = error as? DownloadError { throw error }
            throw Self.describe(error, at: location, doing: "cannot \(what) in the store at")
        }
    }

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
