import Foundation
import GRDB
import GRDBSQLite
import HaulCore
import Synchronization

/// The SQLite store of downloads (GRDB, WAL mode), safe to share between tasks.
public struct DownloadStore: DownloadStoring {
    private let writer: any DatabaseWriter
    /// Every write goes through it, in order, committed in groups.
    private let queue: CommitQueue<Database>
    /// Where the database lives; nil in memory.
    public let path: String?
    /// Whether opening it made it.
    private let isNew: Bool

    /// Opens (creating when needed) the store in `directory`, as `haul.sqlite`. Errors name the path and the cause
    /// (locked by another process, unreadable, not a database).
    ///
    /// With `exclusive`, for a process that owns the state folder (the daemon holds its lock), the store keeps one
    /// connection with SQLite's exclusive locking mode: no other process may open it meanwhile, and in return no
    /// commit takes and releases file locks or touches the shared-memory index (a few percent of every add).
    ///
    /// The folder is checked first (`StateFolder`): a real folder of this user's that nobody else may write to, so
    /// nobody else can plant a link under the database's names.
    public init(directory: String, exclusive: Bool = false) throws(DownloadError) {
        let folder = try StateFolder.open(directory)
        let path = folder.path(of: "haul.sqlite")
        do {
            var configuration = Configuration()
            configuration.busyMode = .timeout(5)
            // WAL with synchronous=NORMAL: a commit no one waits for does not fsync, so the state changes of many
            // small downloads do not cost a disk flush each; a power cut may drop the last of them, which only lowers
            // stored offsets and states (invariant 1), and the database stays consistent. A commit someone waits for
            // (an add, the row before its part file, a checkpoint) is synced (`CommitQueue`), one sync for a group.
            // A page cache of 512 KiB a connection of a pool (SQLite's default is 2 MiB): the manager keeps what it
            // reads often in memory already. The daemon's single connection keeps the default: inserting a list of
            // 10,000 into a store of 10,000 took a fifth longer with the smaller cache (the id index is random).
            configuration.prepareDatabase { db in
                // Before the first access in WAL mode, so that the WAL index lives in this process's memory.
                if exclusive { try db.execute(sql: "PRAGMA locking_mode = EXCLUSIVE") }
                try db.execute(sql: "PRAGMA synchronous = NORMAL")
                try db.execute(sql: exclusive ? "PRAGMA cache_size = -2048" : "PRAGMA cache_size = -512")
            }
            let writer: any DatabaseWriter
            if exclusive {
                configuration.journalMode = .wal
                writer = try DatabaseQueue(path: path, configuration: configuration)
            } else {
                writer = try DatabasePool(path: path, configuration: configuration)
            }
            isNew = try Self.prepareSchema(writer)
            folder.sync()
            self.writer = writer
            queue = CommitQueue(writer: writer, describe: Self.writeError(at: path))
            self.path = path
        } catch {
            var advice = ""
            if let error = error as? DatabaseError, [.SQLITE_NOTADB, .SQLITE_CORRUPT].contains(error.resultCode) {
                // What a user can do: the files on disk are not the database, and a new one adopts none of them.
                advice = "; move it aside to begin a new one (the downloads it lists are forgotten; their files stay)"
            }
            throw DownloadError(
                .store, "cannot open the state database \(path): \(Self.describe(error))\(advice)", underlying: error)
        }
    }

    /// An in-memory store, for tests and one-off use.
    public init() throws(DownloadError) {
        do {
            let queue = try DatabaseQueue()
            isNew = try Self.prepareSchema(queue)
            writer = queue
            self.queue = CommitQueue(writer: queue, describe: Self.writeError(at: nil))
            path = nil
        } catch {
            throw DownloadError(.store, "cannot create an in-memory database: \(error)", underlying: error)
        }
    }

    private static func describe(_ error: any Error) -> String {
        if let error = error as? DatabaseError {
            switch error.resultCode {
            case .SQLITE_BUSY, .SQLITE_LOCKED: return "it is locked by another process"
            case .SQLITE_NOTADB, .SQLITE_CORRUPT: return "it is not a Haul database or is damaged"
            case .SQLITE_CANTOPEN, .SQLITE_PERM, .SQLITE_READONLY: return "it cannot be opened for writing"
            case .SQLITE_FULL: return "the disk is full"
            default: return error.message ?? String(describing: error)
            }
        }
        return String(describing: error)
    }

    /// How a failed write of the database at `path` (nil: in memory) is told: the file named, as the error of
    /// opening it names it, since the state folder may be anywhere (`--state-dir`, `$HAUL_STATE_DIR`).
    private static func writeError(at path: String?) -> @Sendable (any Error) -> DownloadError {
        let database = path.map { "the state database \($0)" } ?? "the state database"
        return { error in
            if let error = error as? DownloadError { return error }
            if let error = error as? DatabaseError, error.resultCode == .SQLITE_FULL {
                // Nothing of the write is stored, and what was stored before stays readable: the download stops with
                // its bytes and resumes once there is room.
                return DownloadError(.diskFull, "cannot save to \(database): the disk is full", underlying: error)
            }
            return DownloadError(.store, "cannot write \(database): \(describe(error))", underlying: error)
        }
    }

    /// Writes in the store's order and returns once committed (with the writes queued beside it).
    private func write<T>(_ body: @escaping @Sendable (Database) throws -> T) throws(DownloadError) -> T {
        try queue.perform(body)
    }

    /// Reads what is committed, after every write queued before it.
    private func read<T>(_ body: (Database) throws -> T) throws(DownloadError) -> T {
        queue.waitUntilIdle()
        do { return try writer.read(body) } catch {
            throw DownloadError(
                .store, "cannot read the state database\(path.map { " " + $0 } ?? ""): \(Self.describe(error))",
                underlying: error)
        }
    }

    /// Inserts or replaces a record, stamping `updatedAt`.
    public func save(_ record: DownloadRecord) throws(DownloadError) {
        var record = record
        record.updatedAt = Date()
        let stamped = record
        try write { db in try stamped.save(db) }
    }

    /// Inserts or replaces many records in one transaction (one commit for a whole batch).
    public func save(_ records: [DownloadRecord]) throws(DownloadError) {
        let now = Date()
        try write { db in
            for var record in records {
                record.updatedAt = now
                try record.save(db)
            }
        }
    }

    /// Inserts new records and saves changed ones in one transaction: all or none.
    public func insert(_ records: [DownloadRecord], saving changed: [DownloadRecord] = []) throws(DownloadError) {
        let now = Date()
        try write { db in try Self.insert(records, saving: changed, now: now, in: db) }
    }

    public typealias Commit = StoreCommit

    /// Queues what `insert(_:saving:)` writes and returns at once; `committed(_:)` tells when it is in the store
    /// (the daemon answers an add then, and goes on with other work meanwhile, so adds that arrive together commit
    /// together). Later writes of the same downloads are queued behind it.
    ///
    /// It is committed on the queue's own thread, starting at once, never on the thread of the caller that waits:
    /// that caller is the daemon's network thread, which meanwhile reads the next requests, and the adds that arrive
    /// during one commit's sync are the next commit's group. A list of many commits while the manager builds their
    /// events and snapshots.
    public func submitInsert(_ records: [DownloadRecord], saving changed: [DownloadRecord] = []) -> Commit {
        let now = Date()
        return Commit(
            ticket: queue.submit(awaited: true, startsAtOnce: true) { db in
                try Self.insert(records, saving: changed, now: now, in: db)
            })
    }

    /// Waits until `commit` is in the store; throws when its write failed (nothing of it was stored).
    public func committed(_ commit: Commit) async throws(DownloadError) {
        if let failure = await queue.completion(of: commit.ticket) { throw failure }
    }

    /// Has `handler` told of each queued write that no one waited for and that failed: the row keeps its previous
    /// values (a lower offset, an earlier state), which the next run recovers from.
    public func onLostWrite(_ handler: @escaping @Sendable (DownloadError) -> Void) {
        queue.onLostWrite(handler)
    }

    /// Waits until every write queued so far is committed (before the process ends, or before another opens the
    /// store); the queue's commit thread ends with it.
    public func flush() {
        queue.settle()
    }

    /// Whether opening it made it and nothing was written through it since (`DownloadStoring.startedEmpty`): every
    /// write of this store goes through its queue.
    public var startedEmpty: Bool { isNew && queue.isUntouched }

    /// Commits made and writes they held since the store was opened (several writes a commit when they come
    /// together).
    public var commitStatistics: (commits: Int, writes: Int) { queue.statistics }

    private static let insertSQL =
        "INSERT INTO download (\(DownloadRecord.columnNames.joined(separator: ", "))) VALUES ("
        + Array(repeating: "?", count: DownloadRecord.columnNames.count).joined(separator: ", ") + ")"

    private static func insert(
        _ records: [DownloadRecord], saving changed: [DownloadRecord], now: Date, in db: Database
    )
        throws
    {
        // One prepared statement for the whole list, its values bound straight to SQLite: building GRDB's
        // `StatementArguments` maps every value generically (by key path or existential), which cost three
        // times the insert itself. Cached: adding one by one would parse it for every download. Only this code
        // runs it, and it leaves it reset with no bindings.
        let statement = try db.cachedStatement(sql: insertSQL)
        for record in records {
            try Self.run(statement, binding: record.columnValues(), in: db)
        }
        for var record in changed {
            record.updatedAt = now
            try record.save(db)
        }
    }

    /// Runs `statement`, whose values are bound, to its end.
    fileprivate static func step(_ statement: Statement, in db: Database) throws {
        let code = sqlite3_step(statement.sqliteStatement)
        guard code == SQLITE_DONE else {
            throw DatabaseError(
                resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)),
                sql: statement.sql)
        }
    }

    /// Binds `values` and then `trailing` to `statement`'s parameters from the first on, runs it to its end, and
    /// leaves it reset with no bindings. Texts are copied into one temporary buffer that outlives the step and bound
    /// in place (`SQLITE_STATIC`): bound as transient, SQLite allocated, copied and freed each of them, a dozen for
    /// every row written.
    fileprivate static func run(
        _ statement: Statement, binding values: [DatabaseValue], _ trailing: [DatabaseValue] = [], in db: Database
    ) throws {
        let handle = statement.sqliteStatement
        func textBytes(_ list: [DatabaseValue]) -> Int {
            list.reduce(0) { sum, value in
                guard case .string(let text) = value.storage else { return sum }
                return sum + text.utf8.count
            }
        }
        try withUnsafeTemporaryAllocation(
            byteCount: max(textBytes(values) + textBytes(trailing), 1), alignment: 1
        ) { texts in
            sqlite3_reset(handle)
            // Before the buffer goes: nothing bound may point into it afterwards.
            defer {
                sqlite3_reset(handle)
                sqlite3_clear_bindings(handle)
            }
            var used = 0
            var parameter: CInt = 1
            for list in [values, trailing] {
                for value in list {
                    bind(value, to: handle, at: parameter, texts: texts, used: &used)
                    parameter += 1
                }
            }
            try step(statement, in: db)
        }
    }

    /// Binds one value; a text that is not empty is copied to `texts` at `used` and bound there, not copied by
    /// SQLite.
    private static func bind(
        _ value: DatabaseValue, to handle: OpaquePointer, at index: CInt, texts: UnsafeMutableRawBufferPointer,
        used: inout Int
    ) {
        guard case .string(var text) = value.storage, let base = texts.baseAddress else {
            return bind(value, to: handle, at: index)
        }
        let start = base + used
        let count = text.withUTF8 { bytes in
            if let source = bytes.baseAddress { start.copyMemory(from: source, byteCount: bytes.count) }
            return bytes.count
        }
        // An empty one is bound as "", copied: a nil pointer would bind NULL.
        guard count > 0 else { return bind(value, to: handle, at: index) }
        sqlite3_bind_text(handle, index, start.assumingMemoryBound(to: CChar.self), CInt(count), nil)
        used += count
    }

    /// Binds one value, copied by SQLite (text and blobs are transient).
    fileprivate static func bind(_ value: DatabaseValue, to handle: OpaquePointer, at index: CInt) {
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        switch value.storage {
        case .null: sqlite3_bind_null(handle, index)
        case .int64(let number): sqlite3_bind_int64(handle, index, number)
        case .double(let number): sqlite3_bind_double(handle, index, number)
        case .string(var text):
            // Its UTF-8 in place, with its length (a String passed as a C string is copied into a new null-terminated
            // array first). An empty one is bound as "": a nil pointer would bind NULL.
            text.withUTF8 { bytes in
                guard let base = bytes.baseAddress, !bytes.isEmpty else {
                    _ = sqlite3_bind_text(handle, index, "", 0, transient)
                    return
                }
                _ = base.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                    sqlite3_bind_text(handle, index, $0, CInt(bytes.count), transient)
                }
            }
        case .blob(let data):
            _ = data.withUnsafeBytes { sqlite3_bind_blob(handle, index, $0.baseAddress, CInt($0.count), transient) }
        }
    }

    /// Records a new run of a manager on this store and returns its number (1 for the first; always growing).
    public func beginRun() throws(DownloadError) -> Int64 {
        try write { db in
            // The time as GRDB writes a date (UTC, "YYYY-MM-DD HH:MM:SS.SSS"), made by SQLite: a `Date` argument is
            // formatted through a Gregorian calendar, which Foundation builds on its first use, and nothing else of
            // a run needs one.
            try db.execute(sql: "INSERT INTO run (startedAt) VALUES (strftime('%Y-%m-%d %H:%M:%f', 'now'))")
            return db.lastInsertedRowID
        }
    }

    /// The stored settings, nil when none were stored.
    public func settings() throws(DownloadError) -> ManagerSettings? {
        let text = try read { db in try String.fetchOne(db, sql: "SELECT value FROM setting WHERE name = 'manager'") }
        return text.flatMap(ManagerSettings.init(storedText:))
    }

    /// Stores the settings.
    public func saveSettings(_ settings: ManagerSettings) throws(DownloadError) {
        let text = try settings.storedText()
        try write { db in
            try db.execute(
                sql:
                    "INSERT INTO setting (name, value) VALUES ('manager', ?) ON CONFLICT(name) DO UPDATE SET value = ?",
                arguments: [text, text])
        }
    }

    /// A change of some columns of one row (and its `updatedAt`), to write and wait for (`save`) or to queue
    /// (`submit`). The statement of each kind is prepared once and kept: compiling it for every write was a tenth of
    /// the time of a thousand small downloads.
    public struct RowUpdate: Sendable {
        fileprivate let sql: String
        fileprivate let updatedAt: Double
        /// The row, and the columns this update sets with their values: what another store writes
        /// (`updatedAt` comes with every update, stamped by the store).
        package let id: String
        package let columns: [String]
        package let values: [DatabaseValue]

        /// `UPDATE download SET` these columns, `updatedAt`, `WHERE id`: each kind's text is made once, not for each
        /// of the few updates every download makes. The values of each kind below are in its columns' order.
        private struct Statement: Sendable {
            let columns: [String]
            let sql: String

            init(_ columns: [String]) {
                self.columns = columns
                sql =
                    "UPDATE download SET " + (columns.map { "\($0) = ?" } + ["updatedAt = ?"]).joined(separator: ", ")
                    + " WHERE id = ?"
            }
        }

        /// Turned into database values here, and bound straight to SQLite when written (`execute`): GRDB's
        /// `StatementArguments` boxes each value as an existential, which cost more than the update itself.
        private init(_ id: String, _ statement: Statement, _ values: [DatabaseValue]) {
            self.id = id
            columns = statement.columns
            self.values = values
            sql = statement.sql
            updatedAt = Date().timeIntervalSince1970
        }

        /// Writes the update through its cached statement, left reset with no bindings.
        fileprivate func execute(in db: Database) throws {
            try DownloadStore.run(
                db.cachedStatement(sql: sql), binding: values, [updatedAt.databaseValue, id.databaseValue], in: db)
        }

        private static let transferStatement = Statement([
            "state", "finalURL", "destination", "totalLength", "durableOffset", "etag", "lastModified",
            "isLastModifiedStrong", "isResumable", "isPartVerified", "segments", "folderDevice", "folderInode",
            "partDevice", "partInode", "handOver",
        ])

        /// What a response and the transfer change (final URL, destination, remote facts, offsets), with the state,
        /// without encoding the rest of the record: the common write, a few times for every download. A started
        /// download's first one stores that it runs (`DownloadManager.start` writes nothing of its own).
        public static func transfer(_ record: DownloadRecord) throws(DownloadError) -> RowUpdate {
            RowUpdate(
                record.id, transferStatement,
                [
                    record.state.rawValue.databaseValue, record.finalURL.databaseValue,
                    record.destination.databaseValue, record.totalLength.databaseValue,
                    record.durableOffset.databaseValue, record.etag.databaseValue, record.lastModified.databaseValue,
                    record.isLastModifiedStrong.databaseValue, record.isResumable.databaseValue,
                    record.isPartVerified.databaseValue, try DownloadStore.json(record.segments).databaseValue,
                    record.folderDevice.databaseValue, record.folderInode.databaseValue,
                    record.partDevice.databaseValue, record.partInode.databaseValue,
                    record.handOver?.rawValue.databaseValue ?? .null,
                ])
        }

        private static let completionStatement = Statement([
            "destination", "state", "totalLength", "durableOffset", "attempts", "lastError", "errorCode",
            "errorStatus", "completedAt", "mayReplaceDestination", "segments", "activeConnections", "notice",
            "handOver",
        ])

        /// A finished download: its place, state and counters, with what `transfer` writes.
        public static func completion(_ record: DownloadRecord) throws(DownloadError) -> RowUpdate {
            RowUpdate(
                record.id, completionStatement,
                [
                    record.destination.databaseValue, record.state.rawValue.databaseValue,
                    record.totalLength.databaseValue, record.durableOffset.databaseValue,
                    record.attempts.databaseValue, record.lastError.databaseValue, record.errorCode.databaseValue,
                    record.errorStatus.databaseValue, record.completedAt?.timeIntervalSince1970.databaseValue ?? .null,
                    record.mayReplaceDestination.databaseValue, try DownloadStore.json(record.segments).databaseValue,
                    record.activeConnections.databaseValue, try PendingNotice.column(record.notice),
                    record.handOver?.rawValue.databaseValue ?? .null,
                ])
        }

        private static let noticeStatement = Statement(["notice"])

        /// Only the notice still to deliver (nil once every hook and webhook had it).
        public static func notice(_ record: DownloadRecord) throws(DownloadError) -> RowUpdate {
            RowUpdate(record.id, noticeStatement, [try PendingNotice.column(record.notice)])
        }

        private static let attemptsStatement = Statement([
            "state", "attempts", "lastError", "errorCode", "errorStatus",
        ])

        /// A retry's counters: attempts without progress and the error, with the state (a download that fails
        /// before any answer stores that it runs with its first retry).
        public static func attempts(_ record: DownloadRecord) -> RowUpdate {
            RowUpdate(
                record.id, attemptsStatement,
                [
                    record.state.rawValue.databaseValue, record.attempts.databaseValue,
                    record.lastError.databaseValue, record.errorCode.databaseValue, record.errorStatus.databaseValue,
                ])
        }

        private static let stateStatement = Statement(["state"])

        /// Only the state (a fleet worker's download starting, the network lost or back).
        public static func state(_ state: DownloadState, for id: String) -> RowUpdate {
            RowUpdate(id, stateStatement, [state.rawValue.databaseValue])
        }

        private static let activeConnectionsStatement = Statement(["activeConnections"])

        /// Only the number of open connections.
        public static func activeConnections(_ count: Int, for id: String) -> RowUpdate {
            RowUpdate(id, activeConnectionsStatement, [count.databaseValue])
        }
    }

    /// Writes `update` and returns once it is committed.
    public func save(_ update: RowUpdate) throws(DownloadError) {
        try write { db in try update.execute(in: db) }
    }

    /// Queues `update` and returns at once (`committed(_:)` waits for it): writes that no later step depends on are
    /// committed with others in one transaction, within moments.
    ///
    /// The store's own thread commits an update even when its caller waits for it (`startsAtOnce`), never the
    /// caller's thread: the callers are downloads on Swift's cooperative pool (two threads on two cores), and one of
    /// them committing there held a thread of the pool through SQLite's write while the others' updates queued behind,
    /// and fewer updates shared each commit.
    @discardableResult
    public func submit(_ update: RowUpdate, awaited: Bool) -> Commit {
        Commit(
            ticket: queue.submit(awaited: awaited, startsAtOnce: true) { db in
                try update.execute(in: db)
            })
    }

    /// Writes `.transfer(record)`.
    public func saveTransfer(_ record: DownloadRecord) throws(DownloadError) { try save(.transfer(record)) }

    /// Writes `.completion(record)`.
    public func saveCompletion(_ record: DownloadRecord) throws(DownloadError) { try save(.completion(record)) }

    /// Writes `.attempts(record)`.
    public func saveAttempts(_ record: DownloadRecord) throws(DownloadError) { try save(.attempts(record)) }

    /// The segment map as the `segments` column holds it (JSON text), nil for none.
    static func json(_ segments: [Segment]?) throws(DownloadError) -> String? {
        guard let segments else { return nil }
        do { return String(decoding: try JSONEncoder().encode(segments), as: UTF8.self) } catch {
            throw DownloadError(.store, "cannot encode the segment map: \(error)", underlying: error)
        }
    }

    /// Writes `.state(state, for: id)`.
    public func saveState(_ state: DownloadState, for id: String) throws(DownloadError) {
        try save(.state(state, for: id))
    }

    /// Writes `.activeConnections(count, for: id)`.
    public func saveActiveConnections(_ count: Int, for id: String) throws(DownloadError) {
        try save(.activeConnections(count, for: id))
    }

    /// The record with `id`.
    public func record(id: String) throws(DownloadError) -> DownloadRecord? {
        try read { db in try DownloadRecord.fetchOne(db, key: id) }
    }

    /// Every record, oldest first.
    public func allRecords() throws(DownloadError) -> [DownloadRecord] {
        try read { db in try DownloadRecord.order(DownloadRecord.Columns.createdAt).fetchAll(db) }
    }

    /// Forgets a record.
    public func delete(id: String) throws(DownloadError) {
        _ = try write { db in try DownloadRecord.deleteOne(db, key: id) }
    }

    public func delete(ids: [String]) throws(DownloadError) {
        guard !ids.isEmpty else { return }
        _ = try write { db in try DownloadRecord.deleteAll(db, keys: ids) }
    }
}
