import Crypto
import Foundation
import HaulCore
import HaulTesting
import Testing

/// `haul get FILE.meta4` against nginx mirrors: the Metalink's URLs become the download's mirrors, its hash its
/// checksum, its pieces are checked as they complete.
@Suite("Metalink files on the command line", .timeLimit(.minutes(2)))
struct MetalinkCommandTests {
    static func hex<D: Sequence>(_ digest: D) -> String where D.Element == UInt8 {
        digest.map { String(format: "%02x", $0) }.joined()
    }

    /// A Metalink 4 document for `body` named `name`, fetched from `urls` in that order of priority.
    static func metalink(_ body: [UInt8], name: String, urls: [String], pieceLength: Int) -> String {
        let pieces = stride(from: 0, to: body.count, by: pieceLength).map { start in
            "<hash>\(hex(SHA256.hash(data: body[start..<min(start + pieceLength, body.count)])))</hash>"
        }
        let sources = urls.enumerated().map { index, url in
            "<url priority=\"\(index + 1)\" location=\"de\">\(url)</url>"
        }
        return """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="\(name)">
                <size>\(body.count)</size>
                <hash type="sha-256">\(hex(SHA256.hash(data: body)))</hash>
                <pieces length="\(pieceLength)" type="sha-256">\(pieces.joined())</pieces>
                \(sources.reversed().joined(separator: "\n"))
              </file>
            </metalink>
            """
    }

    @Test(
        "a mirror whose middle differs passes the sample check, is caught by a piece hash and dropped; the file is right"
    )
    func pieceCaught() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let body = testBytes(16 << 20, seed: 21)
        var other = body
        for index in stride(from: 0, to: 15 << 20, by: 4096) { other[index] ^= 0xA5 }
        let (nginx, servers) = try await MirrorTests.serve([body, other], in: workspace)
        defer { nginx.stop() }
        let file = workspace.root + "/release.meta4"
        try Self.metalink(body, name: "release.iso", urls: [servers[0].url, servers[1].url], pieceLength: 1 << 20)
            .write(toFile: file, atomically: true, encoding: .utf8)
        let run = try await HaulProcess.run(
            ["get", file, "-d", workspace.files, "-x", "2", "--min-split-size", "1M", "-v"], in: workspace)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(workspace.holds("release.iso", body))
        #expect(run.stderr.contains("does not match its hash"), "\(run.stderr)")
        // The mirror passed its sample (its last bytes are right) and served bytes before a piece caught it.
        #expect(try servers[1].requests().count > 1)
    }

    @Test("a Metalink file's names with folders land beneath -d; a name leading out is refused before any fetch")
    func namesWithFolders() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        let body = testBytes(4096, seed: 5)
        server.serve("/a", .init(body: body))
        let file = workspace.root + "/two.meta4"
        func write(_ name: String) throws {
            try """
            <?xml version="1.0"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="\(name)"><url>\(server.url("/a").absoluteString)</url></file>
            </metalink>
            """.write(toFile: file, atomically: true, encoding: .utf8)
        }
        try write("sub/deeper/a.bin")
        let run = try await HaulProcess.run(["get", file, "-d", workspace.files], in: workspace)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(workspace.holds("sub/deeper/a.bin", body))
        try write("../outside.bin")
        let refused = try await HaulProcess.run(["get", file, "-d", workspace.files], in: workspace)
        #expect(refused.status == 2 && refused.stderr.contains("leads out of its folder"), "\(refused.stderr)")
        #expect(server.requests(to: "/a").count == 1)
        await server.stop()
    }

    @Test("--checksum that disagrees with the Metalink's hash: an error before any byte is fetched")
    func checksumDisagrees() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let body = testBytes(1 << 20, seed: 22)
        let (nginx, servers) = try await MirrorTests.serve([body], in: workspace)
        defer { nginx.stop() }
        let file = workspace.root + "/one.meta4"
        try Self.metalink(body, name: "one.bin", urls: [servers[0].url], pieceLength: 256 << 10)
            .write(toFile: file, atomically: true, encoding: .utf8)
        let wrong = "sha256=" + String(repeating: "ab", count: 32)
        let run = try await HaulProcess.run(["get", file, "-d", workspace.files, "--checksum", wrong], in: workspace)
        #expect(run.status == 2)
        #expect(run.stderr.contains("disagrees with the Metalink's sha256 for one.bin"), "\(run.stderr)")
        #expect(try servers[0].requests().isEmpty)
        #expect(workspace.contents("one.bin") == nil)
    }

    @Test("a URL answering a Metalink is followed: each file it describes lands under its name, from its mirrors")
    func followsURL() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let body = testBytes(8 << 20, seed: 23)
        let notes = Array("release notes\n".utf8)
        // Slow enough that the mirror, asked once the first server's sample is held, finds work left.
        let (nginx, servers) = try await MirrorTests.serve(
            [body, body], in: workspace, rate: "1m",
            http: "types { application/metalink4+xml meta4; application/octet-stream bin; }")
        defer { nginx.stop() }
        _ = FileManager.default.createFile(atPath: servers[0].root + "/notes.txt", contents: Data(notes))
        var document = Self.metalink(
            body, name: "release.iso", urls: [servers[0].url, servers[1].url], pieceLength: 1 << 20)
        let second = """
              <file name="docs/NOTES.txt">
                <size>\(notes.count)</size>
                <hash type="sha-256">\(Self.hex(SHA256.hash(data: notes)))</hash>
                <url>http://127.0.0.1:\(servers[0].port)/notes.txt</url>
              </file>
            </metalink>
            """
        document = document.replacingOccurrences(of: "</metalink>", with: second)
        try document.write(toFile: servers[0].root + "/release.meta4", atomically: true, encoding: .utf8)
        let run = try await HaulProcess.run(
            [
                "get", "http://127.0.0.1:\(servers[0].port)/release.meta4", "-d", workspace.files, "-x", "2",
                "--min-split-size", "1M",
            ], in: workspace)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(workspace.holds("release.iso", body))
        // Its name's folder is made beneath the download's folder.
        #expect(workspace.holds("docs/NOTES.txt", notes))
        #expect(workspace.contents("release.meta4") == nil, "the Metalink itself is not saved")
        // Both servers served a share of the file the Metalink names.
        #expect(try servers[1].bytesSent() > 1 << 20)
    }

    @Test("a server whose file has another length than the Metalink's size: the run ends at its first answer")
    func sizeDisagrees() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let body = testBytes(1 << 20, seed: 24)
        let (nginx, servers) = try await MirrorTests.serve([body], in: workspace)
        defer { nginx.stop() }
        let file = workspace.root + "/sized.meta4"
        let document = """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="sized.bin"><size>\(body.count + 1)</size><url>\(servers[0].url)</url></file>
            </metalink>
            """
        try document.write(toFile: file, atomically: true, encoding: .utf8)
        let run = try await HaulProcess.run(["get", file, "-d", workspace.files], in: workspace)
        #expect(run.status == 1)
        #expect(
            run.stderr.contains("the server's file is 1048576 bytes, and the Metalink says 1048577"), "\(run.stderr)")
        #expect(workspace.contents("sized.bin") == nil)
        #expect(try servers[0].requests().count == 1, "one answer, and no retry")
    }
}
