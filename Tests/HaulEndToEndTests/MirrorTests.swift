import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

/// One file from several nginx servers (one nginx process, a port and an access log each), each capped at 2 MB/s a
/// connection as public mirrors often are.
@Suite("Mirrors: one file from several nginx servers", .timeLimit(.minutes(2)))
struct MirrorTests {
    /// A server of the test: its port, the folder it serves and its access log.
    struct Server {
        let port: Int
        let root: String
        let log: String

        var url: String { "http://127.0.0.1:\(port)/file.bin" }

        /// The bytes of the file it sent, by the ranges its log shows: `(range asked, bytes sent)`.
        func requests() throws -> [(range: String, bytes: Int64)] {
            try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map { line in
                let fields = line.split(separator: " ")
                return (String(fields[1]), Int64(fields[2]) ?? 0)
            }
        }

        func bytesSent() throws -> Int64 { try requests().reduce(0) { $0 + $1.bytes } }
    }

    /// Starts one nginx with a server for each of `files`, serving it as `file.bin` at `rate` a connection.
    static func serve(_ files: [[UInt8]], in workspace: Workspace, rate: String = "2m", http: String = "") async throws
        -> (ServerProcess, [Server])
    {
        var servers: [Server] = []
        var blocks = http + "\nlog_format sent '$status \"$http_range\" $body_bytes_sent';\n"
        for (index, bytes) in files.enumerated() {
            let root = workspace.root + "/www\(index)"
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
            _ = FileManager.default.createFile(atPath: root + "/file.bin", contents: Data(bytes))
            let server = Server(port: freePort(), root: root, log: workspace.root + "/access\(index).log")
            servers.append(server)
            blocks += """
                server {
                    listen 127.0.0.1:\(server.port);
                    root \(root);
                    limit_rate \(rate);
                    access_log \(server.log) sent;
                }

                """
        }
        let nginx = try runNginx(in: workspace, port: servers[0].port, http: blocks)
        #expect(await nginx.ready())
        return (nginx, servers)
    }

    func manager(_ workspace: Workspace) throws -> DownloadManager {
        var configuration = DownloadManager.Configuration(stateDirectory: workspace.state)
        configuration.startsStoredDownloads = false
        return try DownloadManager(configuration: configuration)
    }

    @Test("three mirrors: each serves a share of the file, the file is identical, and each server's state is shown")
    func threeMirrors() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let body = testBytes(24 << 20, seed: 11)
        let (nginx, servers) = try await Self.serve([body, body, body], in: workspace)
        defer { nginx.stop() }
        let manager = try manager(workspace)
        var options = DownloadOptions(maxConnectionsPerDownload: 2, minimumSplitSize: 1 << 20)
        options.mirrors = [servers[1].url, servers[2].url]
        let id = try await manager.add(
            URL(string: servers[0].url)!, to: .file(workspace.path("file.bin")), options: options)
        var seen: [MirrorStatus] = []
        for await event in manager.events(for: id) {
            if case .progress(let progress) = event, let mirrors = progress.mirrors,
                mirrors.allSatisfy({ $0.state == .active && $0.connections > 0 })
            {
                seen = mirrors
                break
            }
        }
        let snapshot = try await manager.snapshot(id)
        _ = try await manager.result(of: id)
        await manager.shutdown()
        #expect(workspace.holds("file.bin", body))
        #expect(seen.count == 3, "every server active with a connection at one moment")
        #expect(snapshot.mirrors?.count == 3)
        // Each served a real share, more than the 64 KiB sample. (What nginx sent on connections whose segment's end
        // moved, beyond what was read, is bench/mirrors.sh's figure.)
        let sent: [Int64] = try servers.map { try $0.bytesSent() }
        let share: Int64 = 1 << 20
        #expect(sent.allSatisfy { $0 > share }, "\(sent)")
    }

    @Test(
        "mirrors that disagree: one of another size and one of other bytes are dropped, saying why; their bytes are never written"
    )
    func badMirrors() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let body = testBytes(16 << 20, seed: 12)
        let shorter = Array(body.prefix(15 << 20))
        var other = body
        for index in stride(from: other.count - 4096, to: other.count, by: 1) { other[index] ^= 0x5A }
        let (nginx, servers) = try await Self.serve([body, shorter, other, body], in: workspace)
        defer { nginx.stop() }
        // Through the command line: --mirror, three times.
        let run = try await HaulProcess.run(
            [
                "get", servers[0].url, "--mirror", servers[1].url, "--mirror", servers[2].url, "--mirror",
                servers[3].url, "-x", "2", "--min-split-size", "1M", "-o", workspace.path("file.bin"), "-v",
            ], in: workspace)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(workspace.holds("file.bin", body))
        #expect(
            run.stderr.contains("not using \(servers[1].url) any more: its file is 15728640 bytes"), "\(run.stderr)")
        #expect(
            run.stderr.contains("not using \(servers[2].url) any more: its last 65536 bytes differ"), "\(run.stderr)")
        // The dropped ones were asked for the sample range only; the good mirror served a share.
        let sample = "\"bytes=\(body.count - 65536)-\(body.count - 1)\""
        for server in servers[1...2] {
            let ranges: [String] = try server.requests().map(\.range)
            #expect(ranges.allSatisfy { $0 == sample }, "\(ranges)")
        }
        #expect(try servers[3].bytesSent() > 1 << 20)
    }
}
