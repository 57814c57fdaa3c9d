import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

/// `haul` with an expired link: the failure says to give a new one, and `haul retry ID --url NEW` (with or without a
/// daemon) or `haul get NEW -o SAME-PATH` goes on from the bytes held.
@Suite("Expired links on the command line")
struct LinkCommandTests {
    let body = testBytes(2_500_000, seed: 39)

    /// The fault server with a signed link at `/old` that expires after 1,000,000 bytes and a fresh one at `/new`.
    static func serve(_ body: [UInt8]) async throws -> FaultServer {
        let server = try await FaultServer.start()
        server.serve("/old", .signed(body, deadline: 1_000_000))
        var fresh = FaultServer.Resource(body: body)
        fresh.etag = "\"v1\""
        server.serve("/new", fresh)
        return server
    }

    @Test("without a daemon: the failure says the link expired; haul retry ID --url NEW finishes it, no byte twice")
    func standalone() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await Self.serve(body)
        defer { Task { await server.stop() } }
        let get = try await HaulProcess.run(
            ["get", server.url("/old").absoluteString, "-o", "file.bin", "-x", "1"], in: workspace)
        #expect(get.status == 1)
        #expect(get.stderr.contains("the link expired: give a new one"), "\(get.stderr)")
        let state = ["--state-dir", workspace.state]
        let listed = try await HaulProcess.run(["ls"] + state, in: workspace)
        #expect(listed.stdout.contains("the link expired: give a new one"), "\(listed.stdout)")
        let id = try #require(try DownloadStore(directory: workspace.state).allRecords().first?.id)
        let bad = try await HaulProcess.run(
            ["retry", String(id.suffix(8)), "--url", "gopher://h/x"] + state, in: workspace)
        #expect(bad.status == 64 || bad.status == 2, "\(bad.stderr)")
        let retry = try await HaulProcess.run(
            ["retry", String(id.suffix(8)), "--url", server.url("/new").absoluteString] + state, in: workspace)
        #expect(retry.status == 0, "\(retry.stderr)")
        // Its lines are haul's, not the engine's notices in swift-log's format ("… notice haul: [Haul] …").
        #expect(!retry.stderr.contains("notice"), "\(retry.stderr)")
        let same = workspace.holds("file.bin", body)
        #expect(same)
        #expect(server.bodyBytesSent(for: "/old") + server.bodyBytesSent(for: "/new") == body.count)
    }

    /// With `--quiet --json`, the one line printed is the result of the download that failed and then finished.
    @Test(
        "haul get --refresh-command: the command's URL replaces the expired link, and haul get finishes",
        arguments: [false, true])
    func refresh(quietJSON: Bool) async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await Self.serve(body)
        defer { Task { await server.stop() } }
        let command = "sh -c 'echo \(server.url("/new").absoluteString)'"
        let get = try await HaulProcess.run(
            ["get", server.url("/old").absoluteString, "-o", "file.bin", "-x", "1", "--refresh-command", command]
                + (quietJSON ? ["--quiet", "--json"] : []),
            in: workspace)
        #expect(get.status == 0, "\(get.stderr)")
        // The expiry the command cured is not shown as a failure.
        #expect(!get.stderr.contains("error"), "\(get.stderr)")
        let same = workspace.holds("file.bin", body)
        #expect(same)
        #expect(server.bodyBytesSent(for: "/old") + server.bodyBytesSent(for: "/new") == body.count)
        if quietJSON {
            let result = try JSONSerialization.jsonObject(with: Data(get.stdout.utf8)) as? [String: Any]
            #expect(result?["path"] as? String == workspace.path("file.bin"), "\(get.stdout)")
            #expect(result?["bytes"] as? Int == body.count)
        }
    }

    @Test("haul get NEW -o the same path is the same download: it goes on from the bytes held")
    func getAgain() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await Self.serve(body)
        defer { Task { await server.stop() } }
        let first = try await HaulProcess.run(
            ["get", server.url("/old").absoluteString, "-o", "file.bin", "-x", "1"], in: workspace)
        #expect(first.status == 1)
        let again = try await HaulProcess.run(
            ["get", server.url("/new").absoluteString, "-o", "file.bin"], in: workspace)
        #expect(again.status == 0, "\(again.stderr)")
        let same = workspace.holds("file.bin", body)
        #expect(same)
        #expect(server.bodyBytesSent(for: "/new") == body.count - 1_000_000)
        #expect(try DownloadStore(directory: workspace.state).allRecords().count == 1)
    }

    @Test("through a daemon: haul retry ID --url NEW replaces the link there")
    func throughDaemon() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await Self.serve(body)
        defer { Task { await server.stop() } }
        let daemon = try await DaemonProcess(workspace)
        let state = ["--state-dir", workspace.state]
        let add = try await HaulProcess.run(
            ["add", server.url("/old").absoluteString, "-x", "1"] + state, in: workspace)
        let id = add.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let failed = try await HaulProcess.run(["watch", "--until-done", "--quiet", id] + state, in: workspace)
        #expect(failed.status == 1 && failed.stderr.contains("the link expired"), "\(failed.stderr)")
        let retry = try await HaulProcess.run(
            ["retry", id, "--url", server.url("/new").absoluteString] + state, in: workspace)
        #expect(retry.status == 0 && retry.stdout.contains("new link for"), "\(retry.stderr)")
        let done = try await HaulProcess.run(["watch", "--until-done", "--quiet", id] + state, in: workspace)
        #expect(done.status == 0, "\(done.stderr)")
        let same = workspace.holds("old", body)
        #expect(same)
        #expect(server.bodyBytesSent(for: "/old") + server.bodyBytesSent(for: "/new") == body.count)
        _ = await daemon.stop(SIGTERM)
    }
}
