import Foundation
import GRDB
import HaulCore
import HaulPostgres
import HaulTesting
import PostgresNIO
import Synchronization
import Testing

@testable import Haul

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

    /// The store of worker `a` on a new database of `server`, closed when the test ends, and the configuration of a
    /// manager on it.
    static func workerA(on server: PostgresServer) async throws -> (PostgresStore, DownloadManager.Configuration) {
        let store = try await PostgresStore.open(
            try PostgresLocation(server.url(database: try server.createDatabase())), worker: "a")
        Teardowns.add { await store.close() }
        var configuration = DownloadManager.Configuration(stateDirectory: nil)
        configuration.store = store
        return (store, configuration)
    }

    @Test("-c is refused on a shared store, and the file it names is left as it is")
    func continueRefused() async throws {
        let (server, web, folder) = try await Self.setUp()
        web.serve("/f", .init(body: testBytes(1000)))
        let path = folder + "/f.bin"
        _ = FileManager.default.createFile(atPath: path, contents: Data([1, 2, 3]))
        let (_, configuration) = try await Self.workerA(on: server)
        let manager = try DownloadManager(configuration: configuration)
        let options = DownloadOptions(continuePartial: true)
        await #expect {
            try await manager.add(web.url("/f"), to: .file(path), options: options)
        } throws: {
            ($0 as? DownloadError)?.code == .invalidArgument && "\($0)".contains("shared store")
        }
        #expect(FileManager.default.contents(atPath: path) == Data([1, 2, 3]))
        #expect(!FileManager.default.fileExists(atPath: path + ".part"))
        await manager.shutdown()
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
        let runs = workers.map { worker in Task { try await worker.0.run() } }
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
        for run in runs { try await run.value }
        for (_, store) in workers { await store.close() }
    }

    @Test(
        "a worker holds only what it runs: pages, totals, an add found again, moves, cancels and clean are answered by the store"
    )
    func holdsOnlyWhatItRuns() async throws {
        let (server, web, folder) = try await Self.setUp()
        let (store, configuration) = try await Self.workerA(on: server)
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
        let runs = managers.map { manager in Task { try await manager.run() } }
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
        for run in runs { try await run.value }
    }

    @Test("a download waiting for one that failed fails too, with the reason, though no worker claims it")
    func dependentOfFailed() async throws {
        let (server, web, folder) = try await Self.setUp()
        web.serve("/missing", .init(body: []) { _, _ in .status(404, headers: [:]) })
        web.serve("/next", .init(body: testBytes(1024, seed: 3)))
        var (_, configuration) = try await Self.workerA(on: server)
        configuration.engine.jitter = { 1 }
        let manager = try DownloadManager(configuration: configuration)
        let run = Task { try await manager.run() }
        let missing = try await manager.add(web.url("/missing"), to: .file(folder + "/missing.bin"))
        await #expect(throws: DownloadError.self) { try await manager.result(of: missing) }
        // Added after its prerequisite failed: only the fleet's pass over the queue can fail it.
        let next = try await manager.add(web.url("/next"), to: .file(folder + "/next.bin"), after: [missing])
        let failure = try await #require(throws: DownloadError.self) { try await manager.result(of: next) }
        #expect(failure.message.contains("it waits for failed"), "\(failure.message)")
        #expect(web.requests(to: "/next").isEmpty)
        run.cancel()
        try await run.value
    }

    @Test("a worker counts the fleet's downloads again once its count is due, on its idle clock")
    func fleetCountsFollow() async throws {
        let (server, web, folder) = try await Self.setUp()
        let location = try PostgresLocation(server.url(database: try server.createDatabase()))
        let stores = (
            try await PostgresStore.open(location, worker: "a"), try await PostgresStore.open(location, worker: "b")
        )
        Teardowns.add {
            await stores.0.close()
            await stores.1.close()
        }
        let clock = JumpClock()
        var configuration = DownloadManager.Configuration(stateDirectory: nil)
        configuration.store = stores.0
        configuration.idleClock = clock
        let counting = try DownloadManager(configuration: configuration)
        configuration.store = stores.1
        configuration.idleClock = ContinuousClock()
        let adding = try DownloadManager(configuration: configuration)

        await counting.followFleet()
        let requests = (0..<20).map { index in
            DownloadRequest(url: web.url("/\(index).bin"), destination: .file(folder + "/\(index).bin"), isPaused: true)
        }
        _ = try await adding.add(requests)
        // Past any count's due time (a second, or twenty times what counting took).
        clock.jump(by: .seconds(60))
        await counting.followFleet()
        #expect(await counting.stats().counts[.paused, default: 0] == 20)
        await counting.shutdown()
        await adding.shutdown()
    }

    @Test("pause all and resume all answer with the counts they leave, not the worker's count from before them")
    func commandsOverAllCountAgain() async throws {
        let (server, web, folder) = try await Self.setUp()
        var (store, configuration) = try await Self.workerA(on: server)
        // The count a worker keeps is due again only after a minute on this clock, which does not move.
        configuration.idleClock = JumpClock()
        let manager = try DownloadManager(configuration: configuration)
        // A download that starts holds its answer's body: it is still running when all are paused.
        for index in 0..<20 {
            web.serve("/\(index).bin", .init(body: [UInt8](repeating: 7, count: 4096)) { _, _ in .hold(afterBytes: 0) })
        }
        _ = try await manager.add(
            (0..<20).map { index in
                DownloadRequest(
                    url: web.url("/\(index).bin"), destination: .file(folder + "/\(index).bin"), isPaused: true)
            })
        #expect(await manager.stats().counts[.paused, default: 0] == 20)
        await manager.resumeAll()
        #expect(await manager.stats().counts[.paused, default: 0] == 0)
        #expect(try store.counts()[.paused, default: 0] == 0)
        await manager.pauseAll()
        let counts = await manager.stats().counts
        #expect(counts.filter { $0.value > 0 } == [.paused: 20], "\(counts)")
        await manager.shutdown()
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
        let run = Task { try await manager.run() }
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
        try await run.value
        store.flush()
        #expect(try server.execute(row, database: database) == stolen)
        #expect(!store.holds(id.rawValue))
        #expect(try server.execute("SELECT worker FROM download WHERE id = '\(id)'", database: database) == "thief")
    }

    @Test(
        "a worker hears from the fleet's feed that its running download completed elsewhere, then finds its lease lost: its waits end, its result is the finished file, and its subscribers hear it completed"
    )
    func completedElsewhereWhileRunningHere() async throws {
        let (server, web, folder) = try await Self.setUp()
        let body = testBytes(8 << 20, seed: 9)
        web.serve("/slow.bin", .init(body: body, bytesPerSecond: 1 << 20))
        let database = try server.createDatabase()
        let store = try await PostgresStore.open(
            try PostgresLocation(server.url(database: database)), worker: "a", lease: .seconds(60))
        Teardowns.add { await store.close() }
        var configuration = DownloadManager.Configuration(stateDirectory: nil)
        configuration.store = store
        configuration.engine.jitter = { 1 }
        // No checkpoint's write meets the fence: the test says when the lease is found lost. Without `run()`, no
        // renewal or read of the feed comes but those the test makes.
        configuration.engine.checkpointInterval = .seconds(3_600)
        configuration.engine.checkpointBytes = 1 << 40
        let manager = try DownloadManager(configuration: configuration)
        let path = folder + "/slow.bin"
        let id = try await manager.add(web.url("/slow.bin"), to: .file(path))
        for await event in manager.events(for: id) {
            if case .progress(let progress) = event, progress.receivedBytes > 0 { break }
        }

        // Another worker took it over and finished it: the file is in place and the row says so.
        #expect(FileManager.default.createFile(atPath: path, contents: Data(body)))
        try server.execute(
            "UPDATE download SET worker = 'thief', lease = nextval('lease_number'), "
                + "\"leaseExpires\" = now() + interval '1 hour', state = 'completed', \"durableOffset\" = \(body.count), "
                + "\"totalLength\" = \(body.count) WHERE id = '\(id)'",
            database: database)
        // This worker reads of it while its own run still holds the download, then finds its lease lost.
        await manager.followFleet()
        let events = manager.events(for: id)
        #expect(!(await manager.haveStopped([id])), "the run here goes on until the lease is found lost")
        await manager.leaseLost(id.rawValue)

        // Bounded, so that a wait that is never told fails the test instead of hanging it.
        let told = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await manager.waitUntilStopped([id])
                for await event in events where event.state == .completed { return true }
                return false
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(30))
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
        #expect(told, "the wait for the download ended, and a subscriber heard it completed")
        #expect(await manager.haveStopped([id]))
        let result = try await manager.result(of: id)
        #expect(result.path == path && result.bytes == Int64(body.count) && result.wasAlreadyComplete)
        await manager.shutdown()
    }
}
