import Foundation
import HaulTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `haul serve --store postgres://…` against a PostgreSQL 15 the test starts: workers share the store's queue, each
/// download runs once, any worker answers for all of them, and the password shows nowhere.
@Suite("haul serve on a PostgreSQL store", .serialized, .teardowns, .timeLimit(.minutes(3)))
struct SharedStoreTests {
    @Test(
        "three workers share one folder: 300 downloads added through one run once each, identical; any worker answers for all; a restart keeps them; no password shown"
    )
    func workersShare() async throws {
        let database = try PostgresServer()
        Teardowns.add { database.stop() }
        let url = database.url(database: try database.createDatabase())
        let web = try await FaultServer.start()
        Teardowns.add { await web.stop() }
        let bodies = (0..<300).map { testBytes(16 << 10, seed: UInt64($0 + 1)) }
        for (index, body) in bodies.enumerated() { web.serve("/\(index).bin", .init(body: body)) }
        let shared = try Workspace()
        Teardowns.add { shared.remove() }
        let environment = ["HAUL_STORE": url]

        // Leases of the default length: one that expired under a loaded machine would rightly be taken over and
        // fetched again, which is the takeover tests' subject, not this one's.
        var workers: [DaemonProcess] = []
        for name in ["a", "b", "c"] {
            let workspace = try Workspace()
            Teardowns.add { workspace.remove() }
            workers.append(
                try await DaemonProcess(
                    workspace, extra: ["--worker", name, "--allow-dir", shared.files, "-j", "4"],
                    environment: environment))
        }
        #expect(Set(workers.map(\.token)).count == 1, "the fleet's token, from the store")
        let ids = try await workers[0].add(
            bodies.indices.map { web.url("/\($0).bin") }, into: shared.files)
        #expect(ids.count == 300)
        for id in ids {
            let finished = try await workers[0].waitUntilStopped(id)
            #expect(finished["state"] as? String == "completed", "\(finished)")
        }
        for (index, body) in bodies.enumerated() {
            #expect(shared.holds("\(index).bin", body), "file \(index)")
            #expect(web.bodyBytesSent(for: "/\(index).bin") == body.count, "file \(index) was fetched once")
        }
        // Every worker shows the fleet, by name, each heartbeat recent.
        let listed = try await workers[1].call(.GET, "/api/v1/workers")
        let fleet = (listed.body as? [String: Any])?["workers"] as? [[String: Any]] ?? []
        #expect(fleet.compactMap { $0["name"] as? String } == ["a", "b", "c"], "\(fleet)")
        #expect(fleet.allSatisfy { ($0["downloads"] as? [String])?.isEmpty == true }, "all done: \(fleet)")
        let printed = try await HaulProcess.run(
            ["workers", "--state-dir", workers[0].workspace.state], in: workers[0].workspace)
        #expect(printed.status == 0, "\(printed.stderr)")
        #expect(
            ["a", "b", "c"].allSatisfy { name in printed.stdout.contains("\(name)  heartbeat ") }, "\(printed.stdout)")
        // b and c answer for downloads a added.
        for worker in workers.dropFirst() {
            let seen = try await worker.download(ids[299])
            #expect(seen["state"] as? String == "completed", "\(seen)")
        }

        // A worker started again finds the downloads as they ended.
        var outputs: [String] = []
        for worker in workers {
            let stopped = await worker.stop(SIGTERM)
            #expect(stopped.status == 0, "\(stopped.stderr)")
            outputs += [stopped.stdout, stopped.stderr]
        }
        #expect(outputs[1].contains("worker a: downloads are kept in postgres://haul@127.0.0.1:"), "\(outputs[1])")
        let again = try await DaemonProcess(workers[0].workspace, extra: ["--worker", "a"], environment: environment)
        let first = try await again.download(ids[0])
        #expect(first["state"] as? String == "completed", "\(first)")
        #expect(first["receivedBytes"] as? Int == bodies[0].count, "\(first)")
        let last = await again.stop(SIGTERM)
        outputs += [last.stdout, last.stderr]
        for worker in workers {
            outputs.append((try? String(contentsOfFile: worker.workspace.state + "/serve.json", encoding: .utf8)) ?? "")
        }
        for text in outputs { #expect(!text.contains(database.password), "\(text)") }
    }

    @Test(
        "kill -9 of a worker mid-download: once its lease expires another takes the download over from its last checkpoint in the shared folder, and the file is identical"
    )
    func takeover() async throws {
        let database = try PostgresServer()
        Teardowns.add { database.stop() }
        let name = try database.createDatabase()
        let environment = ["HAUL_STORE": database.url(database: name)]
        let web = try await FaultServer.start()
        Teardowns.add { await web.stop() }
        let rate = 2 << 20
        let body = testBytes(12 << 20, seed: 35)
        web.serve("/big.bin", .init(body: body, bytesPerSecond: rate))
        let shared = try Workspace()
        Teardowns.add { shared.remove() }
        func worker(_ name: String) async throws -> DaemonProcess {
            let workspace = try Workspace()
            Teardowns.add { workspace.remove() }
            return try await DaemonProcess(
                workspace, extra: ["--worker", name, "--lease", "2s", "--allow-dir", shared.files, "-x", "1"],
                environment: environment)
        }

        let a = try await worker("a")
        let id = try #require(try await a.add([web.url("/big.bin")], into: shared.files).first)
        // Mid-download on a, past a few of its checkpoints.
        let deadline = ContinuousClock.now + .seconds(30)
        while try await a.download(id)["receivedBytes"] as? Int ?? 0 < 4 << 20, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        let b = try await worker("b")
        _ = await a.stop(SIGKILL)
        let finished = try await b.waitUntilStopped(id)
        #expect(finished["state"] as? String == "completed", "\(finished)")
        #expect(shared.holds("big.bin", body))
        // b resumed from a's last checkpoint: at most about a second of transfer (a's checkpoints come every
        // second) was fetched again, plus what was on its way.
        let requests = web.requests(to: "/big.bin")
        let resumed = try #require(requests.last?.range)
        #expect(resumed.hasPrefix("bytes=") && !resumed.hasPrefix("bytes=0-"), "\(resumed)")
        let refetched = web.bodyBytesSent(for: "/big.bin") - body.count
        #expect(refetched <= rate + (1 << 20), "fetched again: \(refetched) bytes")
        let stopped = await b.stop(SIGTERM)
        #expect(stopped.stderr.contains("download \(id) taken over: its worker's lease expired"), "\(stopped.stderr)")
    }

    @Test(
        "SIGSTOP a worker past its lease: another takes over into a part file of its own lease and finishes; woken, the stopped one writes nothing more to the store or the file"
    )
    func fencing() async throws {
        let database = try PostgresServer()
        Teardowns.add { database.stop() }
        let name = try database.createDatabase()
        let environment = ["HAUL_STORE": database.url(database: name)]
        let web = try await FaultServer.start()
        Teardowns.add { await web.stop() }
        let body = testBytes(12 << 20, seed: 37)
        web.serve("/big.bin", .init(body: body, bytesPerSecond: 2 << 20))
        let shared = try Workspace()
        Teardowns.add { shared.remove() }
        func worker(_ name: String) async throws -> DaemonProcess {
            let workspace = try Workspace()
            Teardowns.add { workspace.remove() }
            return try await DaemonProcess(
                workspace, extra: ["--worker", name, "--lease", "2s", "--allow-dir", shared.files, "-x", "1"],
                environment: environment)
        }

        let a = try await worker("a")
        Teardowns.add { a.haul.signal(SIGCONT) }
        let id = try #require(try await a.add([web.url("/big.bin")], into: shared.files).first)
        let deadline = ContinuousClock.now + .seconds(30)
        while try await a.download(id)["receivedBytes"] as? Int ?? 0 < 3 << 20, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        let aLease = try database.execute("SELECT lease FROM download", database: name)
        a.haul.signal(SIGSTOP)
        let b = try await worker("b")
        let finished = try await b.waitUntilStopped(id)
        #expect(finished["state"] as? String == "completed", "\(finished)")
        #expect(shared.holds("big.bin", body))
        // b wrote its own lease's part file (a's still held a's lock), copied a's checkpointed bytes into it, and
        // deleted a's once it finished.
        let requests = web.requests(to: "/big.bin")
        #expect(requests.count == 2 && requests.last?.range?.hasPrefix("bytes=0-") == false, "\(requests)")
        #expect(!FileManager.default.fileExists(atPath: shared.files + "/big.bin.lease\(aLease).part"))
        let row = "SELECT state, \"durableOffset\", \"updatedAt\", worker, lease FROM download"
        let stored = try database.execute(row, database: name)

        // a wakes: its lease is gone, so it stops the download; it stored nothing, and the file is as b left it.
        a.haul.signal(SIGCONT)
        let woken = ContinuousClock.now + .seconds(30)
        while try await a.download(id)["state"] as? String != "completed", ContinuousClock.now < woken {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(try await a.download(id)["state"] as? String == "completed")
        let stopped = await a.stop(SIGTERM)
        #expect(stopped.stderr.contains("download \(id) was taken over by another worker"), "\(stopped.stderr)")
        #expect(try database.execute(row, database: name) == stored)
        #expect(shared.holds("big.bin", body))
        let left = try FileManager.default.contentsOfDirectory(atPath: shared.files)
        #expect(left == ["big.bin"], "\(left)")
        _ = await b.stop(SIGTERM)
    }

    @Test(
        "pause, through worker b, a download running on worker a: once b acknowledges it, no byte arrives; resumed through b, it completes identical"
    )
    func pauseAcrossTheFleet() async throws {
        let database = try PostgresServer()
        Teardowns.add { database.stop() }
        let name = try database.createDatabase()
        let environment = ["HAUL_STORE": database.url(database: name)]
        let web = try await FaultServer.start()
        Teardowns.add { await web.stop() }
        let body = testBytes(12 << 20, seed: 36)
        web.serve("/big.bin", .init(body: body, bytesPerSecond: 2 << 20))
        let shared = try Workspace()
        Teardowns.add { shared.remove() }
        func worker(_ name: String) async throws -> DaemonProcess {
            let workspace = try Workspace()
            Teardowns.add { workspace.remove() }
            return try await DaemonProcess(
                workspace, extra: ["--worker", name, "--lease", "2s", "--allow-dir", shared.files, "-x", "1"],
                environment: environment)
        }

        let a = try await worker("a")
        let id = try #require(try await a.add([web.url("/big.bin")], into: shared.files).first)
        let deadline = ContinuousClock.now + .seconds(30)
        while try await a.download(id)["receivedBytes"] as? Int ?? 0 < 1 << 20, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        let b = try await worker("b")
        let listed = try await b.call(.GET, "/api/v1/workers")
        let fleet = (listed.body as? [String: Any])?["workers"] as? [[String: Any]] ?? []
        #expect(fleet.first { $0["name"] as? String == "a" }?["downloads"] as? [String] == [id], "\(fleet)")
        let paused = try await b.call(.POST, "/api/v1/downloads/\(id)/pause")
        #expect(paused.status == 200, "\(String(describing: paused.body))")
        let acknowledged = try await b.download(id)
        #expect(acknowledged["state"] as? String == "paused", "\(acknowledged)")
        let offset = try #require(acknowledged["receivedBytes"] as? Int)
        // a stopped before b answered: its part file holds exactly the offset stored at the pause, and nothing
        // arrives afterwards (a is stopped too, flushing whatever it still had).
        // a's part file is its lease's own.
        let parts = try FileManager.default.contentsOfDirectory(atPath: shared.files).filter { $0.hasSuffix(".part") }
        #expect(parts.count == 1 && parts[0].hasPrefix("big.bin.lease"), "\(parts)")
        let part = shared.files + "/" + (parts.first ?? "big.bin.part")
        let length = { (try? FileManager.default.attributesOfItem(atPath: part)[.size] as? Int) ?? -1 }
        #expect(length() == offset)
        #expect(try await a.download(id)["state"] as? String == "paused")
        _ = await a.stop(SIGTERM)
        #expect(length() == offset)
        #expect(try database.execute("SELECT \"durableOffset\" FROM download", database: name) == "\(offset)")

        let resumed = try await b.call(.POST, "/api/v1/downloads/\(id)/resume")
        #expect(resumed.status == 200)
        let finished = try await b.waitUntilStopped(id)
        #expect(finished["state"] as? String == "completed", "\(finished)")
        #expect(shared.holds("big.bin", body))
        _ = await b.stop(SIGTERM)
    }

    @Test(
        "PostgreSQL restarts under two running workers: they keep transferring, reconnect, lose nothing committed, and everything completes"
    )
    func databaseRestarts() async throws {
        let database = try PostgresServer()
        Teardowns.add { database.stop() }
        let name = try database.createDatabase()
        let environment = ["HAUL_STORE": database.url(database: name)]
        let web = try await FaultServer.start()
        Teardowns.add { await web.stop() }
        let bodies = (0..<24).map { testBytes(1 << 20, seed: UInt64(100 + $0)) }
        for (index, body) in bodies.enumerated() {
            web.serve("/\(index).bin", .init(body: body, bytesPerSecond: 1 << 20))
        }
        let shared = try Workspace()
        Teardowns.add { shared.remove() }
        var workers: [DaemonProcess] = []
        for name in ["a", "b"] {
            let workspace = try Workspace()
            Teardowns.add { workspace.remove() }
            workers.append(
                try await DaemonProcess(
                    workspace, extra: ["--worker", name, "--allow-dir", shared.files, "-j", "3"],
                    environment: environment))
        }
        let ids = try await workers[0].add(bodies.indices.map { web.url("/\($0).bin") }, into: shared.files)
        #expect(ids.count == bodies.count)
        // Mid-run: some done, some transferring.
        let deadline = ContinuousClock.now + .seconds(30)
        while try await workers[0].download(ids[0])["state"] as? String != "completed", ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        try database.stopServer()
        try database.start()
        for id in ids {
            let finished = try await workers[1].waitUntilStopped(id)
            #expect(finished["state"] as? String == "completed", "\(finished)")
        }
        for (index, body) in bodies.enumerated() { #expect(shared.holds("\(index).bin", body), "file \(index)") }
        #expect(
            try database.execute("SELECT count(*) FROM download WHERE state = 'completed'", database: name)
                == "\(bodies.count)")
        for worker in workers {
            let stopped = await worker.stop(SIGTERM)
            #expect(stopped.status == 0, "\(stopped.stderr)")
        }
    }

    @Test(
        "--fleet-jobs 5 with three workers of -j 4: the server never sees more than 5 downloads at once, and all complete"
    )
    func fleetLimit() async throws {
        let database = try PostgresServer()
        Teardowns.add { database.stop() }
        let environment = ["HAUL_STORE": database.url(database: try database.createDatabase())]
        let web = try await FaultServer.start()
        Teardowns.add { await web.stop() }
        // Throttled answers close their connection at the end: the connections open are the downloads transferring.
        let bodies = (0..<20).map { testBytes(256 << 10, seed: UInt64(200 + $0)) }
        for (index, body) in bodies.enumerated() {
            web.serve("/\(index).bin", .init(body: body, bytesPerSecond: 512 << 10))
        }
        let shared = try Workspace()
        Teardowns.add { shared.remove() }
        var workers: [DaemonProcess] = []
        for name in ["a", "b", "c"] {
            let workspace = try Workspace()
            Teardowns.add { workspace.remove() }
            workers.append(
                try await DaemonProcess(
                    workspace,
                    extra: ["--worker", name, "--allow-dir", shared.files, "-j", "4", "-x", "1", "--fleet-jobs", "5"],
                    environment: environment))
        }
        let ids = try await workers[0].add(bodies.indices.map { web.url("/\($0).bin") }, into: shared.files)
        for id in ids {
            let finished = try await workers[2].waitUntilStopped(id)
            #expect(finished["state"] as? String == "completed", "\(finished)")
        }
        for (index, body) in bodies.enumerated() { #expect(shared.holds("\(index).bin", body), "file \(index)") }
        #expect(web.peakConnections <= 5, "\(web.peakConnections) at once")
        for worker in workers { _ = await worker.stop(SIGTERM) }
    }

    @Test("a store that cannot be reached or a bad store URL: a clear error naming the host, never the password")
    func unreachable() async throws {
        let workspace = try Workspace()
        Teardowns.add { workspace.remove() }
        let closed = freePort()
        let nowhere = try await HaulProcess.run(
            [
                "serve", "--listen", "127.0.0.1:0", "--state-dir", workspace.state, "--store",
                "postgres://haul:hunter2@127.0.0.1:\(closed)/queue?sslmode=disable",
            ], in: workspace)
        #expect(nowhere.status == 1)
        #expect(
            nowhere.stderr.contains("cannot open the store at 127.0.0.1:\(closed) (database queue)"),
            "\(nowhere.stderr)")
        #expect(!nowhere.stderr.contains("hunter2"), "\(nowhere.stderr)")

        let bad = try await HaulProcess.run(
            ["serve", "--state-dir", workspace.state, "--store", "postgres://haul:hunter2@db.example/queue?ssl=1"],
            in: workspace)
        #expect(bad.status != 0)
        #expect(bad.stderr.contains("has the parameter ssl"), "\(bad.stderr)")
        #expect(!bad.stderr.contains("hunter2"), "\(bad.stderr)")
    }
}
