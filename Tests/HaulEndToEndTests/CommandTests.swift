import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The built `haul` binary, run as a child process against the in-process fault server.
@Suite("haul get, end to end", .serialized, .timeLimit(.minutes(2)))
struct CommandTests {
    let body = testBytes(3_000_000)

    @Test("kill -9 at random moments, then a rerun: the bytes are identical to the source")
    func killNine() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        let rate = 600_000
        // Larger than the other tests' body: the last kill's target is at most four fifths in, and the time left
        // after it (1.6 s here; 1 s with 3 MB, which a loaded machine's polling thread once missed, so the run
        // finished before its kill) is the window in which the kill must land.
        let body = testBytes(4_800_000, seed: 9)
        server.serve("/big", .init(body: body, bytesPerSecond: rate))
        var generator = SystemRandomNumberGenerator()
        let kills = 4
        let slice = body.count / (kills + 1)
        var heldAtKill: [Int64] = []
        for index in 0..<kills {
            // Kill at a random moment within the next fifth of the file.
            let target = Int64(slice * index + Int.random(in: slice / 4..<slice, using: &generator))
            let requestsBefore = server.requests(to: "/big").count
            let haul = try HaulProcess(
                [server.url("/big").absoluteString, "-o", "big.bin"].prepended("get"), in: workspace)
            // This process's own request must have arrived: the part file may already be past the target from the
            // run before, and a kill before any request would measure nothing.
            let reached = await haul.signal(SIGKILL) {
                (server.requests(to: "/big").count > requestsBefore
                    && (workspace.size("big.bin.part") ?? 0) >= target) || !haul.process.isRunning
            }
            let outcome = await haul.finish()
            // Measured once the process is dead: everything it wrote is in the file.
            let held = workspace.size("big.bin.part")
            heldAtKill.append(held ?? 0)
            #expect(
                reached && held.map { $0 >= target } == true,
                "kill \(index): part \(String(describing: held)) of target \(target); haul exited \(outcome.status): \(outcome.stderr)"
            )
        }
        let final = try await HaulProcess.run(
            ["get", server.url("/big").absoluteString, "-o", "big.bin"], in: workspace)
        #expect(final.status == 0, "\(final.stderr)")
        #expect(workspace.holds("big.bin", body))
        #expect(workspace.size("big.bin.part") == nil)
        // Each kill costs at most about one checkpoint interval (1 s) of re-download: the next run resumes no
        // further back than that from what the killed one held.
        let starts = server.requests(to: "/big").dropFirst().map { request in
            request.range.flatMap { Int64($0.dropFirst(6).dropLast()) } ?? 0
        }
        #expect(starts.count == kills)
        for (held, start) in zip(heldAtKill, starts) {
            #expect(start <= held)
            #expect(held - start <= Int64(rate) * 2, "held \(held) at the kill, resumed at \(start)")
        }
        await server.stop()
    }

    @Test("SIGINT exits 130 with the exact offset saved; the rerun fetches only what was missing (SIGTERM, SIGHUP too)")
    func interrupt() async throws {
        for (signal, status) in [(SIGINT, Int32(130)), (SIGTERM, Int32(143)), (SIGHUP, Int32(129))] {
            let workspace = try Workspace()
            let server = try await FaultServer.start()
            // The first answer holds the rest back after 400,000 bytes, so the signal surely lands while the download
            // runs, however slowly a loaded machine lets this test see the part file grow.
            server.serve("/big", .init(body: body) { index, _ in index == 0 ? .hold(afterBytes: 400_000) : nil })
            let haul = try HaulProcess(["get", server.url("/big").absoluteString, "-o", "big.bin"], in: workspace)
            #expect(await waitUntil { (workspace.size("big.bin.part") ?? 0) > 300_000 })
            haul.signal(signal)
            let outcome = await haul.finish()
            #expect(outcome.status == status, "\(outcome.stderr)")
            // After SIGHUP no terminal is left to read it.
            #expect(outcome.stderr.contains("paused") == (signal != SIGHUP), "\(outcome.stderr)")
            let held = try #require(workspace.size("big.bin.part"))
            let store = try DownloadStore(directory: workspace.state)
            let record = try #require(try store.allRecords().first)
            #expect(record.durableOffset == held, "the stored offset is the exact part length")
            #expect(record.state == .paused)
            let rerun = try await HaulProcess.run(
                ["get", server.url("/big").absoluteString, "-o", "big.bin"], in: workspace)
            #expect(rerun.status == 0)
            #expect(workspace.holds("big.bin", body))
            let requests = server.requests(to: "/big")
            #expect(requests.count == 2)
            #expect(requests.last?.range == "bytes=\(held)-")
            #expect(server.bodyBytesSent(for: "/big") - requests[0].bodyBytesSent <= body.count - Int(held))
            await server.stop()
            workspace.remove()
        }
    }

    @Test("a completed rerun says the file is there and fetches no body; --json reports the result")
    func completedRerun() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        server.serve("/f", .init(body: body))
        let first = try await HaulProcess.run(
            ["get", server.url("/f").absoluteString, "-o", "f.bin", "--json"], in: workspace)
        #expect(first.status == 0)
        let json = try JSONSerialization.jsonObject(with: Data(first.stdout.utf8)) as? [String: Any]
        #expect(json?["bytes"] as? Int == body.count)
        #expect(json?["path"] as? String == workspace.path("f.bin"))
        #expect((json?["sha256"] as? String)?.count == 64)
        #expect(json?["resumed-from"] as? Int == 0)
        #expect(json?["url"] as? String == server.url("/f").absoluteString)
        #expect(first.stdout.contains("\"path\":\"\(workspace.path("f.bin"))\""))
        let second = try await HaulProcess.run(["get", server.url("/f").absoluteString, "-o", "f.bin"], in: workspace)
        #expect(second.status == 0)
        #expect(second.stderr.contains("already complete"))
        #expect(server.requests(to: "/f").count == 1)
        await server.stop()
    }

    @Test("a haul serve that holds the state folder but has not opened its socket yet (starting): try again, says ls")
    func daemonStarting() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        // The lock a starting haul serve takes first, before it reads its queue and opens its socket.
        guard case .acquired(let lock) = StateLock.acquire(workspace.state, exclusive: true) else {
            Issue.record("the state folder's lock was not taken")
            return
        }
        defer { close(lock) }
        let listed = try await HaulProcess.run(["ls", "--state-dir", workspace.state], in: workspace)
        #expect(listed.status == 1)
        #expect(
            listed.stderr
                == "haul: error: haul serve holds this state folder but has not opened its socket (it is starting or "
                + "stopping): try again in a moment\n", "\(listed.stderr)")
    }

    @Test(
        "commands that read or change what is stored, given a state folder that does not exist, say what is there and make no folder"
    )
    func missingStateFolder() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let typo = workspace.root + "/typo"
        let answers: [([String], Int32, String, String)] = [
            (["ls"], 0, "", ""), (["ls", "--json"], 0, "[]\n", ""),
            (["clean"], 0, "haul: forgot 0 downloads\n", ""),
            (["rm", "abc"], 1, "", "haul: error: no download with id abc"),
            (["retry", "abc"], 1, "", "haul: error: no download with id abc"),
            (["pause", "abc"], 1, "", "haul: error: no haul serve runs for \(typo); start one with `haul serve`"),
            (["workers"], 1, "", "haul: error: no haul serve runs for \(typo)"),
        ]
        for (arguments, status, stdout, stderr) in answers {
            let run = try await HaulProcess.run(arguments + ["--state-dir", typo], in: workspace)
            #expect(run.status == status && run.stdout == stdout, "\(arguments): \(run.stdout)\(run.stderr)")
            #expect(stderr.isEmpty ? run.stderr.isEmpty : run.stderr.hasPrefix(stderr), "\(arguments): \(run.stderr)")
            #expect(!FileManager.default.fileExists(atPath: typo), "\(arguments) made the folder")
        }
    }

    @Test("-o into a folder that is missing makes it with its parents, as -d does; -o naming a folder says to use -d")
    func outputFolders() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        server.serve("/f", .init(body: body))
        let run = try await HaulProcess.run(
            ["get", server.url("/f").absoluteString, "-o", "new/deeper/f.bin"], in: workspace)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(workspace.holds("new/deeper/f.bin", body))
        // A one-character name, whose folder Foundation's NSString cannot work out (it traps).
        let short = try await HaulProcess.run(["get", server.url("/f").absoluteString, "-o", "x"], in: workspace)
        #expect(short.status == 0 && workspace.holds("x", body), "\(short.stderr)")
        let folder = try await HaulProcess.run(["get", server.url("/f").absoluteString, "-o", "new"], in: workspace)
        #expect(folder.status == 1 && folder.stderr.contains("is a folder; to download into it"), "\(folder.stderr)")
        await server.stop()
    }

    @Test("-c adopts a file: a beginning is resumed, a whole file is said to be here, a different one is fetched anew")
    func continueAdopts() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        server.serve("/f", .init(body: body))
        let url = server.url("/f").absoluteString
        for (name, held, says) in [
            ("whole.bin", body, "haul: saved \(workspace.path("whole.bin")) (2.9 MiB; every byte was already here)"),
            ("start.bin", Array(body.prefix(100_000)), "resumed from 97.7 KiB)"),
            ("other.bin", Array(repeating: 7, count: 100_000), "the bytes held differ from the server's"),
        ] {
            #expect(FileManager.default.createFile(atPath: workspace.path(name), contents: Data(held)))
            let run = try await HaulProcess.run(["get", url, "-o", name, "-c"], in: workspace)
            #expect(run.status == 0 && run.stderr.contains(says), "\(name): \(run.stderr)")
            #expect(workspace.holds(name, body))
        }
        await server.stop()
    }

    @Test("with several downloads, a retry's line names the download it is about")
    func retryLineNamesTheDownload() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        server.serve("/a", .init(body: body))
        server.serve(
            "/b", .init(body: body) { index, _ in index == 0 ? .status(503, headers: ["Retry-After": "0"]) : nil })
        let b = server.url("/b").absoluteString
        let run = try await HaulProcess.run(["get", server.url("/a").absoluteString, b], in: workspace)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("haul: \(b): server answered HTTP 503"), "\(run.stderr)")
        #expect(workspace.holds("a", body) && workspace.holds("b", body))
        await server.stop()
    }

    @Test("the engine's warnings are written as haul's other lines are, not in swift-log's daemon format")
    func engineWarningsInHaulsWords() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        server.serve("/f", .init(body: body))
        let url = server.url("/f").absoluteString
        let run = try await HaulProcess.run(["get", url, "-o", "f.bin", "--on-complete", "false"], in: workspace)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("haul: warning: \(url): the hook 'false' exited with 1\n"), "\(run.stderr)")
        #expect(!run.stderr.contains("warning haul:") && !run.stderr.contains("[Haul]"), "\(run.stderr)")
        await server.stop()
    }

    /// On a terminal the board is redrawn by going up over its lines and clearing what follows: a line written below
    /// it, as a log line was, was erased by the next redraw.
    @Test("on a terminal, the engine's warnings are written above the progress board and stay on the screen")
    func warningsAboveTheBoard() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        server.serve("/quick", .init(body: Array(body.prefix(10_000))))
        server.serve("/slow", .init(body: Array(body.prefix(1_000_000)), bytesPerSecond: 500_000))
        let quick = server.url("/quick").absoluteString
        // A terminal for haul: Python's pty module runs it on one and copies what it draws to standard output.
        let terminal = ["/usr/bin/python3", "-c", "import pty, sys; sys.exit(pty.spawn(sys.argv[1:]) >> 8)"]
        let run = try await HaulProcess(
            ["get", quick, server.url("/slow").absoluteString, "--on-complete", "false"], in: workspace,
            launcher: terminal
        ).finish()
        #expect(run.status == 0, "\(run.stdout)")
        let screen = TerminalScreen(run.stdout).lines
        #expect(screen.contains("haul: warning: \(quick): the hook 'false' exited with 1"), "\(screen)")
        await server.stop()
    }

    /// A webhook that fails is tried again after a backoff that `haul get` does not wait out: it says what is left,
    /// and --quiet leaves the warnings out.
    @Test("haul get ends with a webhook not yet told: it says the notice is kept for the next run on the state folder")
    func webhookLeftPending() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        server.serve("/f", .init(body: body))
        server.serve("/hook", .init(body: []) { _, _ in .status(500, headers: [:]) })
        let secret = workspace.path("secret")
        #expect(FileManager.default.createFile(atPath: secret, contents: Data("whsec_c2VjcmV0c2VjcmV0c2VjcmV0".utf8)))
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: secret)
        let webhook = ["--webhook", server.url("/hook").absoluteString, "--webhook-secret-file", secret]
        let run = try await HaulProcess.run(
            ["get", server.url("/f").absoluteString, "-o", "f.bin"] + webhook, in: workspace)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("answered 500; trying again in 5 s"), "\(run.stderr)")
        #expect(run.stderr.contains("haul: warning: 1 download's end is not told"), "\(run.stderr)")
        let quiet = try await HaulProcess.run(
            ["get", server.url("/f").absoluteString, "-o", "g.bin", "--quiet"] + webhook, in: workspace)
        #expect(quiet.status == 0 && quiet.stderr.isEmpty, "\(quiet.stderr)")
        await server.stop()
    }

    @Test("names: Content-Disposition, hostile names, existing files")
    func names() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        server.serve(
            "/a",
            .init(body: body, contentDisposition: "attachment; filename=\"x.txt\"; filename*=UTF-8''na%C3%AFve.txt"))
        server.serve("/b", .init(body: body, contentDisposition: "attachment; filename=\"../../../tmp/evil.sh\""))
        server.serve("/c.bin", .init(body: body))
        _ = FileManager.default.createFile(atPath: workspace.path("c.bin"), contents: Data("mine".utf8))
        for path in ["/a", "/b", "/c.bin"] {
            let outcome = try await HaulProcess.run(
                ["get", server.url(path).absoluteString, "-d", workspace.files], in: workspace)
            #expect(outcome.status == 0, "\(outcome.stderr)")
        }
        #expect(workspace.holds("naïve.txt", body))
        #expect(workspace.holds("evil.sh", body))
        #expect(workspace.holds("c (1).bin", body))
        #expect(workspace.contents("c.bin") == Array("mine".utf8))
        // The file it finished, edited since: left as it is, and the run says why the file is saved under another name.
        _ = FileManager.default.createFile(atPath: workspace.path("c (1).bin"), contents: Data("edited".utf8))
        let again = try await HaulProcess.run(
            ["get", server.url("/c.bin").absoluteString, "-d", workspace.files], in: workspace)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(
            again.stderr.contains(
                "haul: warning: \(workspace.path("c (1).bin")) is not the file Haul finished any more (changed or "
                    + "replaced since); it is left as it is, and fetched again under the next free name"),
            "\(again.stderr)")
        #expect(workspace.holds("c (1) (1).bin", body))
        #expect(workspace.contents("c (1).bin") == Array("edited".utf8))
        let refused = try await HaulProcess.run(
            ["get", server.url("/c.bin").absoluteString, "-o", "c.bin"], in: workspace)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("--overwrite"))
        #expect(workspace.contents("c.bin") == Array("mine".utf8))
        let replaced = try await HaulProcess.run(
            ["get", server.url("/c.bin").absoluteString, "-o", "c.bin", "--overwrite"], in: workspace)
        #expect(replaced.status == 0)
        #expect(workspace.holds("c.bin", body))
        await server.stop()
    }

    @Test("exit statuses: failure 1 naming the status, bad usage 2, version and help 0")
    func exitStatuses() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        let missing = try await HaulProcess.run(["get", server.url("/nothing").absoluteString], in: workspace)
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("404"))
        for arguments in [
            ["get", "not a url"], ["get", "sftp://x/y"], ["get"], ["get", "http://x/y", "--timeout", "0"],
            ["get", "http://x/y", "--checksum", "sha256=12"], ["get", "http://x/y", "--header", "no colon"],
            ["get", "http://x/y", "--header", "Range: bytes=0-5"],
            ["get", "http://x/y", "--header", "Accept-Encoding: gzip"],
            ["get", "http://x/y", "-o", "a", "-d", "b"], ["get", "http://x/y", "--hook-timeout", "1e300h"],
            ["get", "http://x/y", "--on-complete", "/nonexistent/notify"],
            ["get", "http://x/y", "--on-error", "nosuchprog"],
            ["frobnicate"],
        ] {
            let outcome = try await HaulProcess.run(arguments, in: workspace)
            #expect(outcome.status == 2, "\(arguments): \(outcome.stderr)")
            #expect(!outcome.stderr.isEmpty)
        }
        let hook = try await HaulProcess.run(["get", "http://x/y", "--on-error", "nosuchprog --flag"], in: workspace)
        #expect(hook.stderr.contains("the hook program 'nosuchprog' is not found in any folder of PATH"))
        let digest = try await HaulProcess.run(["get", "http://x/y", "--checksum", "md5=zz"], in: workspace)
        #expect(digest.stderr.contains("--checksum 'md5=zz': an md5 digest is 32 hex digits"), "\(digest.stderr)")
        for (header, words) in [
            ("no colon", "--header 'no colon' is not 'Name: value'"),
            ("X-A: 1\r\nX-B: 2", "--header 'X-A' has a line break or another control character in its value"),
        ] {
            let refused = try await HaulProcess.run(["get", "http://x/y", "--header", header], in: workspace)
            #expect(refused.stderr.contains(words), "\(header): \(refused.stderr)")
        }
        let folder = try await HaulProcess.run(["get", "http://x/y", "-o", "downloads/"], in: workspace)
        #expect(folder.status == 2 && folder.stderr.contains("use -d"), "\(folder.stderr)")
        // A negative number is the flag's value, refused by its rule, not a "missing value".
        for (flag, words) in [
            ("--retries", "--retries must be 0 or more"), ("--timeout", "--timeout must be a positive number"),
            ("-j", "-j must be between 1 and 1000, not -1"),
            ("--limit-rate", "is not a rate such as 500K or 2M (0: no limit)"),
        ] {
            let negative = try await HaulProcess.run(["get", "http://x/y", flag, "-1"], in: workspace)
            #expect(negative.status == 2 && negative.stderr.contains(words), "\(flag): \(negative.stderr)")
        }
        // An option the command does not take is named as such, not its value taken for a URL.
        let unknown = try await HaulProcess.run(["add", "--sort", "*.iso=ISO", "http://x/y"], in: workspace)
        #expect(unknown.status == 2 && unknown.stderr.contains("Unknown option '--sort'"), "\(unknown.stderr)")
        let pipe = try await HaulProcess.run(["get", "http://x/y", "-o", "-"], in: workspace)
        #expect(pipe.status == 2 && pipe.stderr.contains("-o ./-"), "\(pipe.stderr)")
        #expect(!FileManager.default.fileExists(atPath: workspace.path("-")))
        let version = try await HaulProcess.run(["--version"], in: workspace)
        #expect(version.status == 0)
        #expect(version.stdout.contains(HaulVersion.current))
        let help = try await HaulProcess.run(["help", "get"], in: workspace)
        #expect(help.status == 0)
        #expect(help.stdout.contains("--checksum"))
        // A subcommand is parsed as a command of its own (`Main`); it reads as the root's subcommand all the same.
        let ownHelp = try await HaulProcess.run(["get", "--help"], in: workspace)
        #expect(ownHelp.status == 0)
        #expect(ownHelp.stdout.contains("USAGE: haul get "))
        #expect(ownHelp.stdout.contains("--checksum"))
        #expect(ownHelp.stdout.contains("--version"))
        let ownVersion = try await HaulProcess.run(["get", "--version"], in: workspace)
        #expect(ownVersion.status == 0)
        #expect(ownVersion.stdout.contains(HaulVersion.current))
        let usage = try await HaulProcess.run(["get", "--no-such-flag"], in: workspace)
        #expect(usage.status == 2)
        #expect(usage.stderr.contains("Usage: haul get "))
        #expect(usage.stderr.contains("See 'haul get --help'"))
        let other = try await HaulProcess.run(["ls", "--no-such-flag"], in: workspace)
        #expect(other.status == 2)
        #expect(other.stderr.contains("Usage: haul ls "))
        #expect(other.stderr.contains("See 'haul ls --help'"))
        // Given nothing, a subcommand that needs an argument answers with its usage error, not its whole help.
        let bare = try await HaulProcess.run(["pause"], in: workspace)
        #expect(bare.status == 2)
        #expect(bare.stderr.contains("Usage: haul pause "))
        #expect(!bare.stderr.contains("OVERVIEW"))
        await server.stop()
    }

    @Test("two processes for one destination: the second waits for the first, the file is written once and whole")
    func twoProcesses() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        // The first process's answer holds back all but 100 KB until the second has tried: at a rate, a loaded
        // machine could let the first finish before the second started.
        server.serve("/big", .init(body: body) { _, _ in .hold(afterBytes: 100_000) })
        let (stalls, stalled) = AsyncStream<Void>.makeStream()
        server.onStall { _ in stalled.yield() }
        let first = try HaulProcess(["get", server.url("/big").absoluteString, "-o", "big.bin"], in: workspace)
        var waits = stalls.makeAsyncIterator()
        _ = await waits.next()
        #expect(await waitUntil { (workspace.size("big.bin.part") ?? 0) > 0 })
        // A command for another file meanwhile leaves the first's download as the first holds it: running, not
        // queued again as one a dead process left.
        server.serve("/small", .init(body: Array(body.prefix(1000))))
        let other = try await HaulProcess.run(
            ["get", server.url("/small").absoluteString, "-o", "small.bin"], in: workspace)
        #expect(other.status == 0 && workspace.holds("small.bin", Array(body.prefix(1000))), "\(other.stderr)")
        let during = try await HaulProcess.run(["ls", "--json", "--state-dir", workspace.state], in: workspace)
        let rows = try JSONSerialization.jsonObject(with: Data(during.stdout.utf8)) as? [[String: Any]] ?? []
        let big = rows.first { ($0["destination"] as? String)?.hasSuffix("/big.bin") == true }
        #expect(big?["state"] as? String == "running", "\(during.stdout)")
        // The second waits for the first (its log says so with --verbose), and writes nothing of the download.
        let second = try HaulProcess(
            ["get", server.url("/big").absoluteString, "-o", "big.bin", "--verbose"], in: workspace)
        #expect(
            await waitUntil {
                String(decoding: FileManager.default.contents(atPath: second.errPath) ?? Data(), as: UTF8.self)
                    .contains("another process runs it; waiting for it to end there")
            })
        let listed = try await HaulProcess.run(["ls", "--json", "--state-dir", workspace.state], in: workspace)
        #expect(listed.status == 0 && listed.stdout.contains(#""state":""#), "\(listed.stdout)")
        #expect(!listed.stdout.contains(#""state":"failed""#), "\(listed.stdout)")
        // Nor queued again: the row stays as the process that runs it keeps it.
        let after = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]] ?? []
        let still = after.first { ($0["destination"] as? String)?.hasSuffix("/big.bin") == true }
        #expect(still?["state"] as? String == "running", "\(listed.stdout)")
        // Nor can it be removed from here: only the process that runs it can stop it, and the refusal says so.
        let id = try #require(big?["id"] as? String)
        let removed = try await HaulProcess.run(["rm", id, "--state-dir", workspace.state], in: workspace)
        #expect(removed.status == 1, "\(removed.stderr)")
        #expect(removed.stderr.contains("another process is running; stop that one first"), "\(removed.stderr)")
        // A daemon's command says where the running downloads are controlled, not to start a daemon that cannot start.
        let pause = try await HaulProcess.run(["pause", id, "--state-dir", workspace.state], in: workspace)
        #expect(pause.status == 1 && pause.stderr.contains("a haul get runs its downloads on it"), "\(pause.stderr)")
        server.release()
        let outcome = await first.finish()
        #expect(outcome.status == 0)
        // The second reports the first's file, fetched once.
        let waited = await second.finish()
        #expect(waited.status == 0, "\(waited.stderr)")
        #expect(waited.stderr.contains("big.bin is already complete"), "\(waited.stderr)")
        #expect(server.requests(to: "/big").count == 1)
        #expect(workspace.holds("big.bin", body))
        await server.stop()
    }

    @Test("a download a killed process left running, asked for while another command runs: it runs here, no hang")
    func staleRowWhileAnotherRuns() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        server.serve("/big", .init(body: body) { _, _ in .hold(afterBytes: 100_000) })
        server.serve("/stale", .init(body: body) { index, _ in index == 0 ? .hold(afterBytes: 100_000) : nil })
        // The first command runs on, holding the store's lock of commands that run downloads.
        let first = try HaulProcess(["get", server.url("/big").absoluteString, "-o", "big.bin"], in: workspace)
        #expect(await waitUntil { (workspace.size("big.bin.part") ?? 0) > 0 })
        // A second one is killed mid-download: its row stays running, and nobody queues it again while the first runs.
        let killed = try HaulProcess(["get", server.url("/stale").absoluteString, "-o", "stale.bin"], in: workspace)
        let reached = await killed.signal(SIGKILL) { (workspace.size("stale.bin.part") ?? 0) > 0 }
        #expect(reached)
        _ = await killed.finish()
        // haul ls tells the two apart by their part files' locks: the live one runs, the killed one waits.
        let listed = try await HaulProcess.run(["ls", "--json", "--state-dir", workspace.state], in: workspace)
        let rows = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]] ?? []
        func row(_ name: String) -> [String: Any]? {
            rows.first { ($0["destination"] as? String)?.hasSuffix("/\(name)") == true }
        }
        #expect(row("big.bin")?["state"] as? String == "running", "\(listed.stdout)")
        #expect(row("stale.bin")?["state"] as? String == "queued", "\(listed.stdout)")
        #expect(row("stale.bin")?["connections"] as? Int == 0, "\(listed.stdout)")
        let again = try HaulProcess(["get", server.url("/stale").absoluteString, "-o", "stale.bin"], in: workspace)
        let ended = await waitUntil(seconds: 60) { !again.process.isRunning }
        if !ended { again.signal(SIGKILL) }
        let outcome = await again.finish()
        #expect(ended && outcome.status == 0, "\(outcome.stderr)")
        #expect(workspace.holds("stale.bin", body))
        server.release()
        #expect(await first.finish().status == 0)
        #expect(workspace.holds("big.bin", body))
        await server.stop()
    }
}

extension CommandTests {
    @Test("a download a killed haul left: haul ls shows it waiting, and haul rm forgets it and deletes its part file")
    func killedThenRemoved() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        server.serve("/big", .init(body: body) { _, _ in .hold(afterBytes: 100_000) })
        let killed = try HaulProcess(["get", server.url("/big").absoluteString, "-o", "big.bin"], in: workspace)
        #expect(await killed.signal(SIGKILL) { (workspace.size("big.bin.part") ?? 0) > 0 })
        _ = await killed.finish()
        let state = ["--state-dir", workspace.state]
        let listed = try await HaulProcess.run(["ls"] + state, in: workspace)
        #expect(listed.stdout.contains(" queued "), "\(listed.stdout)")
        let id = String(listed.stdout.prefix(8))
        let removed = try await HaulProcess.run(["rm", id] + state, in: workspace)
        #expect(removed.status == 0 && removed.stdout.contains("forgot \(id) big.bin"), "\(removed.stderr)")
        #expect(workspace.size("big.bin.part") == nil)
        server.release()
        await server.stop()
    }
}

extension Array where Element == String {
    func prepended(_ first: String) -> [String] { [first] + self }
}

/// What a terminal shows after `output`: the lines it holds once carriage returns, line feeds, cursor-up
/// (`ESC [ n A`) and clear-to-end (`ESC [ J`) are applied, as haul's progress board uses them.
struct TerminalScreen {
    private(set) var lines: [String] = []

    init(_ output: String) {
        var rows: [[Character]] = [[]]
        var row = 0
        var column = 0
        var characters = Array(output)[...]
        while let character = characters.popFirst() {
            switch character {
            case "\r": column = 0
            case "\n", "\r\n":
                column = 0
                row += 1
                if row == rows.count { rows.append([]) }
            case "\u{1B}":
                guard characters.first == "[" else { continue }
                characters.removeFirst()
                var count = ""
                while let digit = characters.first, digit.isNumber { count.append(characters.removeFirst()) }
                switch characters.popFirst() {
                case "A": row = max(0, row - (Int(count) ?? 1))
                case "J":
                    rows[row].removeSubrange(min(column, rows[row].count)...)
                    rows.removeSubrange((row + 1)...)
                default: break
                }
            default:
                if column < rows[row].count {
                    rows[row][column] = character
                } else {
                    rows[row].append(character)
                }
                column += 1
            }
        }
        lines = rows.map { String($0) }
    }
}
