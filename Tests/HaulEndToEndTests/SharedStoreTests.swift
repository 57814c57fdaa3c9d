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
        let fleet = try await Fleet()
        let (database, web, shared) = (fleet.database, fleet.web, fleet.shared)
        let bodies = (0..<300).map { testBytes(16 << 10, seed: UInt64($0 + 1)) }
        for (index, body) in bodies.enumerated() { web.serve("/\(index).bin", .init(body: body)) }

        // Leases of the default length: one that expired under a loaded machine would rightly be taken over and
        // fetched again, which is the takeover tests' subject, not this one's.
        var workers: [DaemonProcess] = []
        for name in ["a", "b", "c"] { workers.append(try await fleet.worker(name, ["-j", "4"])) }
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
        let shown = (listed.body as? [String: Any])?["workers"] as? [[String: Any]] ?? []
        #expect(shown.compactMap { $0["name"] as? String } == ["a", "b", "c"], "\(shown)")
        #expect(shown.allSatisfy { $0["state"] as? String == "running" }, "\(shown)")
        #expect(shown.allSatisfy { ($0["downloads"] as? [String])?.isEmpty == true }, "all done: \(shown)")
        let printed = try await HaulProcess.run(
            ["workers", "--state-dir", workers[0].workspace.state], in: workers[0].workspace)
        #expect(printed.status == 0, "\(printed.stderr)")
        #expect(
            ["a", "b", "c"].allSatisfy { name in printed.stdout.contains("\(name)  running, heartbeat ") },
            "\(printed.stdout)")
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
        let again = try await DaemonProcess(
            workers[0].workspace, extra: ["--worker", "a"], environment: fleet.environment)
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
        let fleet = try await Fleet()
        let (web, shared) = (fleet.web, fleet.shared)
        let rate = 2 << 20
        let body = testBytes(12 << 20, seed: 35)
        web.serve("/big.bin", .init(body: body, bytesPerSecond: rate))
        let options = ["--lease", "2s", "-x", "1"]

        let a = try await fleet.worker("a", options)
        let id = try #require(try await a.add([web.url("/big.bin")], into: shared.files).first)
        // Mid-download on a, past a few of its checkpoints.
        try await waitUntilReceived(4 << 20, of: id, on: a)
        let b = try await fleet.worker("b", options)
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
        let fleet = try await Fleet()
        let (web, shared) = (fleet.web, fleet.shared)
        let body = testBytes(12 << 20, seed: 37)
        web.serve("/big.bin", .init(body: body, bytesPerSecond: 2 << 20))
        let options = ["--lease", "2s", "-x", "1"]

        let a = try await fleet.worker("a", options)
        Teardowns.add { a.haul.signal(SIGCONT) }
        let id = try #require(try await a.add([web.url("/big.bin")], into: shared.files).first)
        try await waitUntilReceived(3 << 20, of: id, on: a)
        let aLease = try fleet.execute("SELECT lease FROM download")
        a.haul.signal(SIGSTOP)
        let b = try await fleet.worker("b", options)
        let finished = try await b.waitUntilStopped(id)
        #expect(finished["state"] as? String == "completed", "\(finished)")
        #expect(shared.holds("big.bin", body))
        // b wrote its own lease's part file (a's still held a's lock), copied a's checkpointed bytes into it, and
        // deleted a's once it finished.
        let requests = web.requests(to: "/big.bin")
        #expect(requests.count == 2 && requests.last?.range?.hasPrefix("bytes=0-") == false, "\(requests)")
        #expect(!FileManager.default.fileExists(atPath: shared.files + "/big.bin.lease\(aLease).part"))
        let row = "SELECT state, \"durableOffset\", \"updatedAt\", worker, lease FROM download"
        let stored = try fleet.execute(row)

        // a wakes: its lease is gone, so it stops the download; it stored nothing, and the file is as b left it.
        a.haul.signal(SIGCONT)
        // One long poll of a's answers once a hears the download ended: it completed on b.
        let waited = try await a.call(.GET, "/api/v1/wait?download=\(id)&timeout=20").body as? [String: Any] ?? [:]
        #expect(waited["done"] as? Bool == true, "\(waited)")
        #expect((waited["downloads"] as? [[String: Any]])?.first?["state"] as? String == "completed", "\(waited)")
        #expect(try await a.download(id)["state"] as? String == "completed")
        let stopped = await a.stop(SIGTERM)
        #expect(stopped.stderr.contains("download \(id) was taken over by another worker"), "\(stopped.stderr)")
        #expect(try fleet.execute(row) == stored)
        #expect(shared.holds("big.bin", body))
        let left = try FileManager.default.contentsOfDirectory(atPath: shared.files)
        #expect(left == ["big.bin"], "\(left)")
        _ = await b.stop(SIGTERM)
    }

    @Test(
        "pause, through worker b, a download running on worker a: once b acknowledges it, no byte arrives; resumed through b, it completes identical"
    )
    func pauseAcrossTheFleet() async throws {
        let fleet = try await Fleet()
        let (web, shared) = (fleet.web, fleet.shared)
        let body = testBytes(12 << 20, seed: 36)
        web.serve("/big.bin", .init(body: body, bytesPerSecond: 2 << 20))
        let options = ["--lease", "2s", "-x", "1"]

        let a = try await fleet.worker("a", options)
        let id = try #require(try await a.add([web.url("/big.bin")], into: shared.files).first)
        try await waitUntilReceived(1 << 20, of: id, on: a)
        let b = try await fleet.worker("b", options)
        let listed = try await b.call(.GET, "/api/v1/workers")
        let shown = (listed.body as? [String: Any])?["workers"] as? [[String: Any]] ?? []
        #expect(shown.first { $0["name"] as? String == "a" }?["downloads"] as? [String] == [id], "\(shown)")
        #expect(try await b.download(id)["worker"] as? String == "a", "b shows which worker runs it")
        let paused = try await b.call(.POST, "/api/v1/downloads/\(id)/pause")
        #expect(paused.status == 200, "\(String(describing: paused.body))")
        let acknowledged = try await b.download(id)
        #expect(acknowledged["state"] as? String == "paused", "\(acknowledged)")
        #expect(acknowledged["worker"] is NSNull, "a paused download runs on no worker: \(acknowledged)")
        let offset = try #require(acknowledged["receivedBytes"] as? Int)
        // a stopped before b answered: its part file holds exactly the offset stored at the pause, and nothing
        // arrives afterwards (a is stopped too, flushing whatever it still had).
        // a's part file is its lease's own.
        let parts = try FileManager.default.contentsOfDirectory(atPath: shared.files).filter { $0.hasSuffix(".part") }
        #expect(parts.count == 1 && parts[0].hasPrefix("big.bin.lease"), "\(parts)")
        let part = shared.files + "/" + (parts.first ?? "big.bin.part")
        let length = { (try? FileManager.default.attributesOfItem(atPath: part)[.size] as? Int) ?? -1 }
        #expect(length() == offset)
        #expect(
            try fleet.execute("SELECT \"partWorker\" || ' ' || \"partPath\" FROM download") == "a " + part,
            "the store records which worker holds which part file, and where")
        #expect(try await a.download(id)["state"] as? String == "paused")
        _ = await a.stop(SIGTERM)
        #expect(length() == offset)
        #expect(try fleet.execute("SELECT \"durableOffset\" FROM download") == "\(offset)")

        let resumed = try await b.call(.POST, "/api/v1/downloads/\(id)/resume")
        #expect(resumed.status == 200)
        let finished = try await b.waitUntilStopped(id)
        #expect(finished["state"] as? String == "completed", "\(finished)")
        #expect(shared.holds("big.bin", body))
        _ = await b.stop(SIGTERM)
    }

    @Test("haul ls, rm and clean with --store work on the fleet's store beside its workers; get and add refuse it")
    func commandsOnTheStore() async throws {
        let fleet = try await Fleet()
        let (web, shared) = (fleet.web, fleet.shared)
        let bodies = (0..<2).map { testBytes(64 << 10, seed: UInt64(60 + $0)) }
        for (index, body) in bodies.enumerated() { web.serve("/\(index).bin", .init(body: body)) }
        web.serve("/missing.bin", .init(body: []) { _, _ in .status(404, headers: [:]) })
        let a = try await fleet.worker("a")
        let ids = try await a.add([web.url("/0.bin"), web.url("/1.bin"), web.url("/missing.bin")], into: shared.files)
        for id in ids { _ = try await a.waitUntilStopped(id) }

        let store = ["--store", fleet.database.url(database: fleet.name)]
        let workspace = try Workspace()
        Teardowns.add { workspace.remove() }
        func listed() async throws -> [String: String] {
            let run = try await HaulProcess.run(["ls", "--json"] + store, in: workspace)
            #expect(run.status == 0, "\(run.stderr)")
            let rows = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [[String: Any]] ?? []
            return Dictionary(
                uniqueKeysWithValues: rows.map { ($0["id"] as? String ?? "", $0["state"] as? String ?? "") })
        }
        #expect(try await listed() == [ids[0]: "completed", ids[1]: "completed", ids[2]: "failed"])

        let removed = try await HaulProcess.run(["rm", String(ids[0].suffix(8))] + store, in: workspace)
        #expect(removed.status == 0 && removed.stdout.contains("forgot"), "\(removed.stderr)")
        #expect(try await listed() == [ids[1]: "completed", ids[2]: "failed"])
        let cleaned = try await HaulProcess.run(["clean"] + store, in: workspace)
        #expect(cleaned.stdout.contains("forgot 2 downloads"), "\(cleaned.stdout) \(cleaned.stderr)")
        #expect(try await listed().isEmpty)
        // The worker answers from the same store.
        let list = try await a.call(.GET, "/api/v1/downloads")
        #expect(
            ((list.body as? [String: Any])?["downloads"] as? [Any])?.isEmpty == true, "\(String(describing: list.body))"
        )
        #expect(shared.holds("1.bin", bodies[1]), "clean keeps the files")

        for command in [["get", web.url("/0.bin").absoluteString], ["add", web.url("/0.bin").absoluteString]] {
            let refused = try await HaulProcess.run(command + store, in: workspace)
            #expect(refused.status == 2 && refused.stderr.contains("--server"), "\(command[0]): \(refused.stderr)")
        }
        _ = await a.stop(SIGTERM)
    }

    @Test(
        "PostgreSQL restarts under two running workers: they keep transferring, reconnect, lose nothing committed, and everything completes"
    )
    func databaseRestarts() async throws {
        let fleet = try await Fleet()
        let (database, web, shared) = (fleet.database, fleet.web, fleet.shared)
        let bodies = (0..<24).map { testBytes(1 << 20, seed: UInt64(100 + $0)) }
        for (index, body) in bodies.enumerated() {
            web.serve("/\(index).bin", .init(body: body, bytesPerSecond: 1 << 20))
        }
        let workers = [try await fleet.worker("a", ["-j", "3"]), try await fleet.worker("b", ["-j", "3"])]
        let ids = try await workers[0].add(bodies.indices.map { web.url("/\($0).bin") }, into: shared.files)
        #expect(ids.count == bodies.count)
        // Mid-run: some done, some transferring.
        #expect(try await workers[0].waitUntilStopped(ids[0])["state"] as? String == "completed")
        try database.stopServer()
        try database.start()
        for id in ids {
            let finished = try await workers[1].waitUntilStopped(id)
            #expect(finished["state"] as? String == "completed", "\(finished)")
        }
        for (index, body) in bodies.enumerated() { #expect(shared.holds("\(index).bin", body), "file \(index)") }
        #expect(
            try fleet.execute("SELECT count(*) FROM download WHERE state = 'completed'")
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
        let fleet = try await Fleet()
        let (web, shared) = (fleet.web, fleet.shared)
        // Throttled answers close their connection at the end: the connections open are the downloads transferring.
        let bodies = (0..<20).map { testBytes(256 << 10, seed: UInt64(200 + $0)) }
        for (index, body) in bodies.enumerated() {
            web.serve("/\(index).bin", .init(body: body, bytesPerSecond: 512 << 10))
        }
        var workers: [DaemonProcess] = []
        for name in ["a", "b", "c"] {
            workers.append(try await fleet.worker(name, ["-j", "4", "-x", "1", "--fleet-jobs", "5"]))
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

    @Test("a schedule's jobs=3 in a fleet is the fleet's total: three workers of -j 4, never more than 3 at once")
    func scheduleFleetTotal() async throws {
        let fleet = try await Fleet()
        let (web, shared) = (fleet.web, fleet.shared)
        let bodies = (0..<15).map { testBytes(256 << 10, seed: UInt64(400 + $0)) }
        for (index, body) in bodies.enumerated() {
            web.serve("/\(index).bin", .init(body: body, bytesPerSecond: 512 << 10))
        }
        var workers: [DaemonProcess] = []
        for name in ["a", "b", "c"] {
            // A rule of no days and no hours holds always.
            workers.append(try await fleet.worker(name, ["-j", "4", "-x", "1", "--schedule", "jobs=3"]))
        }
        let ids = try await workers[0].add(bodies.indices.map { web.url("/\($0).bin") }, into: shared.files)
        for id in ids {
            let finished = try await workers[2].waitUntilStopped(id)
            #expect(finished["state"] as? String == "completed", "\(finished)")
        }
        for (index, body) in bodies.enumerated() { #expect(shared.holds("\(index).bin", body), "file \(index)") }
        #expect(web.peakConnections <= 3, "\(web.peakConnections) at once")
        #expect(web.peakConnections >= 2, "more than one worker's downloads ran: \(web.peakConnections) at most")
        for worker in workers { _ = await worker.stop(SIGTERM) }
    }

    @Test(
        "--max-connections-per-host 4 with three workers of -j 4 and -x 4: the server never sees more than 4 connections at once, and all complete"
    )
    func hostLimit() async throws {
        let fleet = try await Fleet()
        let (web, shared) = (fleet.web, fleet.shared)
        // Throttled answers close their connection at the end: the connections open are those in flight.
        // Files of 2 MiB: each is split in segments of 1 MiB, so a download asks for two connections.
        let bodies = (0..<9).map { testBytes(2 << 20, seed: UInt64(300 + $0)) }
        for (index, body) in bodies.enumerated() {
            web.serve("/\(index).bin", .init(body: body, bytesPerSecond: 1 << 20))
        }
        var workers: [DaemonProcess] = []
        for name in ["a", "b", "c"] {
            // Only the first is given the limit: it is the fleet's, kept in the store, and the others take it up.
            let limit = name == "a" ? ["--max-connections-per-host", "4"] : []
            workers.append(try await fleet.worker(name, ["-j", "4", "-x", "4"] + limit))
        }
        let ids = try await workers[0].add(bodies.indices.map { web.url("/\($0).bin") }, into: shared.files)
        for id in ids {
            let finished = try await workers[2].waitUntilStopped(id)
            #expect(finished["state"] as? String == "completed", "\(finished)")
        }
        for (index, body) in bodies.enumerated() { #expect(shared.holds("\(index).bin", body), "file \(index)") }
        #expect(web.peakConnections <= 4, "\(web.peakConnections) at once")
        #expect(web.peakConnections >= 3, "the limit was reached: \(web.peakConnections) at most")
        for worker in workers { _ = await worker.stop(SIGTERM) }
    }

    @Test(
        "the event stream's ids are the fleet's: a client that reconnects to another worker with Last-Event-ID is replayed every change it missed, under the same ids"
    )
    func eventsAcrossWorkers() async throws {
        let fleet = try await Fleet()
        let (web, shared) = (fleet.web, fleet.shared)
        for name in ["first", "second", "third"] { web.serve("/\(name).bin", .init(body: testBytes(4096))) }
        let a = try await fleet.worker("a")
        let b = try await fleet.worker("b")
        let first = try await a.add([web.url("/first.bin")], into: shared.files)[0]
        #expect(try await a.waitUntilStopped(first)["state"] as? String == "completed")
        // A client of a: its stream begins with a snapshot whose id is where the fleet's events stood.
        let opening = try await readEvents(from: a, after: nil) { $0.contains { $0.event == "snapshot" } }
        let seen = try #require(opening.first { $0.event == "snapshot" }?.id)

        // Meanwhile, through b: two more downloads.
        let later = try await b.add([web.url("/second.bin"), web.url("/third.bin")], into: shared.files)
        for id in later { #expect(try await b.waitUntilStopped(id)["state"] as? String == "completed") }
        let completedBoth: @Sendable ([StreamEvent]) -> Bool = { events in
            later.allSatisfy { id in events.contains { $0.download == id && $0.state == "completed" } }
        }
        // The client reconnects, to b and to a, with the last id it saw: each replays the same changes, in the same
        // order, under the same ids, and no snapshot.
        let fromB = try await readEvents(from: b, after: seen, until: completedBoth)
        let fromA = try await readEvents(from: a, after: seen, until: completedBoth)
        #expect(!fromB.contains { $0.event == "snapshot" } && !fromA.contains { $0.event == "snapshot" })
        #expect(completedBoth(fromB) && completedBoth(fromA))
        // The store's events: each id's first appearance (what a worker tells of its own at once, before the
        // store's event of it, carries the id of the event before).
        func logged(_ events: [StreamEvent]) -> [String] {
            var last = seen
            var ids: [String] = []
            for event in events where event.id != last && ["added", "changed", "removed"].contains(event.event) {
                ids.append("\(event.id) \(event.download ?? "") \(event.state ?? "")")
                last = event.id
            }
            return ids
        }
        #expect(logged(fromB) == logged(fromA), "the same events under the same ids on both workers")
        #expect(!logged(fromB).isEmpty)
        #expect(
            fromB.filter { $0.id != seen }.allSatisfy { order(seen).lexicographicallyPrecedes(order($0.id)) },
            "every event replayed comes after the id the client gave")
        for worker in [a, b] { _ = await worker.stop(SIGTERM) }
    }

    @Test(
        "a worker's name is one process's: a second process given it is refused while the first beats, takes it once the first was killed and its lease passed, and at once after the first stopped"
    )
    func oneProcessPerName() async throws {
        let fleet = try await Fleet()
        let lease = ["--lease", "2s"]
        let beating = "SELECT count(*) FROM worker WHERE name = 'same' AND instance IS NOT NULL"
        let first = try await fleet.worker("same", lease)
        #expect(await waitUntil(seconds: 30) { (try? fleet.execute(beating)) == "1" }, "the first worker beats")

        let workspace = try Workspace()
        Teardowns.add { workspace.remove() }
        let second = try await HaulProcess.run(
            ["serve", "--listen", "127.0.0.1:0", "--state-dir", workspace.state, "--worker", "same"] + lease,
            in: workspace, environment: fleet.environment)
        #expect(second.status == 1)
        #expect(
            second.stderr.contains("another worker named same is running (its heartbeat came ")
                && second.stderr.contains("give this one another name with --worker NAME"), "\(second.stderr)")
        #expect(!FileManager.default.fileExists(atPath: workspace.state + "/serve.json"), "it never served")

        // Killed: its beat stays in the store, so the next process waits until the lease has passed without one.
        _ = await first.stop(SIGKILL)
        let third = try await fleet.worker("same", lease)
        #expect(await waitUntil(seconds: 30) { (try? fleet.execute(beating)) == "1" }, "the third worker beats")
        let thirdOutput = await third.stop(SIGTERM)
        #expect(thirdOutput.status == 0, "\(thirdOutput.stderr)")
        #expect(
            thirdOutput.stderr.contains("worker same: a process of this name beat ")
                && thirdOutput.stderr.contains("waiting up to 2 s to see whether it still runs"),
            "\(thirdOutput.stderr)")
        // Stopped: it gave the name up, and the next starts without waiting.
        #expect(try fleet.execute(beating) == "0")
        let fourth = try await fleet.worker("same", lease)
        let fourthOutput = await fourth.stop(SIGTERM)
        #expect(!fourthOutput.stderr.contains("a process of this name beat"), "\(fourthOutput.stderr)")
        #expect(fourthOutput.stderr.contains("worker same: downloads are kept in"), "\(fourthOutput.stderr)")
    }

    @Test(
        "a worker stopped for longer than a lease, whose name another process took meanwhile, stops when it runs again")
    func stoppedWorkerFindsNameTaken() async throws {
        let fleet = try await Fleet()
        let lease = ["--lease", "2s"]
        let holder = "SELECT instance FROM worker WHERE name = 'same'"
        // Another worker lists the fleet throughout, `same` as running, unresponsive or stopped.
        let watcher = try await fleet.worker("watcher", lease)
        let stateOfSame = { @Sendable () async -> String? in
            let listed = try? await watcher.call(.GET, "/api/v1/workers")
            let shown = (listed?.body as? [String: Any])?["workers"] as? [[String: Any]] ?? []
            return shown.first { $0["name"] as? String == "same" }?["state"] as? String
        }
        let first = try await fleet.worker("same", lease)
        #expect(await waitUntil(seconds: 30) { (try? fleet.execute(holder)).map { !$0.isEmpty } == true })
        let stopped = try fleet.execute(holder)
        #expect(await stateOfSame() == "running")

        // Stopped (SIGSTOP, a machine suspended): listed as unresponsive once a lease passed without a beat, and the
        // next process of the name waits that out, then beats.
        first.haul.signal(SIGSTOP)
        let silent = "SELECT \"heartbeatAt\" < now() - interval '2 s' FROM worker WHERE name = 'same'"
        #expect(await waitUntil(seconds: 30) { (try? fleet.execute(silent)) == "t" })
        #expect(await stateOfSame() == "unresponsive")
        let printed = try await HaulProcess.run(
            ["workers", "--state-dir", watcher.workspace.state], in: watcher.workspace)
        #expect(printed.stdout.contains("same  unresponsive: no heartbeat for "), "\(printed.stdout)")
        let second = try await fleet.worker("same", lease)
        #expect(
            await waitUntil(seconds: 30) { (try? fleet.execute(holder)).map { !$0.isEmpty && $0 != stopped } == true })
        let running = try fleet.execute(holder)

        first.haul.signal(SIGCONT)
        let ended = await waitUntil(seconds: 30) { !first.haul.process.isRunning }
        #expect(ended, "the woken worker stops")
        let firstOutput = await first.stop(ended ? 0 : SIGKILL)
        #expect(firstOutput.status == 1)
        #expect(
            firstOutput.stderr.contains(
                "another process took the worker name same while this one did not run for longer than a lease (2 s); this one stops"
            ), "\(firstOutput.stderr)")
        // The name stays the second's: the first neither beat under it nor gave it up as it stopped.
        #expect(try fleet.execute(holder) == running)
        #expect(await stateOfSame() == "running")
        let secondOutput = await second.stop(SIGTERM)
        #expect(secondOutput.status == 0, "\(secondOutput.stderr)")
        #expect(await stateOfSame() == "stopped")
        let listed = try await HaulProcess.run(
            ["workers", "--state-dir", watcher.workspace.state], in: watcher.workspace)
        #expect(listed.stdout.contains("same  stopped "), "\(listed.stdout)")
        _ = await watcher.stop(SIGTERM)
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

/// One test's fleet: a PostgreSQL with one database, a web server, a folder every worker shares, and the workers as
/// `haul serve` processes on that store, each with a state folder of its own; all stopped and removed at the end.
struct Fleet {
    let database: PostgresServer
    let name: String
    let web: FaultServer
    let shared: Workspace
    var environment: [String: String] { ["HAUL_STORE": database.url(database: name)] }

    init() async throws {
        database = try PostgresServer()
        Teardowns.add { [database] in database.stop() }
        name = try database.createDatabase()
        web = try await FaultServer.start()
        Teardowns.add { [web] in await web.stop() }
        shared = try Workspace()
        Teardowns.add { [shared] in shared.remove() }
    }

    /// Starts worker `name`, allowed to write to the shared folder, with `extra` arguments.
    func worker(_ name: String, _ extra: [String] = []) async throws -> DaemonProcess {
        let workspace = try Workspace()
        Teardowns.add { workspace.remove() }
        return try await DaemonProcess(
            workspace, extra: ["--worker", name, "--allow-dir", shared.files] + extra, environment: environment)
    }

    /// Runs `sql` in the fleet's database.
    @discardableResult
    func execute(_ sql: String) throws -> String { try database.execute(sql, database: name) }
}

/// Returns once `worker`'s event stream shows download `id` with at least `bytes` received (mid-download): in the
/// snapshot the stream opens with, or in a progress event after it.
func waitUntilReceived(_ bytes: Int, of id: String, on worker: DaemonProcess) async throws {
    let events = try await readEvents(from: worker, after: nil, download: id) { events in
        events.contains { $0.download == id && $0.receivedBytes ?? 0 >= bytes }
    }
    #expect(events.contains { $0.download == id && $0.receivedBytes ?? 0 >= bytes }, "\(bytes) bytes of \(id) arrived")
}

/// An event id (`TRANSACTION-NUMBER` in a fleet) as numbers that order as the ids do.
func order(_ id: String) -> [UInt64] { id.split(separator: "-").map { UInt64($0) ?? 0 } }

/// One event of a daemon's stream: its id, its name, and the download it tells of with that download's state (for
/// the events of one download).
struct StreamEvent: Sendable {
    var id: String
    var event: String
    var download: String?
    var state: String?
    /// The download's bytes, in a progress event or a snapshot of the stream of one download.
    var receivedBytes: Int?
    /// The settings' `maxConcurrentDownloads`, in a settings event or a snapshot.
    var maxConcurrentDownloads: Int?
}

/// Reads `daemon`'s event stream (with `Last-Event-ID: after` when given; only `download`'s events when given) until
/// `done` holds for the events read, or 30 s have passed; curl reads the stream, and is stopped then.
func readEvents(
    from daemon: DaemonProcess, after: String?, download: String? = nil,
    until done: @escaping @Sendable ([StreamEvent]) -> Bool
) async throws -> [StreamEvent] {
    let curl = try #require(executable("curl"), "curl is installed by .ci/run")
    let process = Process()
    process.executableURL = URL(fileURLWithPath: curl)
    process.arguments =
        ["-sN", "--max-time", "30", "-H", "Authorization: Bearer \(daemon.token)"]
        + (after.map { ["-H", "Last-Event-ID: \($0)"] } ?? [])
        + ["\(daemon.url)/api/v1/events" + (download.map { "?download=\($0)" } ?? "")]
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    let reader = output.fileHandleForReading.fileDescriptor
    let events = await onOwnThread { () -> [StreamEvent] in
        var events: [StreamEvent] = []
        var pending = ""
        var current: [String: String] = [:]
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            // What arrived so far, as it arrives (Foundation's `availableData` may wait for more).
            let count = read(reader, &buffer, buffer.count)
            if count <= 0 { return events }
            pending += String(decoding: buffer[0..<count], as: UTF8.self)
            while let end = pending.firstIndex(of: "\n") {
                let line = String(pending[..<end])
                pending = String(pending[pending.index(after: end)...])
                if line.isEmpty {
                    if let id = current["id"], let name = current["event"] {
                        var event = StreamEvent(id: id, event: name)
                        let object =
                            current["data"]?.data(using: .utf8).flatMap {
                                try? JSONSerialization.jsonObject(with: $0) as? [String: Any]
                            } ?? [:]
                        switch name {
                        case "added", "changed":
                            event.download = object["id"] as? String
                            event.state = object["state"] as? String
                        case "removed", "progress":
                            event.download = object["id"] as? String
                            event.receivedBytes = object["receivedBytes"] as? Int
                        case "snapshot":
                            // A stream of one download opens with that download alone.
                            if download != nil, let shown = (object["downloads"] as? [[String: Any]])?.first {
                                event.download = shown["id"] as? String
                                event.state = shown["state"] as? String
                                event.receivedBytes = shown["receivedBytes"] as? Int
                            }
                            event.maxConcurrentDownloads =
                                (object["settings"] as? [String: Any])?["maxConcurrentDownloads"] as? Int
                        case "settings":
                            event.maxConcurrentDownloads = object["maxConcurrentDownloads"] as? Int
                        default:
                            break
                        }
                        events.append(event)
                        if done(events) { return events }
                    }
                    current = [:]
                } else if let colon = line.firstIndex(of: ":") {
                    let value = line[line.index(after: colon)...].drop { $0 == " " }
                    current[String(line[..<colon])] = String(value)
                }
            }
        }
    }
    kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
    return events
}
