import Foundation
import Haul
import HaulCore
import Logging
import PostgresNIO

/// What a worker asks the store instead of holding every download in memory: pages in queue order, counts, the
/// lookups of an add, and the positions a move needs. Each is one indexed statement (migration 5), so its cost does
/// not grow with the queue: a page after a cursor is a range of the queue-order index, not a scan of what comes
/// before it.
///
/// Queue order is the manager's (`DownloadManager.QueueCursor`): higher priority first, then lower position, then the
/// id in byte order (`COLLATE "C"`, as Swift compares the ids).
extension PostgresStore {
    /// The queue-order key of a row, as the indexes of migration 5 hold it.
    static let orderKey = "(-priority), \"queuePosition\", id COLLATE \"C\""
    /// The same key, descending.
    static let reverseOrderKey = "(-priority) DESC, \"queuePosition\" DESC, id COLLATE \"C\" DESC"

    public func page(
        in states: Set<DownloadState>?, after cursor: DownloadManager.QueueCursor?, limit: Int
    ) throws(DownloadError) -> [DownloadRecord] {
        guard limit > 0 else { return [] }
        var bindings = PostgresBindings(capacity: 5)
        bindings.append(limit)
        var after = ""
        if let cursor {
            bindings.append(-cursor.priority)
            bindings.append(cursor.position)
            bindings.append(cursor.id)
            after = " AND (\(Self.orderKey)) > ($2, $3, $4::text COLLATE \"C\")"
        }
        let select = "SELECT \(Self.readColumns) FROM download"
        let sql: String
        if let states {
            guard !states.isEmpty else { return [] }
            // One range of the state's index for each state, merged: an index over every state in one order would
            // make a page of a rare state scan past the common ones.
            let parts = states.sorted { $0.rawValue < $1.rawValue }.map { state in
                bindings.append(state.rawValue)
                return "(\(select) WHERE state = $\(bindings.count)\(after) ORDER BY \(Self.orderKey) LIMIT $1)"
            }
            sql =
                "SELECT \(Self.quotedColumns), worker FROM (\(parts.joined(separator: " UNION ALL "))) AS chosen "
                + "ORDER BY (-priority), \"queuePosition\", id COLLATE \"C\" LIMIT $1"
        } else {
            sql = "\(select) WHERE true\(after) ORDER BY \(Self.orderKey) LIMIT $1"
        }
        return try records(PostgresQuery(unsafeSQL: sql, binds: bindings))
    }

    public func records(ids: [String]) throws(DownloadError) -> [DownloadRecord] {
        guard !ids.isEmpty else { return [] }
        var bindings = PostgresBindings(capacity: 1)
        bindings.append(ids)
        return try records(
            PostgresQuery(
                unsafeSQL: "SELECT \(Self.readColumns) FROM download WHERE id = ANY($1::text[])", binds: bindings))
    }

    public func counts() throws(DownloadError) -> [DownloadState: Int] {
        let query: PostgresQuery = "SELECT state, count(*) FROM download GROUP BY state"
        // On the scans' connection: the writes go on meanwhile, and the counts are of what they committed.
        let rows: [(String, Int)]
        do {
            rows = try scans.run { connection in
                try connection.query(query, logger: logger).blockingGet().map { try $0.decode((String, Int).self) }
            }
        } catch {
            throw Self.describe(error, at: location, doing: "cannot read the store at")
        }
        var counts: [DownloadState: Int] = [:]
        for (state, count) in rows {
            if let state = DownloadState(rawValue: state) { counts[state] = count }
        }
        return counts
    }

    public func newest(url: String, directory: String?, destination: String?) throws(DownloadError)
        -> DownloadRecord?
    {
        var bindings = PostgresBindings(capacity: 2)
        bindings.append(url)
        let place: String
        if let directory {
            bindings.append(directory)
            place = "directory = $2"
        } else if let destination {
            bindings.append(destination)
            place = "directory IS NULL AND destination = $2"
        } else {
            place = "directory IS NULL AND destination IS NULL"
        }
        return try records(
            PostgresQuery(
                unsafeSQL: """
                    SELECT \(Self.readColumns) FROM download WHERE url = $1 AND \(place)
                    ORDER BY "createdAt" DESC, id COLLATE "C" DESC LIMIT 1
                    """, binds: bindings)
        ).first
    }

    public func isDestinationClaimed(_ destination: String, excluding id: String) throws(DownloadError) -> Bool {
        let query: PostgresQuery = """
            SELECT 1 FROM download WHERE destination = \(destination) AND id <> \(id) AND state <> 'cancelled' LIMIT 1
            """
        return try queue.perform { [logger] connection in
            !(try connection.query(query, logger: logger).blockingGet().isEmpty)
        }
    }

    public func lastPosition() throws(DownloadError) -> Double {
        let query: PostgresQuery = "SELECT COALESCE(max(\"queuePosition\"), 0)::float8 FROM download"
        return try queue.perform { [logger] connection in
            try connection.query(query, logger: logger).blockingGet().first?.decode(Double.self) ?? 0
        }
    }

    public func positions(priority: Int, excluding id: String, before cursor: DownloadManager.QueueCursor?)
        throws(DownloadError) -> QueuePositions
    {
        var bindings = PostgresBindings(capacity: 4)
        bindings.append(-priority)
        bindings.append(id)
        var before = "NULL::float8"
        if let cursor {
            bindings.append(cursor.position)
            bindings.append(cursor.id)
            before = """
                (SELECT "queuePosition" FROM download WHERE (-priority) = $1 AND id <> $2
                    AND ("queuePosition", id COLLATE "C") < ($3, $4::text COLLATE "C")
                    ORDER BY \(Self.reverseOrderKey) LIMIT 1)
                """
        }
        let query = PostgresQuery(
            unsafeSQL: """
                SELECT
                    (SELECT "queuePosition" FROM download WHERE (-priority) = $1 AND id <> $2
                        ORDER BY \(Self.orderKey) LIMIT 1),
                    (SELECT "queuePosition" FROM download WHERE (-priority) = $1 AND id <> $2
                        ORDER BY \(Self.reverseOrderKey) LIMIT 1),
                    \(before)
                """, binds: bindings)
        return try queue.perform { [logger] connection in
            guard let row = try connection.query(query, logger: logger).blockingGet().first else {
                return QueuePositions(lowest: nil, highest: nil, before: nil)
            }
            let (lowest, highest, preceding) = try row.decode((Double?, Double?, Double?).self)
            return QueuePositions(lowest: lowest, highest: highest, before: preceding)
        }
    }

    public func dependents(of ids: [String]) throws(DownloadError) -> [DownloadRecord] {
        guard !ids.isEmpty else { return [] }
        var bindings = PostgresBindings(capacity: 1)
        bindings.append(ids)
        return try records(
            PostgresQuery(
                unsafeSQL: """
                    SELECT \(Self.readColumns) FROM download
                    WHERE state = 'queued' AND prerequisites <> '[]' AND prerequisites::jsonb ?| $1::text[]
                    """, binds: bindings))
    }

    /// The downloads whose end this worker stored a notice of that is still pending (`PendingNotice.worker`).
    public func pendingNotices() throws(DownloadError) -> [DownloadRecord] {
        try records(
            PostgresQuery(
                unsafeSQL: "SELECT \(Self.readColumns) FROM download WHERE notice IS NOT NULL",
                binds: PostgresBindings())
        )
        .filter { $0.notice?.worker == worker }
    }

    /// The records a query's rows hold.
    func records(_ query: PostgresQuery) throws(DownloadError) -> [DownloadRecord] {
        try queue.perform { [logger] connection in
            try connection.query(query, logger: logger).blockingGet().map { row in
                try DownloadRecord(row: try Self.databaseRow(row))
            }
        }
    }
}
