import GRDB
import HaulCore

extension DownloadStore {
    /// Brings the database of `writer` to the current schema. A new one gets it in one transaction
    /// (`createCurrentSchema`), with every migration marked applied; one made by an earlier version gets the
    /// migrations it has not had. Each `ALTER TABLE` of a migration makes SQLite read the whole schema again, and every
    /// `haul get` into a new state folder, every first start of a daemon and most tests open a new store.
    /// Returns whether the database was empty, and now holds the schema this call made.
    @discardableResult
    static func prepareSchema(_ writer: any DatabaseWriter) throws -> Bool {
        let isNew = try writer.writeWithoutTransaction { db in
            var isNew = false
            try db.inTransaction(.immediate) {
                // Checked in the transaction that creates it: of two processes opening a new store at once, the
                // second finds the schema the first made.
                isNew = try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") == 0
                if isNew { try createCurrentSchema(db) }
                return .commit
            }
            return isNew
        }
        try migrator.migrate(writer)
        return isNew
    }

    /// What `migrator` makes of an empty database, made at once: the same tables, columns (in the same order, with
    /// the same types, constraints and defaults) and indexes, and `grdb_migrations` listing every migration. The
    /// columns and tables are the migrations' own definitions (`firstColumns`, `laterColumns`, `createRunAndSettings`);
    /// `StoreMigrationTests` compares the two schemas.
    static func createCurrentSchema(_ db: Database) throws {
        try db.create(table: "download") { table in
            firstColumns(of: table)
            for column in laterColumns { column.define(table.column(column.name, column.type)) }
        }
        try createRunAndSettings(db)
        try db.execute(sql: "CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
        let insert = try db.makeStatement(sql: "INSERT INTO grdb_migrations (identifier) VALUES (?)")
        for identifier in migrator.migrations { try insert.execute(arguments: [identifier]) }
    }

    /// The download table's columns of the first version, in order. Shipped: the first migration makes exactly these,
    /// so a change of the table is a new migration, never an edit here.
    private static func firstColumns(of table: TableDefinition) {
        table.primaryKey("id", .text)
        table.column("url", .text).notNull()
        table.column("finalURL", .text)
        table.column("directory", .text)
        table.column("destination", .text)
        table.column("state", .text).notNull()
        table.column("totalLength", .integer)
        table.column("durableOffset", .integer).notNull()
        table.column("etag", .text)
        table.column("lastModified", .text)
        table.column("isLastModifiedStrong", .boolean).notNull()
        table.column("isResumable", .boolean)
        table.column("isPartVerified", .boolean).notNull()
        table.column("mayReplaceDestination", .boolean).notNull()
        table.column("attempts", .integer).notNull()
        table.column("lastError", .text)
        table.column("options", .text).notNull()
        table.column("priority", .integer).notNull()
        table.column("createdAt", .datetime).notNull()
        table.column("updatedAt", .datetime).notNull()
    }

    /// A column of the download table added by a later migration.
    private struct LaterColumn: Sendable {
        let migration: String
        let name: String
        let type: Database.ColumnType
        var notNull = false
        var defaultValue: DatabaseValue?

        func define(_ column: ColumnDefinition) {
            if notNull { column.notNull() }
            if let defaultValue { column.defaults(to: defaultValue) }
        }
    }

    private static let queueOrder = "v2: queue order, prerequisites, rate limits"
    private static let segments = "v3: segments and connections"
    private static let errors = "v3: errors, origin, completion, runs, settings"
    private static let identities = "v8: folder and part file identities"
    private static let notices = "v9: notices"
    private static let handOvers = "v11: files handed over"

    /// The columns the migrations after the first added, in the order they added them. A new column is a new entry at
    /// the end under a new migration; a shipped entry is never edited.
    private static let laterColumns: [LaterColumn] = [
        LaterColumn(
            migration: queueOrder, name: "queuePosition", type: .double, notNull: true, defaultValue: 0.databaseValue),
        LaterColumn(
            migration: queueOrder, name: "prerequisites", type: .text, notNull: true, defaultValue: "[]".databaseValue),
        LaterColumn(migration: queueOrder, name: "rateLimit", type: .integer),
        LaterColumn(migration: segments, name: "segments", type: .text),
        LaterColumn(
            migration: segments, name: "activeConnections", type: .integer, notNull: true, defaultValue: 0.databaseValue
        ),
        LaterColumn(migration: errors, name: "errorCode", type: .text),
        LaterColumn(migration: errors, name: "errorStatus", type: .integer),
        LaterColumn(
            migration: errors, name: "origin", type: .text, notNull: true,
            defaultValue: DownloadOrigin.library.rawValue.databaseValue),
        LaterColumn(migration: errors, name: "completedAt", type: .datetime),
        LaterColumn(migration: identities, name: "folderDevice", type: .integer),
        LaterColumn(migration: identities, name: "folderInode", type: .integer),
        LaterColumn(migration: identities, name: "partDevice", type: .integer),
        LaterColumn(migration: identities, name: "partInode", type: .integer),
        LaterColumn(migration: notices, name: "notice", type: .text),
        LaterColumn(migration: handOvers, name: "handOver", type: .integer),
    ]

    /// Adds the columns `migration` added to the download table.
    private static func addColumns(of migration: String, in db: Database) throws {
        try db.alter(table: "download") { table in
            for column in laterColumns where column.migration == migration {
                column.define(table.add(column: column.name, column.type))
            }
        }
    }

    /// The run and setting tables, as the third migration made them. One row of `run` each time a manager opens the
    /// store: event ids carry the run, so they never repeat.
    private static func createRunAndSettings(_ db: Database) throws {
        try db.create(table: "run") { table in
            table.autoIncrementedPrimaryKey("id")
            table.column("startedAt", .datetime).notNull()
        }
        try db.create(table: "setting") { table in
            table.primaryKey("name", .text)
            table.column("value", .text).notNull()
        }
    }

    /// The index `v7` made and `v10` dropped: a folder download has no destination until its first answer, and its
    /// row needed no entry in it (the lookup was always for a name).
    private static let destinationIndex =
        "CREATE INDEX download_on_destination ON download(destination) WHERE destination IS NOT NULL"

    /// The schema's history; named, append-only, never edited once shipped.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: downloads") { db in
            try db.create(table: "download") { table in firstColumns(of: table) }
            try db.create(index: "download_on_url", on: "download", columns: ["url"])
        }
        migrator.registerMigration(queueOrder) { db in
            try addColumns(of: queueOrder, in: db)
            try db.execute(sql: "UPDATE download SET queuePosition = rowid")
        }
        migrator.registerMigration(segments) { db in try addColumns(of: segments, in: db) }
        migrator.registerMigration(errors) { db in
            try addColumns(of: errors, in: db)
            try createRunAndSettings(db)
        }
        migrator.registerMigration("v4: destination index") { db in
            // Choosing a folder download's name asks whether another download has it: without an index that read
            // every row, for every download.
            try db.create(index: "download_on_destination", on: "download", columns: ["destination"])
        }
        migrator.registerMigration("v5: dates as numbers") { db in
            // New rows store seconds since 1970; earlier ones held text, which would sort after every number.
            for column in ["createdAt", "updatedAt", "completedAt"] {
                try db.execute(
                    sql: """
                        UPDATE download SET \(column) = (julianday(\(column)) - 2440587.5) * 86400.0
                        WHERE typeof(\(column)) = 'text'
                        """)
            }
        }
        migrator.registerMigration("v6: no index on url") { db in
            // Nothing looks a download up by URL in the store (the manager keeps its own index in memory), and every
            // add paid for this index with a page written to the WAL.
            try db.drop(index: "download_on_url")
        }
        migrator.registerMigration("v7: destination index without folder downloads") { db in
            // Every add into a folder paid for an entry in the index.
            try db.drop(index: "download_on_destination")
            try db.execute(sql: destinationIndex)
        }
        // Haul writes only into the folder and the part file it recorded (device and inode); rows from before have
        // none, and take what they find at their next start.
        migrator.registerMigration(identities) { db in try addColumns(of: identities, in: db) }
        // The notice of a download's end that a hook or webhook has yet to hear, as JSON (`PendingNotice`).
        migrator.registerMigration(notices) { db in try addColumns(of: notices, in: db) }
        migrator.registerMigration("v10: no destination index") { db in
            // Nothing reads it: on one machine the manager holds every download's name in memory and checks claims
            // there, and a fleet's store is PostgreSQL. Every download that took a name paid for an entry, a page
            // written to the WAL with the commit before its first byte.
            try db.execute(sql: "DROP INDEX download_on_destination")
        }
        // Which part files are the user's (`DownloadRecord.handOver`): those are given back, never deleted.
        migrator.registerMigration(handOvers) { db in try addColumns(of: handOvers, in: db) }
        return migrator
    }
}
