import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Hooks and webhooks: real programs run by the manager, and a real receiver that checks the signatures with the
/// Standard Webhooks reference library.
@Suite("Notices", .timeLimit(.minutes(2)), .teardowns)
struct NoticeTests {
    let body = testBytes(40_000)

    /// A fault server, a folder for files and one for what the hooks write, and a manager's configuration on a state
    /// folder of its own.
    struct Setup {
        let server: FaultServer
        let workspace: Workspace
        var logs: String { workspace.root + "/logs" }
        let clock = RecordingClock()

        static func make() async throws -> Setup {
            let setup = Setup(server: try await FaultServer.start(), workspace: try Workspace())
            try FileManager.default.createDirectory(atPath: setup.logs, withIntermediateDirectories: true)
            Teardowns.add {
                await setup.server.stop()
                setup.workspace.remove()
            }
            return setup
        }

        func configuration(_ notices: Notices) -> DownloadManager.Configuration {
            var configuration = DownloadManager.Configuration(stateDirectory: workspace.state)
            configuration.clock = clock
            configuration.startsStoredDownloads = false
            configuration.notices = notices
            return configuration
        }

        func request(_ path: String, to name: String) -> DownloadRequest {
            DownloadRequest(url: server.url(path), destination: .file(workspace.path(name)))
        }

        func lines(_ name: String) -> [String] {
            guard let data = FileManager.default.contents(atPath: logs + "/" + name) else { return [] }
            return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
        }
    }

    /// A hook that appends its environment's facts to `logs/name` and keeps its standard input as
    /// `logs/EVENT_ID.json`.
    static func loggingHook(_ logs: String, _ name: String) throws -> Hook {
        try Hook(arguments: [
            "sh", "-c",
            "printf '%s %s %s %s %s\\n' \"$HAUL_EVENT_ID\" \"$HAUL_EVENT\" \"$HAUL_ID\" \"$HAUL_STATE\" \"$HAUL_PATH\" "
                + ">> '\(logs)/\(name)'; cat > '\(logs)/'\"$HAUL_EVENT_ID\".json; echo said by the hook",
        ])
    }

    @Test("a hook runs once per end, with the notice's JSON on its input and the download in its environment")
    func hookRunsOncePerEnd() async throws {
        let setup = try await Setup.make()
        setup.server.serve("/a", .init(body: body))
        setup.server.serve("/b", .init(body: body))
        setup.server.serve("/gone", .init(body: body) { _, _ in .status(404, headers: [:]) })
        var notices = Notices()
        notices.onComplete = [try Self.loggingHook(setup.logs, "complete")]
        notices.onError = [try Self.loggingHook(setup.logs, "error")]
        let log = LogRecorder()
        var configuration = setup.configuration(notices)
        configuration.logger = log.logger()
        let manager = try DownloadManager(configuration: configuration)
        let ids = try await manager.add([
            setup.request("/a", to: "a.bin"), setup.request("/b", to: "b.bin"), setup.request("/gone", to: "gone.bin"),
        ]).map(\.id)
        _ = await manager.results(of: ids)
        await manager.shutdown()

        let completed = setup.lines("complete").map { $0.split(separator: " ").map(String.init) }
        #expect(completed.count == 2)
        #expect(Set(completed.map { $0[2] }) == Set(ids[0...1].map(\.rawValue)))
        #expect(completed.allSatisfy { $0[1] == "download.completed" && $0[3] == "completed" })
        #expect(Set(completed.map { $0[4] }) == [setup.workspace.path("a.bin"), setup.workspace.path("b.bin")])
        let failed = setup.lines("error").map { $0.split(separator: " ").map(String.init) }
        #expect(failed.count == 1)
        #expect(failed.first?[2] == ids[2].rawValue && failed.first?[3] == "failed")
        // The input: the notice's JSON, its id the hook's HAUL_EVENT_ID.
        for line in completed + failed {
            let data = try #require(FileManager.default.contents(atPath: "\(setup.logs)/\(line[0]).json"))
            let notice = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            #expect(notice["id"] as? String == line[0])
            #expect(notice["type"] as? String == line[1])
            let download = try #require(notice["data"] as? [String: Any])
            #expect(download["id"] as? String == line[2])
            #expect(download["state"] as? String == line[3])
        }
        #expect(log.lines.contains { $0.contains("said by the hook") })

        // Delivered everywhere: nothing is pending, and a new manager on the store runs no hook again.
        let again = try DownloadManager(configuration: setup.configuration(notices))
        try await again.start()
        await again.shutdown()
        #expect(setup.lines("complete").count == 2 && setup.lines("error").count == 1)
        let store = try DownloadStore(directory: setup.workspace.state)
        #expect(try store.allRecords().allSatisfy { $0.notice == nil })
    }

    @Test("a notice whose hook had not ended when its process stopped is delivered at the next start, same event id")
    func hookAcrossRestart() async throws {
        let setup = try await Setup.make()
        setup.server.serve("/a", .init(body: body))
        let fifo = setup.logs + "/release"
        #expect(mkfifo(fifo, 0o600) == 0)
        // The first process's hook says it started, then waits for the test: it is still running when the second
        // process opens the store, as it would be when the first was killed.
        var first = Notices()
        first.onComplete = [
            try Hook(arguments: [
                "sh", "-c", "echo \"$HAUL_EVENT_ID\" >> '\(setup.logs)/started'; read line < '\(fifo)'",
            ])
        ]
        let stopped = try DownloadManager(configuration: setup.configuration(first))
        let id = try await stopped.add([setup.request("/a", to: "a.bin")])[0].id
        _ = try await stopped.result(of: id)
        #expect(await waitUntil { setup.lines("started").count == 1 })

        var second = Notices()
        second.onComplete = [try Self.loggingHook(setup.logs, "complete")]
        let restarted = try DownloadManager(configuration: setup.configuration(second))
        try await restarted.start()
        #expect(await waitUntil { setup.lines("complete").count == 1 })
        let delivered = try #require(setup.lines("complete").first?.split(separator: " ").map(String.init))
        #expect(delivered[0] == setup.lines("started").first)
        #expect(delivered[2] == id.rawValue)
        await restarted.shutdown()

        // The first process's hook ends; the notice it was delivering is already heard.
        let writer = open(fifo, O_WRONLY)
        #expect(writer >= 0)
        close(writer)
        await stopped.shutdown()
        #expect(setup.lines("complete").count == 1 && setup.lines("started").count == 1)
        let store = try DownloadStore(directory: setup.workspace.state)
        #expect(try store.record(id: id.rawValue)?.notice == nil)
    }

    @Test("a hook that fails or hangs never fails the download; one that hangs is stopped at its timeout")
    func failingHooks() async throws {
        let setup = try await Setup.make()
        setup.server.serve("/a", .init(body: body))
        var notices = Notices()
        notices.onComplete = [
            try Hook(arguments: ["sh", "-c", "exit 3"]), try Hook(arguments: ["no-such-program-of-haul"]),
            try Hook(arguments: ["sh", "-c", "echo $$ > '\(setup.logs)/pid'; exec sleep 1000"]),
            try Self.loggingHook(setup.logs, "complete"),
        ]
        notices.hookTimeout = .milliseconds(200)
        let log = LogRecorder()
        var configuration = setup.configuration(notices)
        configuration.logger = log.logger()
        let manager = try DownloadManager(configuration: configuration)
        let id = try await manager.add([setup.request("/a", to: "a.bin")])[0].id
        let result = try await manager.result(of: id)
        #expect(result.bytes == Int64(body.count))
        #expect(await waitUntil { setup.lines("complete").count == 1 })
        await manager.shutdown()
        #expect(log.lines.contains { $0.contains("exited with 3") })
        #expect(log.lines.contains { $0.contains("'no-such-program-of-haul' is not found") })
        #expect(log.lines.contains { $0.contains("ran longer than") })
        let pid = try #require(setup.lines("pid").first.flatMap { Int32($0) })
        #expect(kill(pid, 0) != 0)
    }

    @Test("a webhook is signed as Standard Webhooks sign, retried with backoff under one id, and verifies")
    func webhookSignedAndRetried() async throws {
        let setup = try await Setup.make()
        setup.server.serve("/a", .init(body: body))
        let secret = "whsec_" + Data((0..<24).map { UInt8($0 * 7 + 1) }).base64EncodedString()
        let receiver = try await WebhookReceiver(
            secret: secret, log: setup.logs + "/webhook", failFirst: 2, workspace: setup.workspace)
        var notices = Notices()
        notices.webhooks = [try Webhook(url: "http://127.0.0.1:\(receiver.port)/hook", secret: secret)]
        notices.webhookBackoff = [.seconds(5), .seconds(30)]
        let manager = try DownloadManager(configuration: setup.configuration(notices))
        let id = try await manager.add([setup.request("/a", to: "a.bin")])[0].id
        _ = try await manager.result(of: id)
        #expect(await waitUntil { setup.lines("webhook").count == 3 })
        await manager.shutdown()

        let posts = try setup.lines("webhook").map {
            try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
        }
        #expect(posts.map { $0["status"] as? Int } == [500, 500, 204])
        #expect(posts.allSatisfy { $0["verified"] as? Bool == true })
        #expect(Set(posts.compactMap { $0["id"] as? String }).count == 1)
        #expect(posts.allSatisfy { $0["event"] as? String == $0["id"] as? String })
        #expect(
            posts.allSatisfy {
                $0["download"] as? String == id.rawValue && $0["type"] as? String == "download.completed"
            })
        #expect(posts.allSatisfy { $0["contentType"] as? String == "application/json" })
        // The backoff, on the injected clock.
        #expect(setup.clock.sleeps.filter { $0 >= .seconds(5) } == [.seconds(5), .seconds(30)])
        let store = try DownloadStore(directory: setup.workspace.state)
        #expect(try store.record(id: id.rawValue)?.notice == nil)
    }

    @Test("a webhook's secret and URL are checked, and a hook's command line splits as a shell's would, unexpanded")
    func badSettings() throws {
        #expect(throws: DownloadError.self) {
            try Webhook(url: "ftp://example.com/x", secret: "whsec_" + String(repeating: "A", count: 32))
        }
        #expect(throws: DownloadError.self) { try Webhook(url: "http://127.0.0.1/x", secret: "whsec_short") }
        #expect(
            try Hook(commandLine: #"notify-send "Haul done" 'it''s $HOME' a\ b"#).arguments == [
                "notify-send", "Haul done", "its $HOME", "a b",
            ])
        #expect(try Hook(commandLine: #"sh -c "echo \"$HAUL_ID\"""#).arguments == ["sh", "-c", #"echo "$HAUL_ID""#])
        #expect(throws: DownloadError.self) { try Hook(commandLine: "say 'unclosed") }
        #expect(throws: DownloadError.self) { try Hook(commandLine: "   ") }
    }
}

/// `Tests/support/webhook_receiver.py`, running until the test ends.
struct WebhookReceiver {
    let port: Int

    init(secret: String, log: String, failFirst: Int, workspace: Workspace) async throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("support/webhook_receiver.py").path
        let python = try #require(executable("python3"), "python3 is installed by .ci/run")
        let portFile = workspace.root + "/receiver-\(UUID().uuidString).port"
        _ = FileManager.default.createFile(atPath: portFile, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [script, "--secret", secret, "--log", log, "--fail-first", String(failFirst)]
        process.standardOutput = FileHandle(forWritingAtPath: portFile)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        Teardowns.add {
            kill(process.processIdentifier, SIGKILL)
            await onOwnThread { process.waitUntilExit() }
        }
        // The receiver writes its port once it listens; the file is read until then, on a thread of its own.
        let port = await onOwnThread { () -> Int? in
            let deadline = Date().addingTimeInterval(20)
            while Date() < deadline, process.isRunning {
                let text = String(decoding: FileManager.default.contents(atPath: portFile) ?? Data(), as: UTF8.self)
                if text.hasSuffix("\n") { return Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) }
                usleep(10_000)
            }
            return nil
        }
        self.port = try #require(port, "the webhook receiver did not start (is standardwebhooks installed?)")
    }
}
