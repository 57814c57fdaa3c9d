import Foundation
import GRDB
import GRDBSQLite
import HaulCore
import HaulTesting
import Synchronization
import Testing

@testable import Haul

@Suite("The store's write queue (group commit)", .timeLimit(.minutes(1)))
struct CommitQueueTests {
    static func queue(companyWindow: TimeInterval = 0.002) throws -> (CommitQueue<Database>, DatabaseQueue) {
        let database = try DatabaseQueue()
        try database.write { db in
            try db.execute(sql: "CREATE TABLE t (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
        }
        let queue = CommitQueue(writer: database, companyWindow: companyWindow) { error in
            DownloadError(.store, "write failed: \(error)", underlying: error)
        }
        return (queue, database)
    }

    @Test("writes no one waits for wait for one someone waits for, and share its transaction")
    func company() async throws {
        // A window of an hour: the writes are committed only with company (or the test runs out of time).
        let (queue, database) = try Self.queue(companyWindow: 3600)
        // Alone, a write no one waits for is not committed: half a second passes without it running (without the
        // window the drain thread commits it within microseconds). An absence can only be awaited for a while.
        let ran = DispatchSemaphore(value: 0)
        let first = queue.submit(awaited: false) { db in
            try db.execute(sql: "INSERT INTO t (id, value) VALUES (10, 'first')")
            ran.signal()
        }
        #expect(await onOwnThread { ran.wait(timeout: .now() + 0.5) } == .timedOut)
        #expect(queue.statistics.commits == 0)
        let lazy =
            [first]
            + (0..<3).map { index in
                queue.submit(awaited: false) { db in
                    try db.execute(sql: "INSERT INTO t (id, value) VALUES (\(index), 'lazy')")
                }
            }
        let awaited = queue.submit(awaited: true, startsAtOnce: true) { db in
            try db.execute(sql: "INSERT INTO t (id, value) VALUES (3, 'awaited')")
        }
        #expect(await queue.completion(of: awaited) == nil)
        for ticket in lazy { #expect(await queue.completion(of: ticket) == nil) }
        #expect(queue.statistics.commits == 1 && queue.statistics.writes == 5)
        #expect(try await database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM t") } == 5)
        // Someone waiting for everything (a shutdown) is company too: a write no one waits for is committed then.
        _ = queue.submit(awaited: false) { db in try db.execute(sql: "INSERT INTO t (id, value) VALUES (4, 'x')") }
        queue.waitUntilIdle()
        #expect(queue.statistics.commits == 2)
    }

    @Test("writes queued together commit in one transaction, in the order they were queued")
    func grouped() async throws {
        let (queue, database) = try Self.queue()
        var tickets: [UInt64] = []
        for index in 0..<100 {
            tickets.append(
                queue.submit(awaited: true) { db in
                    try db.execute(sql: "INSERT INTO t (id, value) VALUES (?, 'a')", arguments: [index])
                    // Each write sees the ones queued before it.
                    let count = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM t")
                    if count != index + 1 { throw DownloadError(.store, "out of order at \(index)") }
                })
        }
        // Nothing is committed before someone waits; the first to wait commits all hundred at once.
        #expect(queue.statistics.commits == 0)
        let last = await queue.completion(of: tickets[99])
        #expect(last == nil)
        #expect(queue.statistics.commits == 1 && queue.statistics.writes == 100)
        for ticket in tickets {
            let failure = await queue.completion(of: ticket)
            #expect(failure == nil)
        }
        #expect(try await database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM t") } == 100)
    }

    @Test("a write someone waits for commits with synchronous=FULL, with its group; one no one waits for with NORMAL")
    func durableWhenAwaited() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("haul-commit-\(UUID())").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        var configuration = Configuration()
        configuration.journalMode = .wal
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = NORMAL") }
        let database = try DatabaseQueue(path: folder + "/t.sqlite", configuration: configuration)
        let queue = CommitQueue(writer: database) { error in DownloadError(.store, "\(error)", underlying: error) }
        let seen = Mutex<[String: Int]>([:])
        func noting(_ key: String) -> @Sendable (Database) throws -> Void {
            { db in
                let mode = try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1
                seen.withLock { $0[key] = mode }
            }
        }
        // SQLite's values: 1 is NORMAL, 2 is FULL.
        let alone = queue.submit(awaited: false, noting("alone"))
        queue.waitUntilIdle()
        _ = await queue.completion(of: alone)
        // Queued behind one someone waits for, before anyone commits: the drain that the second starts commits both
        // in one group.
        let awaited = queue.submit(awaited: true, noting("awaited"))
        let unawaited = queue.submit(awaited: false, noting("beside"))
        _ = await queue.completion(of: awaited)
        _ = await queue.completion(of: unawaited)
        let after = queue.submit(awaited: false, noting("after"))
        queue.waitUntilIdle()
        _ = await queue.completion(of: after)
        #expect(seen.withLock { $0 } == ["alone": 1, "beside": 2, "awaited": 2, "after": 1])
    }

    @Test("a write that fails is reported to its caller alone; the writes around it are committed")
    func failureIsolated() async throws {
        let (queue, database) = try Self.queue()
        let first = queue.submit(awaited: true) { db in try db.execute(sql: "INSERT INTO t (id, value) VALUES (1, 'a')")
        }
        let clash = queue.submit(awaited: true) { db in try db.execute(sql: "INSERT INTO t (id, value) VALUES (1, 'b')")
        }
        let third = queue.submit(awaited: true) { db in try db.execute(sql: "INSERT INTO t (id, value) VALUES (3, 'c')")
        }
        let thirdFailure = await queue.completion(of: third)
        let firstFailure = await queue.completion(of: first)
        #expect(thirdFailure == nil && firstFailure == nil)
        let failure = await queue.completion(of: clash)
        #expect(failure?.code == .store)
        #expect(failure?.message.contains("UNIQUE") == true)
        let rows = try await database.read { db in try String.fetchAll(db, sql: "SELECT value FROM t ORDER BY id") }
        #expect(rows == ["a", "c"])
    }

    @Test("perform waits for its own write and returns its value; it commits what was queued before it too")
    func perform() async throws {
        let (queue, _) = try Self.queue()
        let queued = queue.submit(awaited: true) { db in
            try db.execute(sql: "INSERT INTO t (id, value) VALUES (1, 'a')")
        }
        let count = try queue.perform { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM t") ?? -1 }
        #expect(count == 1)
        let queuedFailure = await queue.completion(of: queued)
        #expect(queuedFailure == nil)
        #expect(throws: DownloadError.self) {
            try queue.perform { db in try db.execute(sql: "INSERT INTO t (id, value) VALUES (1, 'again')") }
        }
    }

    @Test("many tasks writing at once: every write lands once")
    func concurrent() async throws {
        let (queue, database) = try Self.queue()
        await withTaskGroup(of: DownloadError?.self) { group in
            for index in 0..<400 {
                group.addTask {
                    let ticket = queue.submit(awaited: true) { db in
                        try db.execute(sql: "INSERT INTO t (id, value) VALUES (?, 'x')", arguments: [index])
                    }
                    return await queue.completion(of: ticket)
                }
            }
            for await failure in group { #expect(failure == nil) }
        }
        #expect(try await database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM t") } == 400)
        #expect(queue.statistics.writes == 400)
        queue.waitUntilIdle()
    }

    @Test(
        "writers that wait (on threads of their own) and writers that are answered later, all at once: each write lands once, in each writer's order"
    )
    func mixedWriters() async throws {
        let (queue, database) = try Self.queue()
        try await database.write { db in try db.execute(sql: "CREATE TABLE log (writer INTEGER, step INTEGER)") }
        let threads = (0..<8).map { writer in
            Thread {
                for step in 0..<50 {
                    try? queue.perform { db in
                        try db.execute(sql: "INSERT INTO log VALUES (?, ?)", arguments: [writer, step])
                    }
                }
            }
        }
        for thread in threads { thread.start() }
        await withTaskGroup(of: Void.self) { group in
            for writer in 8..<24 {
                group.addTask {
                    for step in 0..<50 {
                        let ticket = queue.submit(awaited: true) { db in
                            try db.execute(sql: "INSERT INTO log VALUES (?, ?)", arguments: [writer, step])
                        }
                        let failure = await queue.completion(of: ticket)
                        #expect(failure == nil)
                    }
                }
            }
        }
        while threads.contains(where: { !$0.isFinished }) { await Task.yield() }
        queue.waitUntilIdle()
        let rows = try await database.read { db in
            try Row.fetchAll(db, sql: "SELECT writer, step FROM log ORDER BY rowid").map {
                ($0[0] as Int, $0[1] as Int)
            }
        }
        #expect(rows.count == 24 * 50)
        for writer in 0..<24 {
            #expect(rows.filter { $0.0 == writer }.map(\.1) == Array(0..<50), "writer \(writer)")
        }
    }

    @Test("a write no one waits for is committed anyway, by the drain thread, not at the next write waited for")
    func unawaited() async throws {
        let (queue, database) = try Self.queue()
        // The write itself says when it ran: nothing here asks the queue for its commit.
        await withCheckedContinuation { (ran: CheckedContinuation<Void, Never>) in
            _ = queue.submit(awaited: false) { db in
                try db.execute(sql: "INSERT INTO t (id, value) VALUES (1, 'a')")
                ran.resume()
            }
        }
        queue.waitUntilIdle()
        #expect(try await database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM t") } == 1)
        #expect(queue.statistics.commits == 1)
    }

    @Test(
        "a large write waited for starts at once on the drain thread, while its caller goes on; the wait still reports it"
    )
    func startsAtOnce() async throws {
        let (queue, database) = try Self.queue()
        // Another write waited for is left to its caller; this one is being committed as soon as it is queued.
        _ = queue.submit(awaited: true) { _ in }
        #expect(!queue.isCommitting)
        queue.waitUntilIdle()
        // The write holds its commit open until the test looked.
        let gate = DispatchSemaphore(value: 0)
        let ticket = queue.submit(awaited: true, startsAtOnce: true) { db in
            gate.wait()
            try db.execute(sql: "INSERT INTO t (id, value) VALUES (1, 'a')")
        }
        #expect(queue.isCommitting)
        gate.signal()
        #expect(await queue.completion(of: ticket) == nil)
        #expect(try await database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM t") } == 1)
        // Its failure is the caller's to collect, as for any write it waits for.
        let clash = queue.submit(awaited: true, startsAtOnce: true) { db in
            try db.execute(sql: "INSERT INTO t (id, value) VALUES (1, 'b')")
        }
        #expect(await queue.completion(of: clash)?.code == .store)
    }

    @Test("a group's transaction commits when its writes succeed and rolls back when one throws")
    func groupTransaction() throws {
        let database = try DatabaseQueue()
        try database.write { db in try db.execute(sql: "CREATE TABLE t (id INTEGER PRIMARY KEY, value TEXT NOT NULL)") }
        try database.writeWithoutTransaction { db in try Self.groupTransactions(in: db) }
    }

    static func groupTransactions(in db: Database) throws {
        try db.inGroupTransaction { try db.execute(sql: "INSERT INTO t (id, value) VALUES (1, 'kept')") }
        #expect(!db.isInsideTransaction)
        #expect(throws: DatabaseError.self) {
            try db.inGroupTransaction {
                try db.execute(sql: "INSERT INTO t (id, value) VALUES (2, 'undone')")
                try db.execute(sql: "INSERT INTO t (id, value) VALUES (1, 'clash')")
            }
        }
        #expect(!db.isInsideTransaction)
        // A transaction SQLite ended by itself (as it does after a full disk) is reported as aborted, not as a
        // commit with no transaction, and what it wrote is gone.
        let aborted = #expect(throws: DatabaseError.self) {
            try db.inGroupTransaction {
                try db.execute(sql: "INSERT INTO t (id, value) VALUES (3, 'lost')")
                try db.execute(sql: "ROLLBACK")
            }
        }
        #expect(aborted?.resultCode == .SQLITE_ABORT)
        #expect(try String.fetchAll(db, sql: "SELECT value FROM t ORDER BY id") == ["kept"])
        // Its statements stay prepared for the next transaction: the connection's prepared statements are the
        // same after another one.
        let before = Self.prepared(db)
        #expect(before.contains("BEGIN IMMEDIATE TRANSACTION") && before.contains("COMMIT TRANSACTION"))
        try db.inGroupTransaction { try db.execute(sql: "INSERT INTO t (id, value) VALUES (4, 'again')") }
        #expect(Self.prepared(db) == before)
        #expect(try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM t") == 2)
    }

    /// The SQL of every statement prepared on the connection.
    static func prepared(_ db: Database) -> [String] {
        var texts: [String] = []
        var statement = sqlite3_next_stmt(db.sqliteConnection, nil)
        while let current = statement {
            texts.append(String(cString: sqlite3_sql(current)))
            statement = sqlite3_next_stmt(db.sqliteConnection, current)
        }
        return texts.sorted()
    }

    @Test("waitUntilIdle returns once everything queued before it is committed")
    func idle() async throws {
        let (queue, database) = try Self.queue()
        for index in 0..<10 {
            _ = queue.submit(awaited: true) { db in
                try db.execute(sql: "INSERT INTO t (id, value) VALUES (?, 'x')", arguments: [index])
            }
        }
        queue.waitUntilIdle()
        #expect(try await database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM t") } == 10)
    }

    @Test("settle commits what is queued and ends the drain thread: the queue (and its store) goes with its last owner")
    func settle() async throws {
        var (queue, database): (CommitQueue<Database>?, DatabaseQueue) = try Self.queue()
        // Committed by the drain thread, which would otherwise idle for seconds holding the queue.
        _ = queue?.submit(awaited: true, startsAtOnce: true) { db in
            try db.execute(sql: "INSERT INTO t (id, value) VALUES (1, 'x')")
        }
        queue?.settle()
        #expect(try await database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM t") } == 1)
        weak let gone = queue
        queue = nil
        // The thread's closure lets go of the queue as its loop returns, right after settle saw it end.
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(2)
        while gone != nil, clock.now < deadline { await Task.yield() }
        #expect(gone == nil, "the drain thread still holds the queue")
    }
}
