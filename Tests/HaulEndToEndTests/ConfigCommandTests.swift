import Foundation
import HaulTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The config file, and the hooks of `haul get` and `haul serve`, through the `haul` binary.
@Suite("Config file and hooks, end to end", .serialized, .timeLimit(.minutes(3)))
struct ConfigCommandTests {
    let body = testBytes(300_000, seed: 5)

    /// A hook (as a config file or flag writes it) appending the event id, the download id and the state to `log`.
    static func hook(_ log: String) -> String {
        #"sh -c 'echo "$HAUL_EVENT_ID $HAUL_ID $HAUL_STATE${HAUL_TOKEN:+ token}${PGPASSWORD:+ password}" >> \#(log)'"#
    }

    static func lines(_ path: String) -> [[String]] {
        let text = String(decoding: FileManager.default.contents(atPath: path) ?? Data(), as: UTF8.self)
        return text.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
    }

    static func write(_ text: String, to path: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    @Test("haul get --on-complete and --on-error run their hooks once per download, here, without a daemon")
    func getRunsHooks() async throws {
        let (workspace, server) = try await DaemonTests.setUp()
        defer { DaemonTests.tearDown(workspace, server) }
        server.serve("/a.bin", .init(body: body))
        server.serve("/gone.bin", .init(body: body) { _, _ in .status(404, headers: [:]) })
        let log = workspace.root + "/hooks.log"
        let run = try await HaulProcess.run(
            [
                "get", server.url("/a.bin").absoluteString, server.url("/gone.bin").absoluteString, "-q",
                "--on-complete", Self.hook(log), "--on-error", Self.hook(log),
                "--config", workspace.root + "/none.toml",
            ], in: workspace)
        // The config file named must exist.
        #expect(run.status == 2 && run.stderr.contains("none.toml cannot be read"), "\(run.stderr)")
        let ran = try await HaulProcess.run(
            [
                "get", server.url("/a.bin").absoluteString, server.url("/gone.bin").absoluteString, "-q",
                "--on-complete", Self.hook(log), "--on-error", Self.hook(log),
            ], in: workspace,
            environment: ["XDG_CONFIG_HOME": workspace.root, "HAUL_TOKEN": "secret", "PGPASSWORD": "secret"])
        #expect(ran.status == 1, "\(ran.stderr)")
        let lines = Self.lines(log)
        #expect(lines.count == 2, "\(lines)")
        // The state is the last word: neither the token nor the store's password reached the hooks.
        #expect(Set(lines.map { $0.last ?? "" }) == ["completed", "failed"])
        #expect(workspace.holds("a.bin", body))
    }

    @Test("a config file's unknown key, bad value or bad syntax is refused at start with its file and line")
    func badConfig() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let config = workspace.root + "/config.toml"
        let cases: [(text: String, says: String)] = [
            ("jobs = 4\n\nbogus = 1\n", "config.toml:3: bogus: not a setting of Haul"),
            ("# the daemon\nlisten = \"127.0.0.1:0\"\njobs = 0\n", "config.toml:3: jobs:"),
            (
                "jobs = 2\nlimit-rate = \"fast\"\n",
                "config.toml:2: limit-rate: --limit-rate 'fast' is not a rate"
            ),
            ("jobs = 2\n[webhooks]\nurl = \"x\"\n", "config.toml:2: webhooks: not a setting of Haul"),
            ("jobs = [1, 2]\n", "config.toml:1: jobs: takes one value, not a list"),
            ("jobs = 2.5\n", "config.toml:1: jobs: '2.5' is not a whole number"),
            (
                "jobs = 2\non-complete = \"say 'unclosed\"\n",
                "config.toml:2: on-complete: the hook 'say 'unclosed' has an unclosed '"
            ),
            ("webhook = \"https://example.com/h\"\n", "config.toml:1: webhook: --webhook needs --webhook-secret-file"),
            ("jobs = 2\nlisten = \n", "config.toml:2:"),
        ]
        for (text, says) in cases {
            try Self.write(text, to: config)
            let run = try await HaulProcess.run(
                ["serve", "--config", config, "--state-dir", workspace.state], in: workspace)
            #expect(run.status == 2, "\(text): \(run.stderr)")
            #expect(run.stderr.contains(says), "\(text): \(run.stderr)")
        }
        // haul get reads the same file (the default one here) and refuses it the same way.
        try FileManager.default.createDirectory(atPath: workspace.root + "/haul", withIntermediateDirectories: true)
        try Self.write("jobs = 2\nbogus = 1\n", to: workspace.root + "/haul/config.toml")
        let get = try await HaulProcess.run(
            ["get", "http://127.0.0.1:1/x"], in: workspace, environment: ["XDG_CONFIG_HOME": workspace.root])
        #expect(get.status == 2 && get.stderr.contains("config.toml:2: bogus: not a setting"), "\(get.stderr)")
    }

    @Test("haul serve takes hooks from its config file, a flag overrides a key, and SIGHUP reads the file again")
    func serveConfigAndReload() async throws {
        let (workspace, server) = try await DaemonTests.setUp()
        defer { DaemonTests.tearDown(workspace, server) }
        server.serve("/a.bin", .init(body: body))
        server.serve("/b.bin", .init(body: body))
        let config = workspace.root + "/config.toml"
        let (first, second) = (workspace.root + "/first.log", workspace.root + "/second.log")
        try Self.write(
            "jobs = 2\nconnections = 3\non-complete = ['''\(Self.hook(first))''']\nschedule = [\"00:00-24:00 rate=1G\"]\n",
            to: config)
        let daemon = try await DaemonProcess(workspace, extra: ["--config", config, "-x", "5"])
        let settings = try await daemon.call(.GET, "/api/v1/settings").body as? [String: Any]
        #expect(settings?["maxConcurrentDownloads"] as? Int == 2, "\(settings ?? [:])")
        #expect(settings?["connections"] as? Int == 5, "the flag wins: \(settings ?? [:])")
        #expect(settings?["scheduleInForce"] as? String == "00:00-24:00 rate=1G", "\(settings ?? [:])")
        let a = try await daemon.add(server.url("/a.bin"))
        #expect(try await daemon.waitUntilStopped(a)["state"] as? String == "completed")
        #expect(await waitUntil { Self.lines(first).count == 1 })
        #expect(Self.lines(first).first?[1] == a)

        try Self.write("jobs = 7\non-complete = '''\(Self.hook(second))'''\n", to: config)
        daemon.haul.signal(SIGHUP)
        // The stream's snapshot holds the settings, and a settings event tells their change: whether the stream
        // opens before the file is read again or after, the new value arrives.
        let events = try await readEvents(from: daemon, after: nil) { events in
            events.contains { $0.maxConcurrentDownloads == 7 }
        }
        #expect(events.contains { $0.maxConcurrentDownloads == 7 }, "SIGHUP read jobs = 7")
        let reread = try await daemon.call(.GET, "/api/v1/settings").body as? [String: Any]
        #expect(reread?["maxConcurrentDownloads"] as? Int == 7, "\(reread ?? [:])")
        let b = try await daemon.add(server.url("/b.bin"))
        #expect(try await daemon.waitUntilStopped(b)["state"] as? String == "completed")
        #expect(await waitUntil { Self.lines(second).count == 1 })
        #expect(Self.lines(second).first?[1] == b)
        #expect(Self.lines(first).count == 1)

        // haul get hands its downloads to the daemon, and never its hooks.
        let handed = try await HaulProcess.run(
            ["get", server.url("/b.bin").absoluteString, "--on-complete", "true"], in: workspace)
        #expect(handed.status == 2 && handed.stderr.contains("never given to it over its API"), "\(handed.stderr)")

        // Whether the daemon's log comes to hold `text` (within waitUntil's time).
        let logs = { (text: String) async -> Bool in
            await waitUntil {
                String(decoding: FileManager.default.contents(atPath: daemon.haul.errPath) ?? Data(), as: UTF8.self)
                    .contains(text)
            }
        }
        // A file that no longer reads is logged, and the daemon goes on as it was.
        try Self.write("jobs = \n", to: config)
        daemon.haul.signal(SIGHUP)
        #expect(await logs("SIGHUP: the config file is not applied: \(config):1:"))
        #expect(
            (try await daemon.call(.GET, "/api/v1/settings").body as? [String: Any])?["maxConcurrentDownloads"] as? Int
                == 7)

        // Keys a running daemon cannot change are named, as applying at the next start.
        try Self.write("jobs = 7\nallow-host = [\"nas.local\"]\nlog-level = \"info\"\n", to: config)
        daemon.haul.signal(SIGHUP)
        #expect(
            await logs(
                "SIGHUP: the config file changes allow-host, log-level, which apply when haul serve starts again"))
        let stopped = await daemon.stop(SIGTERM)
        #expect(stopped.status == 0, "\(stopped.stderr)")
    }

    @Test("a daemon killed after a download completed but before its hook ended runs the hook again at its restart")
    func hookAcrossDaemonRestart() async throws {
        let (workspace, server) = try await DaemonTests.setUp()
        defer { DaemonTests.tearDown(workspace, server) }
        server.serve("/a.bin", .init(body: body))
        let config = workspace.root + "/config.toml"
        let (started, log, fifo) = (workspace.root + "/started", workspace.root + "/hooks.log", workspace.root + "/go")
        #expect(mkfifo(fifo, 0o600) == 0)
        // The hook says it started, then waits: the daemon is killed while it runs.
        try Self.write(
            #"on-complete = "sh -c 'echo $HAUL_EVENT_ID >> \#(started); read line < \#(fifo)'""# + "\n", to: config)
        let daemon = try await DaemonProcess(workspace, extra: ["--config", config])
        let id = try await daemon.add(server.url("/a.bin"))
        #expect(await waitUntil { Self.lines(started).count == 1 })
        _ = await daemon.stop(SIGKILL)
        // Let the first hook end (it outlived its daemon).
        #expect(
            await waitUntil {
                let writer = open(fifo, O_WRONLY | O_NONBLOCK)
                if writer >= 0 { close(writer) }
                return writer >= 0
            })

        try Self.write("on-complete = '''\(Self.hook(log))'''\n", to: config)
        let restarted = try await DaemonProcess(workspace, extra: ["--config", config])
        #expect(await waitUntil { Self.lines(log).count == 1 })
        let line = try #require(Self.lines(log).first)
        #expect(line == [Self.lines(started)[0][0], id, "completed"])
        // Heard: another restart runs it no more.
        _ = await restarted.stop(SIGTERM)
        let third = try await DaemonProcess(workspace, extra: ["--config", config])
        #expect(try await third.download(id)["state"] as? String == "completed")
        _ = await third.stop(SIGTERM)
        #expect(Self.lines(log).count == 1)
    }
}
