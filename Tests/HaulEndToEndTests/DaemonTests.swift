import AsyncHTTPClient
import Foundation
import HaulTesting
import NIOCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `haul serve` as a child process, driven through its API and through the `haul` command.
@Suite("haul serve, end to end", .serialized, .timeLimit(.minutes(3)))
struct DaemonTests {
    let body = testBytes(2_000_000, seed: 11)

    /// A workspace and a fault server for one test.
    static func setUp() async throws -> (Workspace, FaultServer) {
        (try Workspace(), try await FaultServer.start())
    }

    static func tearDown(_ workspace: Workspace, _ server: FaultServer) {
        workspace.remove()
        Task { await server.stop() }
    }

    @Test("a download added through the API lands byte for byte; pause and resume fetch only the missing bytes")
    func addPauseResume() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        // The first answer holds back all but its first 600,000 bytes: the pause surely comes mid-download (a rate
        // alone lost the race on a busy machine, where the download finished first).
        server.serve("/f.bin", .init(body: body) { index, _ in index == 0 ? .hold(afterBytes: 600_000) : nil })
        let (stalls, stalled) = AsyncStream<Void>.makeStream()
        server.onStall { _ in stalled.yield() }
        let daemon = try await DaemonProcess(workspace)
        let id = try await daemon.add(server.url("/f.bin"))
        var waits = stalls.makeAsyncIterator()
        _ = await waits.next()
        #expect(await waitUntil { (workspace.size("f.bin.part") ?? 0) == 600_000 })
        let paused = try await daemon.call(.POST, "/api/v1/downloads/\(id)/pause")
        server.release()
        #expect((paused.body as? [String: Any])?["state"] as? String == "paused", "\(paused)")
        let held = (paused.body as? [String: Any])?["receivedBytes"] as? Int ?? 0
        #expect(held > 0)
        #expect(try await daemon.call(.POST, "/api/v1/downloads/\(id)/resume").status == 200)
        let done = try await daemon.waitUntilStopped(id)
        #expect(done["state"] as? String == "completed", "\(done)")
        #expect(workspace.holds("f.bin", body))
        // After the pause only what was missing travelled (the checkpoint after a pause is exact).
        let resumedRequest = try #require(server.requests(to: "/f.bin").last)
        #expect(resumedRequest.range == "bytes=\(held)-")
        // The metrics count what arrived and what failed, by code.
        server.serve("/gone.bin", .init(body: body) { _, _ in .status(404, headers: [:]) })
        let gone = try await daemon.add(server.url("/gone.bin"))
        #expect(try await daemon.waitUntilStopped(gone)["state"] as? String == "failed")
        let metrics = try await daemon.text("/metrics")
        #expect(metrics.contains(#"haul_failures_total{code="httpStatus"} 1"#), "\(metrics)")
        #expect(metrics.contains(#"haul_downloads{state="completed"} 1"#))
        let received = metrics.split(separator: "\n").first { $0.hasPrefix("haul_received_bytes_total ") }
        #expect(
            received.flatMap { Double($0.split(separator: " ").last ?? "") }.map { $0 >= Double(body.count - held) }
                == true, "\(metrics)")
        #expect(resumedRequest.bodyBytesSent == body.count - held)
        let stopped = await daemon.stop(SIGTERM)
        #expect(stopped.status == 0, "\(stopped.stderr)")
    }

    @Test("kill -9 of the daemon mid-batch, then a restart: every download finishes, identical, in order")
    func killNineMidBatch() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        let files = (0..<5).map { testBytes(3_000_000, seed: UInt64(20 + $0)) }
        for (index, bytes) in files.enumerated() {
            server.serve("/\(index).bin", .init(body: bytes, bytesPerSecond: 400_000))
        }
        let daemon = try await DaemonProcess(workspace, extra: ["-j", "2"])
        let ids = try await daemon.add((0..<5).map { server.url("/\($0).bin") })
        #expect(ids.count == 5)
        // Three seconds past the first checkpoint (due 1 s into the transfer): the restart resumes from it, even on
        // a machine busy with other tests' syncs. The daemon holds its store exclusively, so the test cannot read the
        // durable offset; the margin stands in.
        #expect(await waitUntil { (workspace.size("0.bin.part") ?? 0) > 1_600_000 })
        _ = await daemon.stop(SIGKILL)
        #expect(FileManager.default.fileExists(atPath: workspace.state + "/serve.json"), "a killed daemon leaves it")
        let restarted = try await DaemonProcess(workspace)
        for id in ids {
            let done = try await restarted.waitUntilStopped(id, seconds: 90)
            #expect(done["state"] as? String == "completed", "\(done)")
        }
        for (index, bytes) in files.enumerated() { #expect(workspace.holds("\(index).bin", bytes)) }
        // The two that were running resumed from their checkpoints; the rest started in their old order.
        let firstRequests = (0..<5).map { index in server.requests(to: "/\(index).bin").first?.range }
        #expect(firstRequests.allSatisfy { $0 == nil })
        #expect(server.requests(to: "/0.bin").last?.range != nil, "0.bin resumed with a range")
        _ = await restarted.stop(SIGTERM)
    }

    @Test("--limit-rate given to haul serve replaces the stored limit, and --limit-rate 0 removes it")
    func limitRateZero() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        let limited = try await DaemonProcess(workspace, extra: ["--limit-rate", "1M"])
        let stored = try await limited.call(.GET, "/api/v1/settings").body as? [String: Any]
        #expect(stored?["limitRate"] as? Int == 1 << 20, "\(String(describing: stored))")
        _ = await limited.stop(SIGTERM)
        let kept = try await DaemonProcess(workspace)
        #expect((try await kept.call(.GET, "/api/v1/settings").body as? [String: Any])?["limitRate"] as? Int == 1 << 20)
        _ = await kept.stop(SIGTERM)
        let unlimited = try await DaemonProcess(workspace, extra: ["--limit-rate", "0"])
        let removed = try await unlimited.call(.GET, "/api/v1/settings").body as? [String: Any]
        #expect(removed != nil && removed?["limitRate"] as? Int == nil, "\(String(describing: removed))")
        _ = await unlimited.stop(SIGTERM)
    }

    @Test("SIGTERM: exit 0, not a hang; serve.json removed; a restart resumes the download where it stopped")
    func sigterm() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        server.serve("/f.bin", .init(body: body, bytesPerSecond: 500_000))
        let daemon = try await DaemonProcess(workspace)
        let id = try await daemon.add(server.url("/f.bin"))
        #expect(await waitUntil { (workspace.size("f.bin.part") ?? 0) > 300_000 })
        let start = ContinuousClock.now
        let stopped = await daemon.stop(SIGTERM)
        let took = ContinuousClock.now - start
        #expect(stopped.status == 0, "\(stopped.stderr)")
        // A daemon that does not end is the bug this bound catches: it stops what has not ended after 5 s of its
        // own, and the bound leaves a loaded machine room. How fast it stops is not measured here.
        #expect(took < .seconds(30), "took \(took)")
        #expect(!FileManager.default.fileExists(atPath: workspace.state + "/serve.json"))
        #expect(!FileManager.default.fileExists(atPath: workspace.state + "/haul.sock"))
        let held = workspace.size("f.bin.part") ?? 0
        #expect(held > 0)
        let restarted = try await DaemonProcess(workspace)
        let done = try await restarted.waitUntilStopped(id)
        #expect(done["state"] as? String == "completed")
        #expect(workspace.holds("f.bin", body))
        #expect(server.requests(to: "/f.bin").last?.range == "bytes=\(held)-", "resumed at the exact offset")
        _ = await restarted.stop(SIGTERM)
    }

    @Test("a second haul serve on the same state folder refuses (exit 1); a haul get meanwhile goes through it")
    func oneDaemonPerStateFolder() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        server.serve("/a.bin", .init(body: body))
        let daemon = try await DaemonProcess(workspace)
        let second = try await HaulProcess.run(
            ["serve", "--listen", "127.0.0.1:0", "--state-dir", workspace.state], in: workspace)
        #expect(second.status == 1)
        #expect(second.stderr.contains("another haul serve"), "\(second.stderr)")
        let get = try await HaulProcess.run(["get", server.url("/a.bin").absoluteString, "--json"], in: workspace)
        #expect(get.status == 0, "\(get.stderr)")
        #expect(workspace.holds("a.bin", body))
        let result = try JSONSerialization.jsonObject(with: Data(get.stdout.utf8)) as? [String: Any]
        #expect(result?["path"] as? String == workspace.path("a.bin"))
        #expect(result?["bytes"] as? Int == body.count)
        #expect((result?["sha256"] as? String)?.count == 64)
        // The daemon has it: it was added through its socket.
        let listed = try await daemon.call(.GET, "/api/v1/downloads")
        let downloads = (listed.body as? [String: Any])?["downloads"] as? [[String: Any]] ?? []
        #expect(downloads.map { $0["origin"] as? String } == ["socket"])
        _ = await daemon.stop(SIGTERM)
    }

    @Test("--listen on a port another program listens on, or an address not this machine's: exit 1 in one sentence")
    func listenRefused() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        for (listen, says) in [
            ("127.0.0.1:\(server.port)", "cannot listen on 127.0.0.1:\(server.port): another program listens there"),
            ("192.0.2.1:8080", "cannot listen on 192.0.2.1:8080: 192.0.2.1 is not an address of this machine"),
        ] {
            let run = try await HaulProcess.run(
                ["serve", "--listen", listen, "--state-dir", workspace.state], in: workspace)
            #expect(run.status == 1, "\(run.stderr)")
            #expect(run.stderr.contains(says), "\(run.stderr)")
            #expect(!run.stderr.contains("HummingbirdCore") && !run.stderr.contains("errno"), "\(run.stderr)")
        }
    }

    @Test("a missing --download-dir is made, as aria2 makes its --dir; a missing --allow-dir or a file is refused")
    func missingFolders() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        let state = ["--listen", "127.0.0.1:0", "--state-dir", workspace.state]
        for (flags, says) in [
            (["--allow-dir", workspace.path("typo")], "--allow-dir '\(workspace.path("typo"))': no such folder"),
            (["--download-dir", "/etc/passwd"], "--download-dir '/etc/passwd' is not a folder"),
        ] {
            let run = try await HaulProcess.run(["serve"] + state + flags, in: workspace)
            #expect(run.status == 2 && run.stderr.contains(says), "\(run.stderr)")
        }
        // -d, as haul get -d and aria2c -d.
        let folder = workspace.path("new/downloads")
        let daemon = try await DaemonProcess(workspace, extra: ["-d", folder])
        let settings = try await daemon.call(.GET, "/api/v1/settings").body as? [String: Any]
        #expect(settings?["downloadDir"] as? String == folder, "\(String(describing: settings))")
        var isFolder: ObjCBool = false
        #expect(FileManager.default.fileExists(atPath: folder, isDirectory: &isFolder) && isFolder.boolValue)
        _ = await daemon.stop(SIGTERM)
    }

    @Test("haul add, ls, pause, resume, watch --until-done, rm and clean against a running daemon")
    func commandsThroughTheDaemon() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        server.serve("/slow.bin", .init(body: body, bytesPerSecond: 400_000))
        server.serve("/quick.bin", .init(body: body))
        let daemon = try await DaemonProcess(workspace)
        let state = ["--state-dir", workspace.state]
        let add = try await HaulProcess.run(["add", server.url("/slow.bin").absoluteString] + state, in: workspace)
        #expect(add.status == 0, "\(add.stderr)")
        let id = add.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(id.count == 36)
        #expect(await waitUntil { (workspace.size("slow.bin.part") ?? 0) > 100_000 })
        let pause = try await HaulProcess.run(["pause", String(id.suffix(8))] + state, in: workspace)
        #expect(pause.status == 0 && pause.stdout.contains("paused"), "\(pause.stderr)")
        let listed = try await HaulProcess.run(["ls", "--json"] + state, in: workspace)
        let rows = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]]
        #expect(rows?.first?["state"] as? String == "paused")
        // --state through the daemon: it sends only those.
        let pausedOnly = try await HaulProcess.run(["ls", "--state", "paused"] + state, in: workspace)
        #expect(pausedOnly.stdout.hasPrefix(String(id.suffix(8)) + " paused"), "\(pausedOnly.stdout)")
        let completedOnly = try await HaulProcess.run(["ls", "--state", "completed"] + state, in: workspace)
        #expect(completedOnly.status == 0 && completedOnly.stdout.isEmpty, "\(completedOnly.stdout)")
        #expect(try await HaulProcess.run(["pause", "zzzz"] + state, in: workspace).status == 1)
        // A whole id is asked for by itself; one the daemon does not have is named as a short one is.
        let stranger = "01234567-89ab-7def-8123-456789abcdef"
        let unknown = try await HaulProcess.run(["pause", stranger] + state, in: workspace)
        #expect(unknown.status == 1 && unknown.stderr == "haul: error: no download with id \(stranger)\n")
        let resume = try await HaulProcess.run(["resume", String(id.prefix(13))] + state, in: workspace)
        #expect(resume.status == 0, "\(resume.stderr)")
        for command in ["pause", "resume"] {
            let run = try await HaulProcess.run([command, id.uppercased()] + state, in: workspace)
            #expect(run.status == 0 && run.stdout.contains("d \(id.suffix(8))"), "\(command): \(run.stderr)")
        }
        // --all: every download, as aria2's pauseAll and unpauseAll; with ids too, it is refused.
        let pauseAll = try await HaulProcess.run(["pause", "--all"] + state, in: workspace)
        #expect(pauseAll.stdout == "haul: paused every download that was queued, running or waiting; 1 paused\n")
        let resumeAll = try await HaulProcess.run(["resume", "--all"] + state, in: workspace)
        #expect(resumeAll.status == 0 && resumeAll.stdout.hasPrefix("haul: resumed every paused download; "))
        let both = try await HaulProcess.run(["pause", "--all", String(id.suffix(8))] + state, in: workspace)
        #expect(both.status == 2 && both.stderr.contains("give ids or --all, not both"), "\(both.stderr)")
        let quick = try await HaulProcess.run(
            ["add", server.url("/quick.bin").absoluteString, "-d", workspace.files] + state, in: workspace)
        #expect(quick.status == 0)
        let watch = try await HaulProcess.run(["watch", "--until-done"] + state, in: workspace)
        #expect(watch.status == 0, "\(watch.stderr)")
        #expect(watch.stderr.contains("saved \(workspace.path("slow.bin"))"), "\(watch.stderr)")
        // Its start line, whether it was already running when watch began (told from the first snapshot) or not.
        let started = "haul: \(server.url("/slow.bin").absoluteString) -> \(workspace.path("slow.bin"))\n"
        #expect(watch.stderr.contains(started), "\(watch.stderr)")
        #expect(workspace.holds("slow.bin", body) && workspace.holds("quick.bin", body))
        let removed = try await HaulProcess.run(["rm", String(id.suffix(8)), "--delete-file"] + state, in: workspace)
        #expect(removed.status == 0)
        #expect(removed.stdout == "haul: forgot \(id.suffix(8)) slow.bin and deleted its file\n", "\(removed.stdout)")
        #expect(!FileManager.default.fileExists(atPath: workspace.path("slow.bin")))
        let clean = try await HaulProcess.run(["clean"] + state, in: workspace)
        #expect(clean.stdout.contains("forgot 1 download"))
        // --until-done --quiet waits with the daemon's long poll, not its event stream: it prints only failures, and
        // a failure of a named download exits 1.
        server.serve("/steady.bin", .init(body: body, bytesPerSecond: 2_000_000))
        let steady = try await HaulProcess.run(
            ["add", server.url("/steady.bin").absoluteString] + state, in: workspace)
        #expect(steady.status == 0, "\(steady.stderr)")
        let quiet = try await HaulProcess.run(["watch", "--until-done", "--quiet"] + state, in: workspace)
        #expect(quiet.status == 0 && quiet.stdout.isEmpty && quiet.stderr.isEmpty, "\(quiet.stderr)")
        #expect(workspace.holds("steady.bin", body))
        let missingURL = server.url("/missing.bin").absoluteString
        let missing = try await HaulProcess.run(["add", missingURL] + state, in: workspace)
        let missingID = missing.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let failed = try await HaulProcess.run(["watch", "--until-done", "--quiet", missingID] + state, in: workspace)
        #expect(failed.status == 1)
        #expect(failed.stderr.hasPrefix("haul: error: \(missingURL): ") && failed.stderr.contains("404"))
        _ = await daemon.stop(SIGTERM)
        // Without a daemon, the daemon's commands say how to start one.
        let orphan = try await HaulProcess.run(["pause", "abc"] + state, in: workspace)
        #expect(orphan.status == 1 && orphan.stderr.contains("haul serve"))
    }

    @Test("haul watch follows a daemon that restarts: the fresh snapshot tells what changed, not what had finished")
    func watchAcrossRestart() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        server.serve("/done.bin", .init(body: body))
        server.serve("/slow.bin", .init(body: body, bytesPerSecond: 1_000_000))
        let state = ["--state-dir", workspace.state]
        var daemon = try await DaemonProcess(workspace)
        let done = try await daemon.add(server.url("/done.bin"))
        #expect(try await daemon.waitUntilStopped(done)["state"] as? String == "completed")
        _ = try await daemon.add(server.url("/slow.bin"))
        let watch = try HaulProcess(["watch"] + state, in: workspace)
        // Told as running from the first snapshot.
        #expect(await waitUntil { watch.hasSaid("-> \(workspace.path("slow.bin"))") })
        _ = await daemon.stop(SIGTERM)
        // The next run's event ids are not the last run's: the watch reconnects to a fresh snapshot.
        daemon = try await DaemonProcess(workspace)
        #expect(await waitUntil { watch.hasSaid("saved \(workspace.path("slow.bin"))") })
        watch.signal(SIGINT)
        let watched = await watch.finish()
        #expect(watched.status == 130, "\(watched.stderr)")
        #expect(!watched.stderr.contains("done.bin"), "\(watched.stderr)")
        #expect(workspace.holds("slow.bin", body))
        _ = await daemon.stop(SIGTERM)
    }

    @Test(
        "haul watch --until-done across a restart: a followed download missing from the fresh snapshot (removed meanwhile) is asked for, and the watch ends"
    )
    func watchAsksForMissing() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        server.serve("/slow.bin", .init(body: body, bytesPerSecond: 1_000_000))
        server.serve("/gone.bin", .init(body: body, bytesPerSecond: 100_000))
        let state = ["--state-dir", workspace.state]
        var daemon = try await DaemonProcess(workspace)
        _ = try await daemon.add(server.url("/slow.bin"))
        let gone = try await daemon.add(server.url("/gone.bin"))
        let watch = try HaulProcess(["watch", "--until-done"] + state, in: workspace)
        #expect(await waitUntil { watch.hasSaid("-> \(workspace.path("gone.bin"))") })
        _ = await daemon.stop(SIGTERM)
        // Removed while no daemon runs: the next daemon's snapshot does not hold it, and no event will tell of it.
        let removed = try await HaulProcess.run(["rm", gone] + state, in: workspace)
        #expect(removed.status == 0, "\(removed.stderr)")
        daemon = try await DaemonProcess(workspace)
        // Waiting for the removed download, it would never end.
        let watched = await watch.finish(within: 60)
        #expect(watched.ended && watched.status == 0, "\(watched.stderr)")
        #expect(watched.stderr.contains("saved \(workspace.path("slow.bin"))"), "\(watched.stderr)")
        #expect(workspace.holds("slow.bin", body))
        _ = await daemon.stop(SIGTERM)
    }

    @Test(
        "haul get through the daemon ends when another client removes one of its downloads while it waits in the queue")
    func getEndsOnRemoval() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        server.serve("/slow.bin", .init(body: body, bytesPerSecond: 1_000_000))
        server.serve("/queued.bin", .init(body: body))
        let state = ["--state-dir", workspace.state]
        let daemon = try await DaemonProcess(workspace, extra: ["-j", "1"])
        let urls = [server.url("/slow.bin").absoluteString, server.url("/queued.bin").absoluteString]
        let get = try HaulProcess(["get"] + urls + state, in: workspace)
        // Its start line comes from the stream, which it follows from then on.
        #expect(await waitUntil { get.hasSaid("-> \(workspace.path("slow.bin"))") })
        let listed = try await daemon.call(.GET, "/api/v1/downloads?state=queued").body as? [String: Any]
        let queued = try #require((listed?["downloads"] as? [[String: Any]])?.first?["id"] as? String)
        // Removed while queued, it has no last state change: only its removal tells of it.
        let removed = try await HaulProcess.run(["rm", queued] + state, in: workspace)
        #expect(removed.status == 0, "\(removed.stderr)")
        let got = await get.finish(within: 30)
        #expect(got.ended && got.status == 1, "\(got.stderr)")
        #expect(
            got.stderr.contains("haul: error: \(urls[1]): removed by another client of the daemon\n"), "\(got.stderr)")
        #expect(got.stderr.contains("haul: 1 done, 1 failed\n"), "\(got.stderr)")
        #expect(
            workspace.holds("slow.bin", body) && !FileManager.default.fileExists(atPath: workspace.path("queued.bin")))
        _ = await daemon.stop(SIGTERM)
    }

    @Test(
        "haul watch --until-done counts as failures only those of its own time: a download failed before, moved meanwhile, is not"
    )
    func watchCountsItsOwnFailures() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        server.serve("/slow.bin", .init(body: body, bytesPerSecond: 1_000_000))
        let state = ["--state-dir", workspace.state]
        let daemon = try await DaemonProcess(workspace)
        let failed = try await daemon.add(server.url("/missing.bin"))
        #expect(try await daemon.waitUntilStopped(failed)["state"] as? String == "failed")
        _ = try await daemon.add(server.url("/slow.bin"))
        let watch = try HaulProcess(["watch", "--until-done"] + state, in: workspace)
        #expect(await waitUntil { watch.hasSaid("-> \(workspace.path("slow.bin"))") })
        // Not in the watch's first snapshot (it holds what has not stopped): its first news is this change.
        let moved = try await daemon.call(.POST, "/api/v1/downloads/\(failed)/move", json: ["to": "top"])
        #expect(moved.status == 200)
        let watched = await watch.finish(within: 30)
        #expect(watched.ended && watched.status == 0, "\(watched.stderr)")
        #expect(watched.stderr.contains("saved \(workspace.path("slow.bin"))"), "\(watched.stderr)")
        _ = await daemon.stop(SIGTERM)
    }

    @Test("haul add of a list longer than one request takes (8 MiB) sends it in parts, and every download is added")
    func addInParts() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        let daemon = try await DaemonProcess(workspace)
        let state = ["--state-dir", workspace.state]
        // 5,000 URLs of 2 KB: about 10 MB of list.
        let padding = String(repeating: "x", count: 2_000)
        let urls = (0..<5_000).map { server.url("/f\($0).bin").absoluteString + "?pad=\(padding)" }
        let list = workspace.root + "/list.txt"
        try urls.joined(separator: "\n").write(toFile: list, atomically: true, encoding: .utf8)
        let add = try await HaulProcess.run(["add", "--paused", "-i", list] + state, in: workspace)
        #expect(add.status == 0, "\(add.stderr)")
        #expect(Set(add.stdout.split(separator: "\n")).count == 5_000)
        let listed = try await HaulProcess.run(["ls", "--state", "paused"] + state, in: workspace)
        #expect(listed.stdout.split(separator: "\n").count == 5_000)
        _ = await daemon.stop(SIGTERM)
    }

    @Test("haul pause, cancel and rm of several ids stop the running one last: no queued one is started on the way")
    func stoppingSeveral() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        for index in 0..<4 { server.serve("/\(index).bin", .init(body: body, bytesPerSecond: 400_000)) }
        let daemon = try await DaemonProcess(workspace, extra: ["-j", "1"])
        let state = ["--state-dir", workspace.state]
        let urls = (0..<4).map { server.url("/\($0).bin").absoluteString }
        let add = try await HaulProcess.run(["add"] + urls + state, in: workspace)
        let ids = add.stdout.split(separator: "\n").map(String.init)
        #expect(ids.count == 4, "\(add.stderr)")
        // The running one comes first in the list, as `haul ls` lists the queue.
        #expect(await waitUntil { (workspace.size("0.bin.part") ?? 0) > 0 })
        for command in ["pause", "resume", "cancel", "retry", "rm"] {
            let run = try await HaulProcess.run([command] + ids + state, in: workspace)
            #expect(run.status == 0, "\(command): \(run.stderr)")
            if command == "resume" || command == "retry" {
                #expect(
                    await waitUntil {
                        server.requests.filter { $0.path == "/0.bin" }.count >= (command == "resume" ? 2 : 3)
                    })
            }
        }
        _ = await daemon.stop(SIGTERM)
        #expect(Set(server.requests.map(\.path)) == ["/0.bin"], "\(server.requests.map(\.path))")
        for index in 1..<4 { #expect(!FileManager.default.fileExists(atPath: workspace.path("\(index).bin.part"))) }
    }

    @Test(
        "haul get through the daemon: Ctrl-C pauses what it added and exits 130; the same command finishes it, resumed, or from 0 when the file changed meanwhile",
        arguments: [false, true])
    func getInterrupted(fileChanged: Bool) async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        server.serve("/f.bin", .init(body: body, bytesPerSecond: 400_000))
        let daemon = try await DaemonProcess(workspace)
        let get = try HaulProcess(["get", server.url("/f.bin").absoluteString, "-o", "f.bin"], in: workspace)
        #expect(await waitUntil { (workspace.size("f.bin.part") ?? 0) > 200_000 })
        get.signal(SIGINT)
        let interrupted = await get.finish()
        #expect(interrupted.status == 130, "\(interrupted.stderr)")
        let listed = try await daemon.call(.GET, "/api/v1/downloads")
        let downloads = (listed.body as? [String: Any])?["downloads"] as? [[String: Any]] ?? []
        #expect(downloads.first?["state"] as? String == "paused")
        // A new version: the bytes held are of the old one, and the download starts again from the first byte;
        // it is not said to be resumed.
        let expected = fileChanged ? body.map { $0 ^ 0x5A } : body
        if fileChanged { server.serve("/f.bin", .init(body: expected, etag: "\"v2\"")) }
        let again = try await HaulProcess.run(
            ["get", server.url("/f.bin").absoluteString, "-o", "f.bin", "--json"], in: workspace)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(workspace.holds("f.bin", expected))
        let result = try JSONSerialization.jsonObject(with: Data(again.stdout.utf8)) as? [String: Any]
        let resumedFrom = result?["resumed-from"] as? Int ?? -1
        #expect(fileChanged ? resumedFrom == 0 : resumedFrom > 200_000, "\(again.stdout)")
        _ = await daemon.stop(SIGTERM)
    }

    @Test(
        "a reader of the event stream that stops reading: memory stays bounded while 16 downloads run, and its stream is closed once it is 4,096 events behind"
    )
    func stalledReader() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        let file = testBytes(3_000_000, seed: 9)
        for index in 0..<16 { server.serve("/\(index).bin", .init(body: file, bytesPerSecond: 600_000)) }
        let daemon = try await DaemonProcess(workspace, extra: ["-j", "16"])
        let port = Int(daemon.url.split(separator: ":").last ?? "") ?? 0
        // A client that asks for the stream and never reads a byte of it.
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var receive: Int32 = 4096
        setsockopt(socket, SOL_SOCKET, SO_RCVBUF, &receive, socklen_t(MemoryLayout<Int32>.size))
        let connected = withLoopbackAddress(port: port) { connect(socket, $0, $1) }
        #expect(connected == 0)
        let request =
            "GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nAuthorization: Bearer \(daemon.token)\r\n\r\n"
        _ = request.withCString { send(socket, $0, strlen($0), 0) }
        let before = daemon.residentKiB
        let ids = try await daemon.add((0..<16).map { server.url("/\($0).bin") })
        var peak = before
        for id in ids {
            let done = try await daemon.waitUntilStopped(id, seconds: 120)
            #expect(done["state"] as? String == "completed")
            peak = max(peak, daemon.residentKiB)
        }
        // Bounded: progress collapses per download for a reader that falls behind. The bound leaves room for sixteen
        // connections' buffers.
        #expect(peak - before < 64 * 1024, "grew from \(before) KiB to \(peak) KiB")
        // 6,000 additions are 6,000 events that do not collapse: more than a reader may fall behind (4,096), so the
        // daemon ends this reader's stream. Reading now finds its end (the last chunk) instead of waiting forever.
        let paused = (0..<6000).map { ["url": "http://127.0.0.1:9/\($0)", "paused": true] as [String: Any] }
        #expect(try await daemon.call(.POST, "/api/v1/downloads", json: paused).status == 200)
        peak = max(peak, daemon.residentKiB)
        #expect(peak - before < 64 * 1024, "grew from \(before) KiB to \(peak) KiB")
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let ended = await onOwnThread {
            var tail: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            // Heartbeats keep an open stream talking, so the wait has a deadline of its own.
            let deadline = Date().addingTimeInterval(30)
            while Date() < deadline {
                let count = recv(socket, &buffer, buffer.count, 0)
                if count <= 0 { return false }
                tail = Array((tail + buffer[0..<count]).suffix(16))
                if tail.count >= 5, Array(tail.suffix(5)) == Array("0\r\n\r\n".utf8) { return true }
            }
            return false
        }
        #expect(ended, "the stream of a reader far behind was not closed")
        // The daemon still answers.
        #expect(try await daemon.call(.GET, "/api/v1/stats").status == 200)
        _ = await daemon.stop(SIGTERM)
    }

    @Test("--tls-cert: the API over HTTPS, serve.json says https; a non-loopback listener without TLS warns")
    func tls() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let openssl = try #require(executable("openssl"), "openssl is installed by .ci/run")
        let made = Process()
        made.executableURL = URL(fileURLWithPath: openssl)
        made.arguments = [
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout", workspace.root + "/key.pem", "-out", workspace.root + "/cert.pem",
        ]
        made.standardOutput = FileHandle.nullDevice
        made.standardError = FileHandle.nullDevice
        try made.run()
        await onOwnThread { made.waitUntilExit() }
        #expect(made.terminationStatus == 0)
        let daemon = try await DaemonProcess(
            workspace, extra: ["--tls-cert", workspace.root + "/cert.pem", "--tls-key", workspace.root + "/key.pem"])
        #expect(daemon.url.hasPrefix("https://127.0.0.1:"))
        let curl = try #require(executable("curl"))
        let fetch = Process()
        fetch.executableURL = URL(fileURLWithPath: curl)
        fetch.arguments = [
            "-s", "--cacert", workspace.root + "/cert.pem", "-H", "Authorization: Bearer \(daemon.token)",
            "-o", workspace.root + "/stats.json", "-w", "%{http_code}", daemon.url + "/api/v1/stats",
        ]
        let status = Pipe()
        fetch.standardOutput = status
        try fetch.run()
        await onOwnThread { fetch.waitUntilExit() }
        let code = String(decoding: status.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(code == "200")
        let stats = FileManager.default.contents(atPath: workspace.root + "/stats.json") ?? Data()
        #expect((try? JSONSerialization.jsonObject(with: stats) as? [String: Any])?["counts"] != nil)

        // haul's own client: its self-signed certificate is refused, naming the way to trust it, and trusted with
        // --server-cacert; a file that holds no certificate is refused as such.
        let remote = ["--server", daemon.url, "--token", daemon.token, "--state-dir", workspace.root + "/elsewhere"]
        let untrusted = try await HaulProcess.run(["ls"] + remote, in: workspace)
        #expect(untrusted.status == 1)
        #expect(
            untrusted.stderr.contains("cannot reach the daemon: the TLS certificate of 127.0.0.1:")
                && untrusted.stderr.contains("--server-cacert FILE trusts the daemon's own certificate"),
            "\(untrusted.stderr)")
        let trusted = try await HaulProcess.run(
            ["ls", "--json", "--server-cacert", workspace.root + "/cert.pem"] + remote, in: workspace)
        #expect(trusted.status == 0 && trusted.stdout.hasPrefix("["), "\(trusted.stderr)")
        let notPEM = try await HaulProcess.run(
            ["ls", "--server-cacert", workspace.root + "/stats.json"] + remote, in: workspace)
        #expect(notPEM.status == 2)
        #expect(notPEM.stderr.contains("stats.json holds no PEM certificate"), "\(notPEM.stderr)")
        // Asked in plain HTTP, it says in plain HTTP that it speaks HTTPS.
        let plain = "http://" + daemon.url.dropFirst("https://".count)
        let unencrypted = try await HaulProcess.run(
            ["ls", "--server", plain, "--token", daemon.token, "--state-dir", workspace.root + "/elsewhere"],
            in: workspace)
        #expect(unencrypted.status == 1)
        #expect(
            unencrypted.stderr.contains(
                "the daemon answered 400: This is haul serve over HTTPS: ask for https:// at this address."),
            "\(unencrypted.stderr)")
        let stopped = await daemon.stop(SIGTERM)
        #expect(!stopped.stderr.contains("clear text"))
        let open = try await DaemonProcess(workspace, listen: "0.0.0.0:0")
        let output = await open.stop(SIGTERM)
        #expect(output.stderr.contains("the token travels in clear text"), "\(output.stderr)")
    }

    @Test(
        "--server https:// at a server that does not speak TLS: told on the first connection, which is not tried again and again"
    )
    func serverWithoutTLS() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        let listed = try await HaulProcess.run(
            [
                "ls", "--server", "https://127.0.0.1:\(server.port)", "--token", "t", "--state-dir",
                workspace.root + "/elsewhere",
            ], in: workspace)
        #expect(listed.status == 1)
        #expect(
            listed.stderr.contains("cannot reach the daemon: the TLS handshake with 127.0.0.1:"), "\(listed.stderr)")
        #expect(server.acceptedConnections == 1)
    }

    @Test("--server URL with --token or HAUL_TOKEN reaches a daemon over HTTP; a wrong token is refused")
    func remoteServer() async throws {
        let (workspace, server) = try await Self.setUp()
        defer { Self.tearDown(workspace, server) }
        server.serve("/a.bin", .init(body: body))
        let daemon = try await DaemonProcess(workspace)
        let elsewhere = ["--state-dir", workspace.root + "/other-state"]
        let added = try await HaulProcess.run(
            ["add", server.url("/a.bin").absoluteString, "--paused", "--server", daemon.url, "--token", daemon.token]
                + elsewhere, in: workspace)
        #expect(added.status == 0, "\(added.stderr)")
        let listed = try await HaulProcess.run(
            ["ls", "--json", "--server", daemon.url, "--token", daemon.token] + elsewhere, in: workspace)
        let rows = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]]
        #expect(rows?.map { $0["state"] as? String } == ["paused"])
        let refused = try await HaulProcess.run(
            ["ls", "--server", daemon.url, "--token", "wrong"] + elsewhere, in: workspace)
        #expect(refused.status == 1 && refused.stderr.contains("Authorization: Bearer"), "\(refused.stderr)")
        let missing = try await HaulProcess.run(["ls", "--server", daemon.url] + elsewhere, in: workspace)
        #expect(missing.status == 2 && missing.stderr.contains("token"))
        // Paths name the daemon's folders, not this machine's: from a current folder the daemon may not write to,
        // no -d means its download folder, and a relative -d or -o is beneath it.
        server.serve("/b.bin", .init(body: body))
        let remote = ["--server", daemon.url, "--token", daemon.token] + elsewhere
        var ids: [String] = []
        for placed in [[], ["-d", "sub"], ["-o", "deep/named.bin"], ["-o", "named.bin"]] {
            let outcome = try await HaulProcess.run(
                ["add", server.url("/b.bin").absoluteString] + placed + remote, in: workspace, folder: workspace.root)
            #expect(outcome.status == 0, "\(placed): \(outcome.stderr)")
            ids += outcome.stdout.split(separator: "\n").map(String.init)
        }
        let watched = try await HaulProcess.run(["watch", "--until-done", "--quiet"] + ids + remote, in: workspace)
        #expect(watched.status == 0, "\(watched.stderr)")
        for path in ["b.bin", "sub/b.bin", "deep/named.bin", "named.bin"] {
            #expect(FileManager.default.contents(atPath: workspace.files + "/" + path) == Data(body), "\(path)")
        }
        let outside = try await HaulProcess.run(
            ["add", server.url("/b.bin").absoluteString, "-d", workspace.root] + remote, in: workspace)
        #expect(outside.status == 1 && outside.stderr.contains("outside the folders"), "\(outside.stderr)")
        _ = await daemon.stop(SIGTERM)
    }
}
