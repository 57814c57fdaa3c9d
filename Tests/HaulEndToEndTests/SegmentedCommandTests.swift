import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `haul get -x N` as a child process: kill -9 during a segmented download, and `haul ls` showing connections.
@Suite("haul get -x, end to end", .serialized, .timeLimit(.minutes(2)), .teardowns)
struct SegmentedCommandTests {
    /// Each connection's cap: four connections fetch about 2 MiB of the 16 MiB between a run's start and its kill, so
    /// the three kills all land before the end, even on a loaded machine where each kill comes late (at twice the
    /// rate, a clean-clone run once finished the file before the third).
    static let rate = 256 << 10
    let body = testBytes(16 << 20, seed: 51)

    static func arguments(_ url: URL) -> [String] {
        ["get", url.absoluteString, "-o", "big.bin", "-x", "4", "--min-split-size", "1M"]
    }

    @Test("kill -9 at random moments of a segmented download, then a rerun: identical bytes, at most a checkpoint lost")
    func killNine() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        Teardowns.add { await server.stop() }
        server.serve("/big", .init(body: body, bytesPerSecond: Self.rate))
        let store = try DownloadStore(directory: workspace.state)
        var generator = SystemRandomNumberGenerator()
        for index in 0..<3 {
            let before = try store.allRecords().first?.durableOffset ?? 0
            let haul = try HaulProcess(Self.arguments(server.url("/big")), in: workspace)
            // Wait for a checkpoint of this run's segments, then kill at a random moment up to 0.8 s later.
            let delay = UInt32.random(in: 0..<800_000, using: &generator)
            let checkpointed = await haul.signal(SIGKILL, delay: delay) {
                guard let record = try? store.allRecords().first else { return !haul.process.isRunning }
                return (record.segments != nil && record.durableOffset >= before + (512 << 10))
                    || !haul.process.isRunning
            }
            let outcome = await haul.finish()
            #expect(checkpointed && outcome.status != 0, "kill \(index): haul exited \(outcome.status) first")
            let record = try #require(try store.allRecords().first)
            let segments = try #require(record.segments, "kill \(index): no segment map stored")
            var part = try #require(FileManager.default.contents(atPath: workspace.path("big.bin.part")))
            for segment in segments {
                let start = Int(segment.start)
                let offset = Int(segment.offset)
                // What the store calls durable is the source's bytes.
                #expect(
                    part.count >= offset && Array(part[start..<offset]) == Array(body[start..<offset]),
                    "kill \(index): segment \(segment) holds wrong bytes")
                // Bytes written after the last checkpoint are lost: at most a checkpoint's worth (1 s) per segment.
                var lost = 0
                let end = min(Int(segment.end), part.count)
                while offset + lost < end, part[offset + lost] == body[offset + lost] { lost += 1 }
                #expect(lost <= Self.rate * 3 / 2, "kill \(index): segment \(segment) lost \(lost) bytes")
                // The rerun must not rely on them: make them wrong, so that it would show.
                if end > offset { part.replaceSubrange(offset..<end, with: Data(count: end - offset)) }
            }
            try part.write(to: URL(fileURLWithPath: workspace.path("big.bin.part")))
        }
        let final = try await HaulProcess.run(Self.arguments(server.url("/big")), in: workspace)
        #expect(final.status == 0, "\(final.stderr)")
        #expect(workspace.holds("big.bin", body))
        #expect(workspace.size("big.bin.part") == nil)
        #expect(server.requests(to: "/big").allSatisfy { $0.range == nil || $0.headers["if-range"] == "\"v1\"" })
    }

    @Test("haul ls shows how many connections a running download has open")
    func listShowsConnections() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let server = try await FaultServer.start()
        Teardowns.add { await server.stop() }
        server.serve("/big", .init(body: body, bytesPerSecond: Self.rate / 2))
        let store = try DownloadStore(directory: workspace.state)
        let haul = try HaulProcess(Self.arguments(server.url("/big")), in: workspace)
        let busy = await waitUntil { ((try? store.allRecords().first?.activeConnections) ?? 0) >= 2 }
        let listed = try await HaulProcess.run(["ls", "--json", "--state-dir", workspace.state], in: workspace)
        let plain = try await HaulProcess.run(["ls", "--state-dir", workspace.state], in: workspace)
        haul.signal(SIGKILL)
        _ = await haul.finish()
        #expect(busy)
        let objects = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]]
        let connections = try #require(objects?.first?["connections"] as? Int)
        #expect(connections >= 2, "\(listed.stdout)")
        // id, state, percent, size (number and unit), connections, destination
        let fields = plain.stdout.split(separator: " ", omittingEmptySubsequences: true)
        #expect(fields.count >= 7 && fields[1] == "running" && (Int(fields[5]) ?? 0) >= 2, "\(plain.stdout)")
    }
}
