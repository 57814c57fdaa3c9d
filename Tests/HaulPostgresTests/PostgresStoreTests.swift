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
            #expect(try store.appliedMigrations() == Array(1...11))
            #expect(try store.allRecords().isEmpty)
        }
        // A third, later, finds nothing to do.
        let third = try await PostgresStore.open(location)
        #expect(try third.appliedMigrations() == Array(1...11))
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

        // A pending notice reads back, is this worker's to deliver, and is forgotten by a notice update.
        record.notice = PendingNotice(
            id: "n1", event: .completed, at: Date(timeIntervalSince1970: 1_790_000_001), pending: ["hook"],
            worker: store.worker)
        try await store.committed(store.submit(.notice(record), awaited: true))
        #expect(try store.record(id: record.id)?.notice == record.notice)
        #expect(try store.pendingNotices().map(\.id) == [record.id])
        record.notice?.worker = "another"
        try await store.committed(store.submit(.notice(record), awaited: true))
        #expect(try store.pendingNotices().isEmpty)
        record.notice = nil
        try await store.committed(store.submit(.notice(record), awaited: true))
        #expect(try store.record(id: record.id)?.notice == nil)

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
        #expect((first + second).allSatisfy { $0.isFirst }, "each download's first lease")

        // b's lease on q2 lapses (a worker stopped, cut off): a takes q2 over under a newer lease, and b's writes to
        // it are refused from then on.
        let q2 = try #require(second.first)
        var lapsed = try b.renewLeases(worker: "b", ["q2": q2.lease, "q3": second[1].lease], for: .zero)
        #expect(lapsed == ["q2", "q3"])
        let taken = try a.claim(worker: "a", limit: 1, for: .seconds(60))
        #expect(taken.map(\.record.id) == ["q2"])
        #expect(taken[0].lease > q2.lease)
        #expect(!taken[0].isFirst, "a takeover follows the lease before it, which may have left a part file")
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
        let again = try b.claim(worker: "b", limit: 5, for: .seconds(60))
        #expect(again.map(\.record.id) == ["q2", "q3"])
        #expect(again.allSatisfy { !$0.isFirst })
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

        #expect(try b.claim(limit: 1, within: [], fleetTotal: nil).map(\.id) == ["q1"])
        #expect(b.holds("q1"))
        #expect(
            try a.claim(limit: 5, within: [], fleetTotal: nil).map(\.id) == ["q1", "q2"],
            "b's lapsed lease is taken over")
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

    @Test(
        "a host's slots take turns: with fewer slots than workers that want them, the one left out changes each turn, and a slot in use is never taken back"
    )
    func hostSlotsTakeTurns() async throws {
        let server = try server()
        let location = try PostgresLocation(server.url(database: server.createDatabase()))
        var stores: [String: PostgresStore] = [:]
        for name in ["a", "b", "c"] { stores[name] = try await PostgresStore.open(location, worker: name) }
        let opened = stores
        Teardowns.add { for store in opened.values { await store.close() } }
        // Limit 2, and each of the three wants one connection to the host.
        func ask(_ name: String, inUse: Int = 0, turn: Int) throws -> Int {
            let demand = HostDemand(inUse: inUse, wanted: 1)
            return try #require(opened[name]).hostSlots(["example.com": demand], limit: 2, turn: turn)
                .slots["example.com"] ?? -1
        }
        // Turn 0: a and b take the two slots, c waits, and a keeps its slot between two connections.
        #expect(try [ask("a", turn: 0), ask("b", turn: 0), ask("c", turn: 0), ask("a", turn: 0)] == [1, 1, 0, 1])
        // Turn 1 leaves a out: it gives its slot back between two connections, and c takes it.
        #expect(try [ask("a", turn: 1), ask("c", turn: 1), ask("a", turn: 1)] == [0, 1, 0])
        // Turn 2 leaves b out, but b's connection runs on: it keeps its slot until the connection ends.
        #expect(try [ask("b", inUse: 1, turn: 2), ask("a", turn: 2)] == [1, 0])
        #expect(try [ask("b", turn: 2), ask("a", turn: 2)] == [0, 1])
        // Whatever the turns, never more than the limit at once.
        #expect(try [ask("c", turn: 2), ask("b", turn: 0)] == [1, 0])
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
