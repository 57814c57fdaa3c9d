import Foundation
import GRDB
import HaulCore
import Testing

@testable import Haul

@Suite("Store migrations")
struct StoreMigrationTests {
    @Test("dates stored as text by earlier versions become numbers, keeping their value and the order of adding")
    func datesAsNumbers() throws {
        let queue = try DatabaseQueue()
        try DownloadStore.migrator.migrate(queue, upTo: "v4: destination index")
        try queue.write { db in
            try db.execute(
                sql: """
                    INSERT INTO download (id, url, state, durableOffset, isLastModifiedStrong, isPartVerified,
                        mayReplaceDestination, attempts, options, priority, queuePosition, prerequisites,
                        activeConnections, createdAt, updatedAt, origin, completedAt)
                    VALUES ('old', 'http://h/a', 'completed', 0, 0, 1, 0, 0, '{}', 0, 1, '[]', 0,
                        '2026-01-02 03:04:05.250', '2026-01-02 03:04:06.000', 'cli', '2026-01-02 03:05:00.000')
                    """)
        }
        try DownloadStore.migrator.migrate(queue)
        let types = try queue.read { db in
            try String.fetchAll(
                db, sql: "SELECT typeof(createdAt) || typeof(updatedAt) || typeof(completedAt) FROM download")
        }
        #expect(types == ["realrealreal"])
        let record = try queue.read { db in try DownloadRecord.fetchOne(db, key: "old") }
        let expected = try #require(
            Calendar(identifier: .gregorian).date(
                from: DateComponents(
                    timeZone: TimeZone(identifier: "UTC"), year: 2026, month: 1, day: 2, hour: 3, minute: 4, second: 5,
                    nanosecond: 250_000_000)))
        #expect(abs((record?.createdAt.timeIntervalSince1970 ?? 0) - expected.timeIntervalSince1970) < 0.001)
        #expect(record?.completedAt != nil && record?.state == .completed)
    }

    @Test("a new store gets in one step the schema the migrations make, with every migration marked applied")
    func newStoreInOneStep() throws {
        let stepwise = try DatabaseQueue()
        try DownloadStore.migrator.migrate(stepwise)
        let direct = try DatabaseQueue()
        try DownloadStore.prepareSchema(direct)
        let expected = try Self.schema(of: stepwise)
        #expect(expected.contains { $0.contains("notice") }, "the schema lists the columns: \(expected)")
        #expect(try Self.schema(of: direct) == expected)
        let applied = try direct.read { db in try DownloadStore.migrator.appliedMigrations(db) }
        #expect(applied == DownloadStore.migrator.migrations)
        // A store that has its schema is left as it is.
        try DownloadStore.prepareSchema(stepwise)
        #expect(try Self.schema(of: stepwise) == expected)
    }

    /// Every table and index, with each column's name, type, constraints and default, and each index's columns
    /// and condition.
    static func schema(of queue: DatabaseQueue) throws -> [String] {
        try queue.read { db in
            var lines: [String] = []
            for row in try Row.fetchAll(db, sql: "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name") {
                let type: String = row["type"]
                let name: String = row["name"]
                let table: String = row["tbl_name"]
                lines.append("\(type) \(name) on \(table)")
                let pragma = type == "table" ? "table_xinfo" : "index_xinfo"
                for column in try Row.fetchAll(db, sql: "PRAGMA \(pragma)(\(name.quotedDatabaseIdentifier))") {
                    lines.append("  \(column)")
                }
                if type == "index", let sql: String = row["sql"] { lines.append("  \(sql)") }
            }
            return lines
        }
    }
}
