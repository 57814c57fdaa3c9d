import Crypto
import Foundation
import Haul
import HaulTesting
import Testing

/// The README's library section, as a program embedding Haul writes it: only the public API (no `@testable`), the
/// same calls in the same order, against an in-process server. A change that breaks the README's code breaks this.
@Suite("The README's library code", .teardowns) struct ReadmeLibraryTests {
    @Test func oneCallAndTheManager() async throws {
        let server = try await FaultServer.start()
        Teardowns.add { await server.stop() }
        let root = NSTemporaryDirectory() + "haul-readme-" + UUID().uuidString
        // The library refuses a destination folder that does not exist (the command line's -d makes it).
        for folder in ["/data", "/queue"] {
            try FileManager.default.createDirectory(atPath: root + folder, withIntermediateDirectories: true)
        }
        defer { try? FileManager.default.removeItem(atPath: root) }
        let big = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let iso = (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let sums = Array("sums\n".utf8)
        server.serve("/big.iso", .init(body: big))
        server.serve("/a.iso", .init(body: iso))
        server.serve("/SHA256SUMS", .init(body: sums))

        // One call: download to a path, resuming whatever an earlier call left.
        var oneCall = DownloadManager.Configuration(stateDirectory: root + "/one-call")
        oneCall.engine.progressInterval = .milliseconds(1)
        let result = try await DownloadManager.download(
            server.url("/big.iso"), to: root + "/data/big.iso", configuration: oneCall)
        #expect(result.path == root + "/data/big.iso")
        #expect(result.bytes == Int64(big.count))
        #expect(result.resumedFrom == 0)
        #expect(FileManager.default.contents(atPath: result.path) == Data(big))

        // A manager: many downloads under a concurrency limit, commands, and events.
        var configuration = DownloadManager.Configuration(stateDirectory: root + "/app")
        configuration.maxConcurrentDownloads = 3
        let manager = try DownloadManager(configuration: configuration)
        try await manager.start()

        let digest = SHA256.hash(data: iso).map { String(format: "%02x", $0) }.joined()
        let id = try await manager.add(
            server.url("/a.iso"), to: .directory(root + "/data"),
            options: DownloadOptions(checksum: try Checksum(parsing: "sha256=" + digest)))
        let watcher = Task {
            var kinds: [String] = []
            for await event in manager.events(for: id) {
                if case .progress(let p) = event {
                    #expect(p.receivedBytes <= Int64(iso.count))
                    #expect(p.totalBytes ?? -1 <= Int64(iso.count))
                    kinds.append("progress")
                }
                if case .changed(let download) = event, download.state == .completed {
                    kinds.append("completed")
                    break
                }
            }
            return kinds
        }
        // These race a fast transfer: a download already complete refuses them (with a DownloadError, as their
        // typed throws say), and the result below is the same either way.
        try? await manager.pause(id)
        try? await manager.resume(id)
        let done = try await manager.result(of: id)
        #expect(done.path == root + "/data/a.iso")
        #expect(FileManager.default.contents(atPath: done.path) == Data(iso))
        // The stream ends with the download: after its completion, or at once when it had completed before the
        // stream was made (the loop above ends either way).
        let seen = await watcher.value
        #expect(seen.isEmpty || seen.last == "completed")

        // The queue.
        let first = try await manager.add(server.url("/big.iso"), to: .directory(root + "/queue"), priority: .high)
        let after = try await manager.add(server.url("/SHA256SUMS"), to: .directory(root + "/queue"), after: [first])
        try? await manager.move(after, before: first)
        try await manager.setMaxConcurrentDownloads(5)
        try await manager.setRateLimit(2 << 20)
        try? await manager.setRateLimit(512 << 10, for: first)
        await manager.pauseAll()
        await manager.resumeAll()
        _ = try await manager.result(of: first)
        _ = try await manager.result(of: after)
        #expect(FileManager.default.contents(atPath: root + "/queue/SHA256SUMS") == Data(sums))
        #expect(FileManager.default.contents(atPath: root + "/queue/big.iso") == Data(big))
        await manager.shutdown()
    }
}
