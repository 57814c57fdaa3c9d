import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A real server process on a free loopback port, stopped at the end of the test.
final class ServerProcess: @unchecked Sendable {
    let process = Process()
    let port: Int

    /// Starts `executable`; with `output`, its standard output and error go to that file.
    init(executable: String, arguments: [String], port: Int, directory: String, output: String? = nil) throws {
        self.port = port
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        if let output, FileManager.default.createFile(atPath: output, contents: nil),
            let handle = FileHandle(forWritingAtPath: output)
        {
            process.standardOutput = handle
            process.standardError = handle
        } else {
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
        }
        try process.run()
    }

    /// Waits until the port accepts connections.
    func ready() async -> Bool {
        await waitUntil(seconds: 20) { [port] in
            let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(socket) }
            return withLoopbackAddress(port: port) { connect(socket, $0, $1) } == 0
        }
    }

    /// SIGKILL: a server started from the test runner inherits its blocked signals and may ignore SIGTERM.
    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    var isRunning: Bool { process.isRunning }
}

/// Haul against real servers: nginx (ETag, 206) and python3 -m http.server (no ranges). Both are installed by
/// `.ci/run`; a missing server fails these tests rather than skipping them.
@Suite("Interop with real servers", .timeLimit(.minutes(2)))
struct InteropTests {
    let body = testBytes(8_000_000, seed: 5)

    func manager(_ workspace: Workspace) throws -> DownloadManager {
        var configuration = DownloadManager.Configuration(stateDirectory: workspace.state)
        configuration.startsStoredDownloads = false
        return try DownloadManager(configuration: configuration)
    }

    /// Starts a download held at 2 MB/s by its own rate limit, so it is still running however fast the server is,
    /// pauses it after its first progress, lifts the limit, resumes it, and returns its result.
    func pauseAndResume(_ manager: DownloadManager, url: URL, to path: String) async throws -> (
        DownloadResult, DownloadManager.Snapshot
    ) {
        let id = try await manager.add([DownloadRequest(url: url, destination: .file(path), rateLimit: 2_000_000)])[0]
            .id
        for await event in manager.events(for: id) {
            if case .progress(let progress) = event, progress.receivedBytes > 0 { break }
        }
        let running = try await manager.snapshot(id)
        try #require(running.state == .running, "before the pause: \(running.state) \(running.error?.message ?? "")")
        try await manager.pause(id)
        let paused = try await manager.snapshot(id)
        try await manager.setRateLimit(nil, for: id)
        try await manager.resume(id)
        return (try await manager.result(of: id), paused)
    }

    /// Writes an nginx configuration serving `root` on `port` (at `rate` per connection) and starts nginx.
    func startNginx(_ workspace: Workspace, root: String, port: Int, rate: String, log: String) throws -> ServerProcess
    {
        let http = """
            log_format ranges '$status "$http_range" "$http_if_range" $body_bytes_sent $sent_http_etag';
            access_log \(log) ranges;
            server {
                listen 127.0.0.1:\(port);
                root \(root);
                limit_rate \(rate);
            }
            """
        return try runNginx(in: workspace, port: port, http: http)
    }

    /// Writes `bytes` (the suite's body unless given) as `www/file.bin` and returns the `www` folder.
    func serveBody(_ workspace: Workspace, _ bytes: [UInt8]? = nil) throws -> String {
        let root = workspace.root + "/www"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: root + "/file.bin", contents: Data(bytes ?? body))
        return root
    }

    @Test("nginx: a paused download resumes with If-Range and nginx's ETag, and nginx answers 206")
    func nginx() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let root = try serveBody(workspace)
        let port = freePort()
        let log = workspace.root + "/access.log"
        let server = try startNginx(workspace, root: root, port: port, rate: "4m", log: log)
        defer { server.stop() }
        #expect(await server.ready())
        let manager = try manager(workspace)
        let url = URL(string: "http://127.0.0.1:\(port)/file.bin")!
        let (result, paused) = try await pauseAndResume(manager, url: url, to: workspace.path("file.bin"))
        await manager.shutdown()
        #expect(workspace.holds("file.bin", body))
        #expect(paused.isResumable == true)
        #expect(result.resumedFrom == paused.receivedBytes)
        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(lines.count == 2)
        let etag = lines.first?.split(separator: " ").last.map(String.init) ?? "?"
        #expect(lines.last?.hasPrefix("206 \"bytes=\(paused.receivedBytes)-\" \"\(etag)\"") == true, "\(lines)")
    }

    @Test("nginx with limit_rate per connection: several ranged connections with nginx's ETag, paused and resumed")
    func nginxSeveralConnections() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let big = testBytes(16 << 20, seed: 7)
        let root = try serveBody(workspace, big)
        let port = freePort()
        let log = workspace.root + "/access.log"
        let server = try startNginx(workspace, root: root, port: port, rate: "2m", log: log)
        defer { server.stop() }
        #expect(await server.ready())
        let manager = try manager(workspace)
        var options = DownloadOptions()
        options.minimumSplitSize = 1 << 20
        let id = try await manager.add(
            URL(string: "http://127.0.0.1:\(port)/file.bin")!, to: .file(workspace.path("file.bin")), options: options)
        var most = 0
        var finishedEarly = false
        events: for await event in manager.events(for: id) {
            switch event {
            case .progress(let progress):
                most = max(most, progress.connections)
                if progress.connections >= 2 && progress.receivedBytes > 4 << 20 { break events }
            case .changed(let download) where download.state == .completed || download.state == .failed:
                finishedEarly = true
                break events
            default:
                break
            }
        }
        #expect(!finishedEarly, "never reached two connections and 4 MiB before the end")
        try await manager.pause(id)
        try await manager.resume(id)
        _ = try await manager.result(of: id)
        await manager.shutdown()
        #expect(workspace.holds("file.bin", big))
        #expect(most >= 2)
        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map(String.init)
        // nginx logs a request when it ends, so the probe (cut where the first split put its segment's end) need not
        // come first. It is the only 200; every other answer is a 206 for If-Range with nginx's own ETag.
        let etag = lines.first?.split(separator: " ").last.map(String.init) ?? "?"
        #expect(lines.filter { $0.hasPrefix("200 \"-\"") }.count == 1, "\(lines)")
        let ranged = lines.filter { $0.hasPrefix("206 \"bytes=") && $0.contains("\" \"\(etag)\" ") }
        #expect(ranged.count >= 3 && ranged.count == lines.count - 1, "\(lines)")
        // How fast several connections are is bench/run.sh's business; `most` shows they ran at once.
    }

    @Test(
        "the network goes away (nginx killed mid-download) and comes back on the same port: the download waits, then resumes"
    )
    func networkComesBack() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let root = try serveBody(workspace)
        let port = freePort()
        let log = workspace.root + "/access.log"
        // Slow enough that most of the file is still on the server when it is killed, however late on a loaded
        // machine the progress event that kills it arrives (nginx lets each answer's first second through at once).
        var server = try startNginx(workspace, root: root, port: port, rate: "512k", log: log)
        #expect(await server.ready())
        var configuration = DownloadManager.Configuration(stateDirectory: workspace.state)
        configuration.startsStoredDownloads = false
        configuration.engine.retryPolicy = RetryPolicy(
            initialDelay: .milliseconds(50), maximumDelay: .milliseconds(400))
        let manager = try DownloadManager(configuration: configuration)
        let events = manager.events()
        let id = try await manager.add(
            URL(string: "http://127.0.0.1:\(port)/file.bin")!, to: .file(workspace.path("file.bin")))
        var sawWaiting = false
        for await event in events {
            if case .progress(let progress) = event, progress.receivedBytes > 1_000_000, !sawWaiting, server.isRunning {
                server.stop()
            }
            if event.state == .waitingForNetwork {
                sawWaiting = true
                #expect(try await manager.snapshot(id).state == .waitingForNetwork)
                server = try startNginx(workspace, root: root, port: port, rate: "512k", log: log)
                #expect(await server.ready())
            }
            if event.state == .completed { break }
            if case .changed(let download) = event, download.state == .failed {
                Issue.record("the download failed: \(download.error?.message ?? "?")")
                break
            }
        }
        _ = try await manager.result(of: id)
        await manager.shutdown()
        server.stop()
        #expect(sawWaiting)
        #expect(workspace.holds("file.bin", body))
        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
        #expect(lines.last?.hasPrefix("206") == true, "resumed with a range after the network came back: \(lines)")
    }

    @Test("python3 -m http.server (no ranges): a paused download restarts from 0 and still ends identical")
    func pythonHTTPServer() async throws {
        let python = try #require(executable("python3"), "python3 must be installed")
        let workspace = try Workspace()
        defer { workspace.remove() }
        let root = workspace.root + "/www"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let big = testBytes(64_000_000, seed: 6)
        _ = FileManager.default.createFile(atPath: root + "/file.bin", contents: Data(big))
        let port = freePort()
        let server = try ServerProcess(
            executable: python,
            arguments: ["-m", "http.server", "\(port)", "--bind", "127.0.0.1", "--directory", root],
            port: port, directory: root)
        defer { server.stop() }
        #expect(await server.ready())
        let manager = try manager(workspace)
        let url = URL(string: "http://127.0.0.1:\(port)/file.bin")!
        let (result, paused) = try await pauseAndResume(manager, url: url, to: workspace.path("file.bin"))
        await manager.shutdown()
        #expect(paused.isResumable == false, "python's server announces no ranges")
        #expect(result.resumedFrom == 0)
        #expect(workspace.holds("file.bin", big))
    }
}
