import GRDB
import HaulCore

extension DownloadStore {
    /// Brings the database of `writer` to the current schema. A new one gets it in one transaction
    /// (`createCurrentSchema`), with every migration marked applied; one made by an earlier version gets the
    /// migrations it has not had. Each `ALTER TABLE` of a migration makes SQLite read the whole schema again, and every
    /// `haul get` into a new state folder, every first start of a daemon and most tests open a new store.
    static func prepareSchema(_ writer: any DatabaseWriter) throws {
        try writer.writeWithoutTransaction { db in
            try db.inTransaction(.immediate) {
                // Checked in the transaction that creates it: of two processes opening a new store at once, the
                // second finds the schema the first made.
                let isNew = try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") == 0
                if isNew { try createCurrentSchema(db) }
                return .commit
            }
        }
        try migrator.migrate(writer)
    }

    /// What `migrator` makes of an empty database, made at once: the same tables, columns (in the same order, with
    /// the same types, constraints and defaults) and indexes, and `grdb_migrations` listing every migration.
    /// `StoreMigrationTests` compares the two; a new migration changes both.
    static func createCurrentSchema(_ db: Database) throws {
        try db.create(table: "download") { table in
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
            table.column("queuePosition", .double).notNull().defaults(to: 0)
            table.column("prerequisites", .text).notNull().defaults(to: "[]")
            table.column("rateLimit", .integer)
            table.column("segments", .text)
            table.column("activeConnections", .integer).notNull().defaults(to: 0)
            table.column("errorCode", .text)
            table.column("errorStatus", .integer)
            table.column("origin", .text).notNull().defaults(to: DownloadOrigin.library.rawValue)
            table.column("completedAt", .datetime)
            table.column("folderDevice", .integer)
            table.column("folderInode", .integer)
            table.column("partDevice", .integer)
            table.column("partInode", .integer)
            table.column("notice", .text)
        }
        try db.create(table: "run") { table in
            table.autoIncrementedPrimaryKey("id")
            table.column("startedAt", .datetime).notNull()
        }
        try db.create(table: "setting") { table in
            table.primaryKey("name", .text)
            table.column("value", .text).notNull()
        }
        try db.execute(
            sql: "CREATE INDEX download_on_destination ON download(destination) WHERE destination IS NOT NULL")
        try db.execute(sql: "CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
        let insert = try db.makeStatement(sql: "INSERT INTO grdb_migrations (identifier) VALUES (?)")
        for identifier in migrator.migrations { try insert.execute(arguments: [identifier]) }
    }

    /// The schema's history; named, append-only, never edited once shipped.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: downloads") { db in
            try db.create(table: "download") { table in
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
            try db.create(index: "download_on_url", on: "download", columns: ["url"])
        }
        migrator.registerMigration("v2: queue order, prerequisites, rate limits") { db in
            try db.alter(table: "download") { table in
                table.add(column: "queuePosition", .double).notNull().defaults(to: 0)
                table.add(column: "prerequisites", .text).notNull().defaults(to: "[]")
                table.add(column: "rateLimit", .integer)
            }
            try db.execute(sql: "UPDATE download SET queuePosition = rowid")
        }
        migrator.registerMigration("v3: segments and connections") { db in
            try db.alter(table: "download") { table in
                table.add(column: "segments", .text)
                table.add(column: "activeConnections", .integer).notNull().defaults(to: 0)
            }
        }
        migrator.registerMigration("v3: errors, origin, completion, runs, settings") { db in
            try db.alter(table: "download") { table in
                table.add(column: "errorCode", .text)
                table.add(column: "errorStatus", .integer)
                table.add(column: "origin", .text).notNull().defaults(to: DownloadOrigin.library.rawValue)
                table.add(column: "completedAt", .datetime)
            }
            // One row each time a manager opens the store: event ids carry the run, so they never repeat.
            try db.create(table: "run") { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("startedAt", .datetime).notNull()
            }
            try db.create(table: "setting") { table in
                table.primaryKey("name", .text)
                table.column("value", .text).notNull()
            }
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
            // A folder download has no destination until its first answer; its row needs no entry in the index
            // (the lookup is always for a name). Every add into a folder paid for one.
            try db.drop(index: "download_on_destination")
            try db.execute(
                sql: "CREATE INDEX download_on_destination ON download(destination) WHERE destination IS NOT NULL")
        }
        migrator.registerMigration("v8: folder and part file identities") { db in
            // Haul writes only into the folder and the part file it recorded (device and inode); rows from before
            // have none, and take what they find at their next start.
            try db.alter(table: "download") { table in
                table.add(column: "folderDevice", .integer)
                table.add(column: "folderInode", .integer)
                table.add(column: "partDevice", .integer)
                table.add(column: "partInode", .integer)
            }
        }
        migrator.registerMigration("v9: notices") { db in
            // The notice of a download's end that a hook or webhook has yet to hear, as JSON (`PendingNotice`).
            try db.alter(table: "download") { table in table.add(column: "notice", .text) }
        }
        return migrator
    }
}
