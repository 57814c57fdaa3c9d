import Crypto
import Foundation
import HaulTesting
import Testing

/// `haul get --checksum auto` and `--checksum-url` against the fault server publishing checksum files beside a file.
@Suite("Checksum files on the command line")
struct SidecarCommandTests {
    let body = testBytes(600_000, seed: 40)

    var digest: String { SHA256.hash(data: body).map { String(format: "%02x", $0) }.joined() }

    func run(_ server: FaultServer, _ arguments: [String], in workspace: Workspace) async throws
        -> (status: Int32, stdout: String, stderr: String)
    {
        try await HaulProcess.run(
            ["get", server.url("/pub/file.iso").absoluteString, "-o", "file.iso"] + arguments, in: workspace)
    }

    @Test("a good sidecar verifies and says which; a wrong one fails and the name never holds the file")
    func sidecar() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        defer { Task { await server.stop() } }
        server.serve("/pub/file.iso", .init(body: body))
        server.serve("/pub/file.iso.sha256", .init(body: Array("\(digest)  file.iso\n".utf8)))
        let good = try await run(server, ["--checksum", "auto"], in: workspace)
        #expect(good.status == 0, "\(good.stderr)")
        #expect(good.stderr.contains("verifying with the sha256 of \(server.url("/pub/file.iso.sha256"))"))
        let same = workspace.holds("file.iso", body)
        #expect(same)
        // The next candidates were not asked once one had the checksum.
        #expect(server.requests(to: "/pub/SHA256SUMS").isEmpty)

        try FileManager.default.removeItem(atPath: workspace.path("file.iso"))
        _ = try? FileManager.default.removeItem(atPath: workspace.state)
        let wrong = String(repeating: "0", count: 64)
        server.serve("/pub/file.iso.sha256", .init(body: Array("\(wrong)  file.iso\n".utf8)))
        let bad = try await run(server, ["--checksum", "auto"], in: workspace)
        #expect(bad.status == 1 && bad.stderr.contains("checksum mismatch"), "\(bad.stderr)")
        #expect(!FileManager.default.fileExists(atPath: workspace.path("file.iso")))
    }

    @Test(
        "a folder's SHA256SUMS names the file; --checksum-url names the list, and one that fails fails; auto finding none says so and succeeds"
    )
    func lists() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        defer { Task { await server.stop() } }
        server.serve("/pub/file.iso", .init(body: body))
        let list = "\(String(repeating: "1", count: 64))  other.iso\n\(digest) *file.iso\n"
        server.serve("/pub/SHA256SUMS", .init(body: Array(list.utf8)))
        let listed = try await run(server, ["--checksum", "auto"], in: workspace)
        #expect(listed.status == 0 && listed.stderr.contains("SHA256SUMS"), "\(listed.stderr)")
        // Each own sidecar was tried first, and answered 404.
        #expect(server.requests(to: "/pub/file.iso.sha256").count == 1)

        try FileManager.default.removeItem(atPath: workspace.path("file.iso"))
        _ = try? FileManager.default.removeItem(atPath: workspace.state)
        server.serve("/sums/release.txt", .init(body: Array("SHA256 (file.iso) = \(digest)\n".utf8)))
        let named = try await run(
            server, ["--checksum-url", server.url("/sums/release.txt").absoluteString], in: workspace)
        #expect(named.status == 0 && named.stderr.contains("/sums/release.txt"), "\(named.stderr)")
        // A list the user named is asked for on purpose: one that has no line for the file, or cannot be read,
        // fails before the file is fetched, rather than leave it unverified.
        try FileManager.default.removeItem(atPath: workspace.path("file.iso"))
        _ = try? FileManager.default.removeItem(atPath: workspace.state)
        let fetched = server.requests(to: "/pub/file.iso").count
        let others = "SHA256 (other.iso) = \(digest)\nSHA256 (third.iso) = \(digest)\n"
        server.serve("/sums/other.txt", .init(body: Array(others.utf8)))
        for (list, problem) in [
            ("/sums/other.txt", "has no checksum for file.iso"), ("/sums/missing.txt", "cannot be read (HTTP 404)"),
        ] {
            let failed = try await run(server, ["--checksum-url", server.url(list).absoluteString], in: workspace)
            #expect(failed.status == 1 && failed.stderr.contains(problem), "\(failed.stderr)")
        }
        #expect(server.requests(to: "/pub/file.iso").count == fetched, "the file itself was not requested")
        #expect(!FileManager.default.fileExists(atPath: workspace.path("file.iso")))

        _ = try? FileManager.default.removeItem(atPath: workspace.state)
        server.serve("/pub/SHA256SUMS", .init(body: Array("nothing here\n".utf8)))
        let none = try await run(server, ["--checksum", "auto"], in: workspace)
        #expect(none.status == 0 && none.stderr.contains("no checksum found"), "\(none.stderr)")
        let both = try await run(
            server, ["--checksum", "auto", "--checksum-url", server.url("/x").absoluteString], in: workspace)
        #expect(both.status == 64 || both.status == 2, "\(both.stderr)")
    }
}
