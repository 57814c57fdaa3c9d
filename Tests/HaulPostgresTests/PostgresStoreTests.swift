import Foundation
import GRDB
import HaulCore
import HaulPostgres
import HaulTesting
import PostgresNIO
import Synchronization
import Testing

@testable import Haul

/// The shared store against a real PostgreSQL 15 started by the suite (`PostgresServer`).
@Suite("The PostgreSQL store", .serialized, .teardowns, .timeLimit(.minutes(3)))
struct PostgresStoreTests {
    /// A server of the test's own, stopped and deleted when the test ends.
    func server() throws -> PostgresServer {
        let server = try PostgresServer()
        Teardowns.add { server.stop() }
        return server
    }

    func makeRecord(
        url: String, destination: String, state: DownloadState = .queued, options: DownloadOptions = DownloadOptions()
    ) -> DownloadRecord {
        DownloadRecord(
            id: UUID().uuidString, url: url, finalURL: nil, directory: nil, destination: destination, state: state,
            totalLength: nil, durableOffset: 0, etag: nil, lastModified: nil, isLastModifiedStrong: false,
            isResumable: nil, isPartVerified: true, mayReplaceDestination: false, attempts: 0, lastError: nil,
            options: options, priority: 0, queuePosition: 1, prerequisites: [], rateLimit: nil, segments: nil,
            activeConnections: 0, createdAt: Date(timeIntervalSince1970: 1_790_000_000), updatedAt: Date(),
            errorCode: nil, errorStatus: nil, origin: .api, completedAt: nil)
    }

    @Test("store URLs: user, percent-encoded password, host, port, database, sslmode; errors never show the password")
    func locations() throws {
        let location = try PostgresLocation("postgres://alice:p%40ss%3Aw0rd@db.example:6543/queue?sslmode=require")
        #expect(location.username == "alice")
        #expect(location.password == "p@ss:w0rd")
        #expect(location.host == "db.example")
        #expect(location.port == 6543)
        #expect(location.database == "queue")
        #expect(location.tls == .require)
        #expect(location.description == "postgres://alice@db.example:6543/queue?sslmode=require")
        let plain = try PostgresLocation("postgresql://bob@127.0.0.1/haul")
        #expect(plain.port == 5432)
        #expect(plain.password == nil)
        #expect(plain.tls == .prefer)
        #expect(plain.description == "postgres://bob@127.0.0.1:5432/haul")

        let refused: [(String, String)] = [
            ("mysql://alice:hunter2@db/queue", "scheme mysql"),
            ("postgres://db.example/queue", "names no user"),
            ("postgres://alice:hunter2@db.example", "names no database"),
            ("postgres://alice:hunter2@db.example/queue?sslmode=sometimes", "sslmode=sometimes"),
            ("postgres://alice:hunter2@db.example/queue?connect_timeout=3", "connect_timeout"),
            ("not a url at all hunter2", "is not a URL"),
        ]
        for (text, problem) in refused {
            let error = try #require(throws: DownloadError.self) { try PostgresLocation(text) }
            #expect(error.message.contains(problem), "\(text): \(error.message)")
            #expect(!error.message.contains("hunter2"), "\(text): \(error.message)")
        }
    }

    @Test("two workers opening an empty database at once migrate it once, and both serve")
    func migratesOnce() async throws {
        let server = try server()
        let location = try PostgresLocation(server.url(database: try server.createDatabase()))
        async let first = PostgresStore.open(location)
        async let second = PostgresStore.open(location)
        let stores = try await [first, second]
        for store in stores {
            #expect(try store.appliedMigrations() == [1, 2, 3, 4, 5, 6, 7])
            #expect(try store.allRecords().isEmpty)
        }
        // A third, later, finds nothing to do.
        let third = try await PostgresStore.open(location)
        #expect(try third.appliedMigrations() == [1, 2, 3, 4, 5, 6, 7])
        for store in stores + [third] { await store.close() }
    }

    @Test("a record reads back as it was written, every field; updates, settings, runs and deletes")
    func records() async throws {
        let server = try server()
        let store = try await PostgresStore.open(try PostgresLocation(server.url(database: server.createDatabase())))
        Teardowns.add { await store.close() }

        var record = makeRecord(
            url: "https://example.com/a.iso", destination: "/srv/files/a.iso",
            options: DownloadOptions(maxConnectionsPerDownload: 4))
        record.finalURL = "https://mirror.example.com/a.iso"
        record.remoteFacts = RemoteFacts(
            totalLength: 1 << 40,
            validators: Validators(
                etag: EntityTag("\"v1\""), lastModified: "Tue, 24 Nov 2026 10:00:00 GMT", isLastModifiedStrong: true),
            isResumable: true)
        record.durableOffset = 12345
        record.segments = [Segment(start: 0, end: 100, offset: 50), Segment(start: 100, end: 200, offset: 150)]
        record.prerequisites = ["x", "y"]
        record.rateLimit = 1_000_000
        record.priority = DownloadPriority.high.rawValue
        record.queuePosition = 2.5
        record.error = DownloadError(.httpStatus, "the server answered 503", status: 503)
        record.folderDevice = 1
        record.folderInode = 2
        record.partDevice = 3
        record.partInode = 4
        record.createdAt = Date(timeIntervalSince1970: 1_790_000_000.25)
        try store.insert([record])

        var read = try #require(try store.record(id: record.id))
        read.updatedAt = record.updatedAt
        #expect(read == record)

        record.durableOffset = 99999
        record.isPartVerified = false
        try await store.committed(store.submit(.transfer(record), awaited: true))
        read = try #require(try store.record(id: record.id))
        #expect(read.durableOffset == 99999)
        #expect(read.isPartVerified == false)
        #expect(read.segments == record.segments)
        #expect(read.updatedAt >= record.updatedAt)

        var second = makeRecord(url: "https://example.com/b", destination: "/srv/files/b")
        second.createdAt = record.createdAt.addingTimeInterval(1)
        try store.save(second)
        second.attempts = 3
        try store.save(second)
        #expect(try store.allRecords().map(\.id) == [record.id, second.id])
        #expect(try store.record(id: second.id)?.attempts == 3)

        try store.delete(id: record.id)
        #expect(try store.allRecords().map(\.id) == [second.id])

        #expect(try store.settings() == nil)
        var settings = ManagerSettings()
        settings.maxConcurrentDownloads = 7
        try store.saveSettings(settings)
        try store.saveSettings(settings)
        #expect(try store.settings() == settings)

        let run = try store.beginRun()
        #expect(try store.beginRun() > run)
    }

    @Test("claims: queue order, each download to one worker, an expired lease taken over and its old holder fenced")
    func claims() async throws {
        let server = try server()
        let location = try PostgresLocation(server.url(database: server.createDatabase()))
        let (a, b) = (try await PostgresStore.open(location), try await PostgresStore.open(location))
        Teardowns.add {
            await a.close()
            await b.close()
        }
        func queued(_ name: String, priority: Int = 0, position: Double, state: DownloadState = .queued)
            -> DownloadRecord
        {
            var record = makeRecord(url: "https://example.com/\(name)", destination: "/srv/\(name)", state: state)
            record.id = name
            record.priority = priority
            record.queuePosition = position
            return record
        }
        var waiting = queued("waiting", position: 0)
        waiting.prerequisites = ["q3"]
        try a.insert(
            [
                queued("q1", position: 1), queued("q2", position: 2), queued("q3", position: 3),
                queued("high", priority: 10, position: 9), queued("paused", position: 0, state: .paused),
                queued("done", position: 0, state: .completed), waiting,
            ], saving: [])

        let first = try a.claim(worker: "a", limit: 2, for: .seconds(60))
        #expect(first.map(\.record.id) == ["high", "q1"])
        let second = try b.claim(worker: "b", limit: 10, for: .seconds(60))
        #expect(second.map(\.record.id) == ["q2", "q3"], "neither a's, nor paused, completed or waiting ones")
        #expect(try a.claim(worker: "a", limit: 10, for: .seconds(60)).isEmpty)
        #expect(Set((first + second).map(\.lease)).count == 4)

        // b's lease on q2 lapses (a worker stopped, cut off): a takes q2 over under a newer lease, and b's writes to
        // it are refused from then on.
        let q2 = try #require(second.first)
        var lapsed = try b.renewLeases(worker: "b", ["q2": q2.lease, "q3": second[1].lease], for: .zero)
        #expect(lapsed == ["q2", "q3"])
        let taken = try a.claim(worker: "a", limit: 1, for: .seconds(60))
        #expect(taken.map(\.record.id) == ["q2"])
        #expect(taken[0].lease > q2.lease)
        var stale = q2.record
        stale.durableOffset = 999
        let refused = try #require(throws: DownloadError.self) {
            try b.fencedUpdate(.transfer(stale), lease: q2.lease)
        }
        #expect(refused.code == .locked)
        #expect(try a.record(id: "q2")?.durableOffset == 0)
        var current = taken[0].record
        current.durableOffset = 123
        try a.fencedUpdate(.transfer(current), lease: taken[0].lease)
        #expect(try b.record(id: "q2")?.durableOffset == 123)
        lapsed = try b.renewLeases(worker: "b", ["q2": q2.lease], for: .seconds(60))
        #expect(lapsed.isEmpty, "b no longer holds q2")

        // Released, it is claimable again.
        try a.release("q2", lease: taken[0].lease)
        #expect(try b.claim(worker: "b", limit: 5, for: .seconds(60)).map(\.record.id) == ["q2", "q3"])
    }

    @Test(
        "what a worker asks instead of holding the queue: pages in queue order after a cursor, of all or some states; counts; the same request's newest; destinations; positions; blocked dependents"
    )
    func queries() async throws {
        let server = try server()
        let location = try PostgresLocation(server.url(database: server.createDatabase()))
        let store = try await PostgresStore.open(location)
        Teardowns.add { await store.close() }
        var records: [DownloadRecord] = []
        let states: [DownloadState] = [.queued, .paused, .completed, .failed]
        for index in 0..<200 {
            var record = makeRecord(
                url: "https://example.com/\(index % 150)", destination: "/srv/\(index)", state: states[index % 4])
            // Ties of priority and position are broken by the id, in byte order ("B" before "a").
            record.id = String(format: index % 2 == 0 ? "B%03d" : "a%03d", index)
            record.priority = [0, 10, -10][index % 3]
            record.queuePosition = Double(index % 7)
            record.createdAt = Date(timeIntervalSince1970: 1_790_000_000 + Double(index))
            records.append(record)
        }
        try store.insert(records, saving: [])
        func order(_ chosen: [DownloadRecord]) -> [String] {
            chosen.sorted { DownloadManager.QueueCursor($0).precedes(DownloadManager.QueueCursor($1)) }.map(\.id)
        }
        for filter in [nil, Set([DownloadState.paused]), [.queued, .failed]] as [Set<DownloadState>?] {
            var paged: [String] = []
            var cursor: DownloadManager.QueueCursor?
            while true {
                let page = try store.page(in: filter, after: cursor, limit: 13)
                paged += page.map(\.id)
                guard page.count == 13 else { break }
                cursor = DownloadManager.QueueCursor(try #require(page.last))
            }
            #expect(
                paged == order(records.filter { filter?.contains($0.state) ?? true }), "\(String(describing: filter))")
        }
        #expect(try store.counts() == [.queued: 50, .paused: 50, .completed: 50, .failed: 50])
        #expect(try Set(store.records(ids: ["B000", "a001", "none"]).map(\.id)) == ["B000", "a001"])

        // The same URL and destination added again (after a cancel): the later one is found.
        var again = makeRecord(url: "https://example.com/7", destination: "/srv/7", state: .cancelled)
        again.id = "z007"
        again.createdAt = Date(timeIntervalSince1970: 1_800_000_000)
        try store.insert([again], saving: [])
        #expect(try store.newest(url: "https://example.com/7", directory: nil, destination: "/srv/157")?.id == "a157")
        #expect(try store.newest(url: "https://example.com/7", directory: nil, destination: "/srv/7")?.id == "z007")
        #expect(try store.newest(url: "https://example.com/7", directory: "/srv", destination: nil) == nil)
        #expect(try store.isDestinationClaimed("/srv/8", excluding: "x"))
        #expect(try !store.isDestinationClaimed("/srv/8", excluding: "B008"))
        #expect(try !store.isDestinationClaimed("/srv/none", excluding: "x"))
        #expect(try store.lastPosition() == 6)

        let tens = order(records.filter { $0.priority == 10 })
        let positions = try store.positions(
            priority: 10, excluding: tens[0],
            before: DownloadManager.QueueCursor(try #require(records.first { $0.id == tens[5] })))
        let others = records.filter { $0.priority == 10 && $0.id != tens[0] }
        #expect(positions.lowest == others.map(\.queuePosition).min())
        #expect(positions.highest == others.map(\.queuePosition).max())
        #expect(positions.before == records.first { $0.id == tens[4] }?.queuePosition)

        // The queued downloads that wait for given ones.
        var dependents: [DownloadRecord] = []
        for (index, waited) in [["a003"], ["gone", "B004"], ["B002"], ["B000"]].enumerated() {
            // The third is paused: it waits for nothing until resumed.
            var record = makeRecord(
                url: "https://example.com/d\(index)", destination: "/srv/d\(index)",
                state: index == 2 ? .paused : .queued)
            record.id = "d\(index)"
            record.prerequisites = waited
            dependents.append(record)
        }
        try store.insert(dependents, saving: [])
        #expect(try Set(store.dependents(of: ["a003", "gone", "B002", "nothing"]).map(\.id)) == ["d0", "d1"])
        #expect(try store.dependents(of: ["B000"]).map(\.id) == ["d3"])

        // A download found by its brief id (aria2's gid), computed by the store as `DownloadID.brief` computes it:
        // a version 7 UUID's last 16 hex digits, a version 4 one's first 16, a short id's SHA-256.
        // ("a001" is one of the 200 above.)
        let briefs = ["0190f3a2-7b1c-7d4e-9f00-1a2b3c4d5e6f", "0190F3A2-7B1C-4D4E-9F00-1A2B3C4D5E6F", "short-one"].map {
            var record = makeRecord(url: "https://example.com/\($0)", destination: "/srv/\($0)", state: .queued)
            record.id = $0
            return record
        }
        try store.insert(briefs, saving: [])
        for id in ["0190f3a2-7b1c-7d4e-9f00-1a2b3c4d5e6f", "0190F3A2-7B1C-4D4E-9F00-1A2B3C4D5E6F", "a001", "short-one"]
        {
            #expect(try store.record(brief: DownloadID(id).brief)?.id == id, "\(id)")
        }
        #expect(DownloadID("0190f3a2-7b1c-7d4e-9f00-1a2b3c4d5e6f").brief == "9f001a2b3c4d5e6f")
        #expect(try store.record(brief: "0123456789abcdef") == nil)
    }

    @Test("a download confined to allowed folders is claimed only by a worker that may write there")
    func claimsWithinFolders() async throws {
        let server = try server()
        let store = try await PostgresStore.open(try PostgresLocation(server.url(database: server.createDatabase())))
        Teardowns.add { await store.close() }
        func record(_ id: String, _ destination: String, origin: DownloadOrigin, position: Double) -> DownloadRecord {
            var record = makeRecord(url: "https://example.com/\(id)", destination: destination)
            record.id = id
            record.origin = origin
            record.queuePosition = position
            return record
        }
        try store.insert(
            [
                record("srv", "/srv/files/a.bin", origin: .api, position: 1),
                record("deep", "/srv/files/sub/b.bin", origin: .api, position: 2),
                record("look-alike", "/srv/files-other/c.bin", origin: .api, position: 3),
                record("home", "/home/me/d.bin", origin: .api, position: 4),
                record("socket", "/home/me/e.bin", origin: .socket, position: 5),
            ], saving: [])
        let mine = try store.claim(worker: "a", limit: 10, for: .seconds(60), within: ["/srv/files"])
        #expect(mine.map(\.record.id) == ["srv", "deep", "socket"], "not a confined download outside /srv/files")
        let rest = try store.claim(worker: "b", limit: 10, for: .seconds(60), within: ["/home/me"])
        #expect(rest.map(\.record.id) == ["home"])
        #expect(
            try store.claim(worker: "c", limit: 10, for: .seconds(60), within: ["/"]).map(\.record.id) == ["look-alike"]
        )
    }

    @Test("claims of many workers at once never hand one download to two")
    func concurrentClaims() async throws {
        let server = try server()
        let location = try PostgresLocation(server.url(database: server.createDatabase()))
        var stores: [PostgresStore] = []
        for _ in 0..<4 { stores.append(try await PostgresStore.open(location)) }
        let all = stores
        Teardowns.add { for store in all { await store.close() } }
        try stores[0].insert(
            (0..<200).map {
                var record = makeRecord(url: "https://example.com/\($0)", destination: "/srv/\($0)")
                record.queuePosition = Double($0)
                return record
            }, saving: [])
        let claimed = try await withThrowingTaskGroup(of: [String].self) { group in
            for (index, store) in stores.enumerated() {
                group.addTask {
                    var mine: [String] = []
                    while true {
                        let claims = try store.claim(worker: "w\(index)", limit: 3, for: .seconds(60))
                        if claims.isEmpty { return mine }
                        mine += claims.map(\.record.id)
                    }
                }
            }
            return try await group.reduce(into: [[String]]()) { $0.append($1) }
        }
        let ids = claimed.flatMap { $0 }
        #expect(ids.count == 200)
        #expect(Set(ids).count == 200)
    }

    @Test(
        "a worker's writes are fenced by its leases (taken over: refused and told lost; held elsewhere: refused; released: free), and the event log brings what others wrote"
    )
    func workerLeases() async throws {
        let server = try server()
        let location = try PostgresLocation(server.url(database: server.createDatabase()))
        // b's leases expire as they are taken: the next claim of another worker takes them over.
        let a = try await PostgresStore.open(location, worker: "a", lease: .seconds(60))
        let b = try await PostgresStore.open(location, worker: "b", lease: .zero)
        let observer = try await PostgresStore.open(location, worker: "observer")
        Teardowns.add { for store in [a, b, observer] { await store.close() } }
        let lost = Mutex<[String]>([])
        b.onLostLease { id in lost.withLock { $0.append(id) } }
        // The log's events after where it stood, as a worker reads them: each download as it is now.
        var position = try observer.eventPosition()
        func changes() throws -> [DownloadRecord] {
            let events = try observer.events(after: position, limit: 100)
            position = events.last?.id ?? position
            return events.compactMap(\.record)
        }
        #expect(try changes().isEmpty, "nothing changed since the log's position was taken")

        var q1 = makeRecord(url: "https://example.com/1", destination: "/srv/1")
        q1.id = "q1"
        var q2 = makeRecord(url: "https://example.com/2", destination: "/srv/2")
        q2.id = "q2"
        q2.queuePosition = 2
        try a.insert([q1, q2], saving: [])
        #expect(Set(try changes().map(\.id)) == ["q1", "q2"])

        #expect(try b.claim(limit: 1, within: []).map(\.id) == ["q1"])
        #expect(b.holds("q1"))
        #expect(try a.claim(limit: 5, within: []).map(\.id) == ["q1", "q2"], "b's lapsed lease is taken over")
        #expect(a.holds("q1") && a.holds("q2"))

        // b still believes it holds q1: its write is refused, and told as lost once.
        var stale = q1
        stale.durableOffset = 999
        #expect(throws: DownloadError.self) { try b.save(stale) }
        #expect(lost.withLock { $0 } == ["q1"])
        #expect(!b.holds("q1"))
        #expect(throws: DownloadError.self, "still fenced by the lost lease") { try b.save(stale) }
        #expect(try b.renewLeases().isEmpty)
        // A download another worker holds cannot be changed or removed elsewhere.
        let refused = try #require(throws: DownloadError.self) {
            try b.save(q2)
        }
        #expect(refused.code == .locked)
        await #expect(throws: DownloadError.self) { try await b.committed(b.submit(.state(.paused, for: "q2"))) }
        #expect(throws: DownloadError.self) { try b.delete(id: "q2") }

        // The holder writes; the others see it in the feed.
        var current = q1
        current.durableOffset = 4096
        try a.save(current)
        #expect(try a.renewLeases().isEmpty)
        #expect(try changes().first { $0.id == "q1" }?.durableOffset == 4096)
        #expect(try a.record(id: "q1")?.durableOffset == 4096)

        // Released, q1 is anyone's again (b's run of it ended too).
        a.release("q1")
        a.flush()
        #expect(!a.holds("q1"))
        b.release("q1")
        current.durableOffset = 8192
        try b.save(current)
        #expect(try changes().first { $0.id == "q1" }?.durableOffset == 8192)
    }

    @Test(
        "the fleet's event log: every worker reads the same events under the same ids, in one order; reads continue where they stopped; a removal is an event"
    )
    func eventLog() async throws {
        let server = try server()
        let location = try PostgresLocation(server.url(database: server.createDatabase()))
        let a = try await PostgresStore.open(location, worker: "a")
        let b = try await PostgresStore.open(location, worker: "b")
        Teardowns.add { for store in [a, b] { await store.close() } }
        let (startA, startB) = (try a.eventPosition(), try b.eventPosition())
        var q1 = makeRecord(url: "https://example.com/1", destination: "/srv/1")
        q1.id = "q1"
        var q2 = makeRecord(url: "https://example.com/2", destination: "/srv/2")
        q2.id = "q2"
        try a.insert([q1], saving: [])
        try b.insert([q2], saving: [])
        try q1.apply(.pauseRequested)
        q1.updatedAt = Date(timeIntervalSince1970: 1_800_000_000)
        try a.save(q1)
        try b.delete(id: "q2")

        let seenByA = try a.events(after: startA, limit: 100)
        let seenByB = try b.events(after: startB, limit: 100)
        #expect(seenByA.map(\.id) == seenByB.map(\.id), "the same ids on every worker")
        #expect(
            seenByA.map { "\($0.kind) \($0.download)" } == ["added q1", "added q2", "changed q1", "removed q2"])
        #expect(zip(seenByA, seenByA.dropFirst()).allSatisfy { $0.id < $1.id }, "in the order of their ids")
        #expect(seenByA[2].record?.state == .paused, "each with its download as it is now")
        #expect(seenByA[1].record == nil && seenByA[3].record == nil, "q2 is gone")

        // A read of two, then the rest from where it stopped.
        let first = try a.events(after: startA, limit: 2)
        let rest = try a.events(after: try #require(first.last).id, limit: 100)
        #expect((first + rest).map(\.id) == seenByA.map(\.id))
        #expect(try a.events(after: try #require(seenByA.last).id, limit: 100).isEmpty)
        // Old events are forgotten.
        try a.pruneEvents(olderThan: .zero)
        #expect(try b.events(after: startB, limit: 100).isEmpty)
    }

    @Test("PostgreSQL restarts: the store reconnects, loses nothing committed, and a write made meanwhile lands")
    func restarts() async throws {
        let server = try server()
        let store = try await PostgresStore.open(try PostgresLocation(server.url(database: server.createDatabase())))
        Teardowns.add { await store.close() }
        let before = makeRecord(url: "https://example.com/before", destination: "/srv/before")
        try store.insert([before], saving: [])

        // Restarted between two writes: the next one finds the connection broken and makes a new one.
        try server.stopServer()
        try server.start()
        let after = makeRecord(url: "https://example.com/after", destination: "/srv/after")
        try store.insert([after], saving: [])
        #expect(Set(try store.allRecords().map(\.id)) == [before.id, after.id])

        // Down while a write is made: it waits for the server, and lands once it is back.
        try server.stopServer()
        var changed = before
        changed.durableOffset = 4096
        let commit = store.submit(try .transfer(changed), awaited: true)
        try server.start()
        try await store.committed(commit)
        #expect(try store.record(id: before.id)?.durableOffset == 4096)
    }

    @Test("a store that cannot be reached, or refuses the password, says where, and never shows the password")
    func unreachable() async throws {
        let server = try server()
        let database = try server.createDatabase()
        let closed = freePort()
        let nowhere = try PostgresLocation("postgres://haul:hunter2@127.0.0.1:\(closed)/\(database)?sslmode=disable")
        let refused = try await #require(throws: DownloadError.self) { try await PostgresStore.open(nowhere) }
        #expect(refused.code == .store)
        #expect(refused.message.contains("127.0.0.1:\(closed)"), "\(refused.message)")
        #expect(!refused.message.contains("hunter2"), "\(refused.message)")
        #expect(!String(reflecting: refused).contains("hunter2"))

        let wrong = try PostgresLocation(server.url(database: database, password: "hunter2"))
        let denied = try await #require(throws: DownloadError.self) { try await PostgresStore.open(wrong) }
        #expect(denied.message.contains("password authentication failed"), "\(denied.message)")
        #expect(denied.message.contains("127.0.0.1:\(server.port)"), "\(denied.message)")
        #expect(!denied.message.contains("hunter2"), "\(denied.message)")
        #expect(!denied.message.contains(server.password), "\(denied.message)")
    }
}

/// A manager whose store is PostgreSQL: what it does is the same as with SQLite, and what it stored is there for the
/// next manager.
@Suite("A manager on the PostgreSQL store", .serialized, .teardowns, .timeLimit(.minutes(3)))
struct PostgresManagerTests {
    /// A PostgreSQL, a web server and a folder for the files, each gone when the test ends.
    static func setUp() async throws -> (PostgresServer, FaultServer, String) {
        let server = try PostgresServer()
        Teardowns.add { server.stop() }
        let web = try await FaultServer.start()
        Teardowns.add { await web.stop() }
        let folder = NSTemporaryDirectory() + "haul-postgres-files-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        Teardowns.add { try? FileManager.default.removeItem(atPath: folder) }
        return (server, web, folder)
    }

    @Test("downloads complete with their rows in PostgreSQL, and a new manager on the store finds them as they ended")
    func downloadsAndReopens() async throws {
        let (server, web, folder) = try await Self.setUp()
        let bodies = (0..<3).map { testBytes(3 << 20, seed: UInt64($0 + 1)) }
        for (index, body) in bodies.enumerated() { web.serve("/\(index).bin", .init(body: body)) }
        web.serve("/missing", .init(body: []) { _, _ in .status(404, headers: [:]) })

        let location = try PostgresLocation(server.url(database: try server.createDatabase()))
        func manager() async throws -> (DownloadManager, PostgresStore) {
            let store = try await PostgresStore.open(location)
            var configuration = DownloadManager.Configuration(stateDirectory: nil)
            configuration.store = store
            configuration.engine.jitter = { 1 }
            return (try DownloadManager(configuration: configuration), store)
        }

        let (first, firstStore) = try await manager()
        var ids: [DownloadID] = []
        for index in bodies.indices {
            ids.append(try await first.add(web.url("/\(index).bin"), to: .file(folder + "/\(index).bin")))
        }
        let missing = try await first.add(web.url("/missing"), to: .file(folder + "/missing.bin"))
        for (index, id) in ids.enumerated() {
            let result = try await first.result(of: id)
            #expect(result.bytes == Int64(bodies[index].count))
            #expect(FileManager.default.contents(atPath: folder + "/\(index).bin") == Data(bodies[index]))
        }
        await #expect(throws: DownloadError.self) { try await first.result(of: missing) }
        await first.shutdown()
        await firstStore.close()

        let (second, secondStore) = try await manager()
        for (index, id) in ids.enumerated() {
            let snapshot = try await second.snapshot(id)
            #expect(snapshot.state == .completed)
            #expect(snapshot.destination == folder + "/\(index).bin")
            #expect(snapshot.receivedBytes == Int64(bodies[index].count))
        }
        let failed = try await second.snapshot(missing)
        #expect(failed.state == .failed)
        #expect(failed.error?.status == 404, "\(String(describing: failed.error))")
        let rows = try secondStore.allRecords()
        #expect(Set(rows.map(\.id)) == Set((ids + [missing]).map(\.rawValue)))
        await second.shutdown()
        await secondStore.close()
    }

    @Test(
        "two workers on one store share its queue: each download runs once, on one of them, and both hear every result")
    func workersShare() async throws {
        let (server, web, folder) = try await Self.setUp()
        let bodies = (0..<40).map { testBytes(256 << 10, seed: UInt64($0 + 1)) }
        for (index, body) in bodies.enumerated() { web.serve("/\(index).bin", .init(body: body)) }

        let location = try PostgresLocation(server.url(database: try server.createDatabase()))
        var workers: [(DownloadManager, PostgresStore)] = []
        for name in ["a", "b"] {
            let store = try await PostgresStore.open(location, worker: name)
            var configuration = DownloadManager.Configuration(stateDirectory: nil)
            configuration.store = store
            configuration.maxConcurrentDownloads = 3
            configuration.engine.jitter = { 1 }
            workers.append((try DownloadManager(configuration: configuration), store))
        }
        let runs = workers.map { worker in Task { await worker.0.run() } }
        let (a, b) = (workers[0].0, workers[1].0)
        var ids: [DownloadID] = []
        for index in bodies.indices {
            ids.append(try await a.add(web.url("/\(index).bin"), to: .file(folder + "/\(index).bin")))
        }
        // b learns of them from the store, and of a's results through its change feed; a of b's.
        for manager in [a, b] {
            for (index, result) in await manager.results(of: ids).enumerated() {
                #expect(try result.get().bytes == Int64(bodies[index].count))
            }
        }
        for (index, body) in bodies.enumerated() {
            #expect(FileManager.default.contents(atPath: folder + "/\(index).bin") == Data(body))
            #expect(web.bodyBytesSent(for: "/\(index).bin") == body.count, "download \(index) ran once")
        }
        let rows = try workers[0].1.allRecords()
        #expect(rows.count == 40 && rows.allSatisfy { $0.state == .completed })
        #expect(
            try server.execute("SELECT count(*) FROM download WHERE lease IS NOT NULL", database: location.database)
                == "0", "every lease was released")
        for run in runs { run.cancel() }
        for run in runs { await run.value }
        for (_, store) in workers { await store.close() }
    }

    @Test(
        "a worker holds only what it runs: pages, totals, an add found again, moves, cancels and clean are answered by the store"
    )
    func holdsOnlyWhatItRuns() async throws {
        let (server, web, folder) = try await Self.setUp()
        let store = try await PostgresStore.open(
            try PostgresLocation(server.url(database: try server.createDatabase())), worker: "a")
        Teardowns.add { await store.close() }
        var configuration = DownloadManager.Configuration(stateDirectory: nil)
        configuration.store = store
        let manager = try DownloadManager(configuration: configuration)
        let priorities: [DownloadPriority] = [.low, .normal, .high]
        let requests = (0..<300).map { index in
            DownloadRequest(
                url: web.url("/\(index).bin"), destination: .file(folder + "/\(index).bin"),
                priority: priorities[index % 3], isPaused: true)
        }
        let ids = try await manager.add(requests).map(\.id)
        #expect(await manager.heldDownloads == 0)
        func all() async -> [DownloadID] {
            var seen: [DownloadID] = []
            var cursor: DownloadManager.QueueCursor?
            repeat {
                let page = await manager.snapshots(in: nil, after: cursor, limit: 40)
                seen += page.downloads.map(\.id)
                cursor = page.next
            } while cursor != nil
            return seen
        }
        // Queue order: high first, then each priority in the order added.
        let expected = [2, 1, 0].flatMap { priority in ids.indices.filter { $0 % 3 == priority }.map { ids[$0] } }
        #expect(await all() == expected)
        #expect(await manager.stats().counts[.paused] == 300)

        // The same requests again find the same downloads (the store's lookup), and add no row.
        #expect(try await manager.add(requests).map(\.id) == ids)
        #expect(try store.counts() == [.paused: 300])

        // The last low one to the top of the low ones; one before another of its priority; a normal one before the
        // first high one (it takes that priority).
        try await manager.move(ids[297], to: .top)
        try await manager.move(ids[9], before: ids[3])
        try await manager.move(ids[1], before: ids[2])
        var order = await all()
        #expect(order.first == ids[1])
        #expect(Array(order[200...204]) == [ids[297], ids[0], ids[9], ids[3], ids[6]])

        for id in ids.prefix(5) { try await manager.cancel(id) }
        #expect(try await manager.clean() == 5)
        order = await all()
        #expect(order.count == 295 && Set(order) == Set(ids.dropFirst(5)))
        #expect(await manager.heldDownloads == 0)
        #expect(web.requests(to: "/0.bin").isEmpty)
    }

    @Test(
        "the fleet's rate limit, set on one worker, is shared among the workers that transfer, and they keep it together"
    )
    func sharedRateLimit() async throws {
        let (server, web, folder) = try await Self.setUp()
        // The server sends faster than either worker's share: the limit, not the server, sets the pace.
        for index in 0..<2 {
            web.serve(
                "/\(index).bin", .init(body: testBytes(32 << 20, seed: UInt64(index + 1)), bytesPerSecond: 2 << 20))
        }
        let location = try PostgresLocation(server.url(database: try server.createDatabase()))
        var managers: [DownloadManager] = []
        for name in ["a", "b"] {
            let store = try await PostgresStore.open(location, worker: name, lease: .seconds(1))
            Teardowns.add { await store.close() }
            var configuration = DownloadManager.Configuration(stateDirectory: nil)
            configuration.store = store
            configuration.maxConcurrentDownloads = 1
            configuration.persistsSettings = true
            managers.append(try DownloadManager(configuration: configuration))
        }
        let (a, b) = (managers[0], managers[1])
        let runs = managers.map { manager in Task { await manager.run() } }
        try await a.setRateLimit(400_000)
        // One connection each: a connection's reads are paid for one by one.
        let single = DownloadOptions(maxConnectionsPerDownload: 1)
        let ids = [
            try await a.add(web.url("/0.bin"), to: .file(folder + "/0.bin"), options: single),
            try await a.add(web.url("/1.bin"), to: .file(folder + "/1.bin"), options: single),
        ]
        // One download each (-j 1): both workers transfer.
        // Polled: the workers' pulses come every third of their lease.
        let deadline = ContinuousClock.now + .seconds(20)
        var shared = false
        while !shared, ContinuousClock.now < deadline {
            let workers = Set([try? await a.snapshot(ids[0]), try? await a.snapshot(ids[1])].compactMap { $0?.worker })
            let (bLimit, aShare, bShare) = (
                await b.currentSettings().rateLimit, await a.rateShare(of: 400_000), await b.rateShare(of: 400_000)
            )
            shared = workers == ["a", "b"] && bLimit == 400_000 && aShare == 200_000 && bShare == 200_000
            if !shared { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(shared, "each of the two transferring workers takes half of the fleet's limit")
        // The bytes both received over six seconds, each as its own worker sees it (the running one's is live):
        // about 2.4 MB at the fleet's limit, 4.8 MB were each worker's limit the whole of it. A limiter counts a read
        // once it arrived (up to 256 KiB, paid for by waiting after it), and progress is told every half second: the
        // bound allows for both.
        func received() async -> Int64 {
            var total: Int64 = 0
            for id in ids {
                let seen = [try? await a.snapshot(id), try? await b.snapshot(id)].compactMap { $0?.receivedBytes }
                total += seen.max() ?? 0
            }
            return total
        }
        let (before, started) = (await received(), ContinuousClock.now)
        try await Task.sleep(for: .seconds(6))
        let (after, elapsed) = (await received(), ContinuousClock.now - started)
        let rate =
            Double(after - before)
            / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
        #expect(rate <= 400_000 * 1.35, "\(Int(rate)) bytes a second together, against a limit of 400,000")
        #expect(rate >= 400_000 * 0.5, "\(Int(rate)) bytes a second together: both transfer")
        for id in ids { try await a.cancel(id) }
        for run in runs { run.cancel() }
        for run in runs { await run.value }
    }

    @Test("a download waiting for one that failed fails too, with the reason, though no worker claims it")
    func dependentOfFailed() async throws {
        let (server, web, folder) = try await Self.setUp()
        web.serve("/missing", .init(body: []) { _, _ in .status(404, headers: [:]) })
        web.serve("/next", .init(body: testBytes(1024, seed: 3)))
        let store = try await PostgresStore.open(
            try PostgresLocation(server.url(database: try server.createDatabase())), worker: "a")
        Teardowns.add { await store.close() }
        var configuration = DownloadManager.Configuration(stateDirectory: nil)
        configuration.store = store
        configuration.engine.jitter = { 1 }
        let manager = try DownloadManager(configuration: configuration)
        let run = Task { await manager.run() }
        let missing = try await manager.add(web.url("/missing"), to: .file(folder + "/missing.bin"))
        await #expect(throws: DownloadError.self) { try await manager.result(of: missing) }
        // Added after its prerequisite failed: only the fleet's pass over the queue can fail it.
        let next = try await manager.add(web.url("/next"), to: .file(folder + "/next.bin"), after: [missing])
        let failure = try await #require(throws: DownloadError.self) { try await manager.result(of: next) }
        #expect(failure.message.contains("it waits for failed"), "\(failure.message)")
        #expect(web.requests(to: "/next").isEmpty)
        run.cancel()
        await run.value
    }

    /// With a short lease, the renewal finds it lost; with a long one, the next checkpoint's write is refused by its
    /// fence.
    @Test(
        "a worker whose lease is taken over stops that download at once, and nothing it writes afterwards reaches the store",
        arguments: [Duration.seconds(1), .seconds(60)])
    func leaseTakenOver(lease: Duration) async throws {
        let (server, web, folder) = try await Self.setUp()
        let body = testBytes(8 << 20, seed: 7)
        web.serve("/slow.bin", .init(body: body, bytesPerSecond: 1 << 20))

        let database = try server.createDatabase()
        let store = try await PostgresStore.open(
            try PostgresLocation(server.url(database: database)), worker: "a", lease: lease)
        Teardowns.add { await store.close() }
        let recorder = LogRecorder()
        var configuration = DownloadManager.Configuration(stateDirectory: nil)
        configuration.store = store
        configuration.logger = recorder.logger()
        configuration.engine.jitter = { 1 }
        configuration.engine.checkpointInterval = .milliseconds(200)
        let manager = try DownloadManager(configuration: configuration)
        let run = Task { await manager.run() }
        let id = try await manager.add(web.url("/slow.bin"), to: .file(folder + "/slow.bin"))
        for await event in manager.events(for: id) {
            if case .progress(let progress) = event, progress.receivedBytes > 0 { break }
        }

        // Another worker takes it over (as once the lease expired): a's renewal finds the lease gone.
        let row = "SELECT state, \"durableOffset\", \"updatedAt\" FROM download WHERE id = '\(id)'"
        try server.execute(
            "UPDATE download SET worker = 'thief', lease = nextval('lease_number'), "
                + "\"leaseExpires\" = now() + interval '1 hour' WHERE id = '\(id)'", database: database)
        let stolen = try server.execute(row, database: database)
        _ = await recorder.line { $0.contains("download \(id) was taken over by another worker") }
        // Its run ends without storing anything: not its checkpoints, not the queued state a shutdown stores.
        run.cancel()
        await run.value
        store.flush()
        #expect(try server.execute(row, database: database) == stolen)
        #expect(!store.holds(id.rawValue))
        #expect(try server.execute("SELECT worker FROM download WHERE id = '\(id)'", database: database) == "thief")
    }
}
