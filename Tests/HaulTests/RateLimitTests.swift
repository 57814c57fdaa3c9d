import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

/// Bandwidth limits, measured through the injected clock: the transfer itself takes no clock time, so the clock's
/// advance is exactly the throttling.
@Suite("Rate limits", .timeLimit(.minutes(2)), .teardowns)
struct RateLimitTests {
    let body = testBytes(1_000_000, seed: 21)

    func seconds(_ sleeps: [Duration]) -> Double {
        sleeps.reduce(0) { $0 + Double($1.components.seconds) + Double($1.components.attoseconds) / 1e18 }
    }

    @Test("a global limit holds the bytes over time to the rate")
    func globalLimit() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body))
        var configuration = DownloadManager.Configuration(stateDirectory: h.stateDirectory)
        configuration.clock = h.clock
        configuration.startsStoredDownloads = false
        configuration.rateLimit = 200_000
        let manager = try DownloadManager(configuration: configuration)
        let id = try await manager.add(h.server.url("/f"), to: .file(h.path("f.bin")))
        _ = try await manager.result(of: id)
        await manager.shutdown()
        #expect(h.holds("f.bin", body))
        let burst = 20_000.0  // a tenth of a second's worth
        let taken = seconds(h.clock.sleeps)
        #expect(taken >= (Double(body.count) - burst) / 200_000 - 0.01, "never faster than the limit: \(taken) s")
        #expect(taken <= Double(body.count) / 200_000 + 0.5, "not much slower either: \(taken) s")
    }

    @Test("a download's own limit, set while it is queued, and the global one: the stricter wins")
    func ownLimit() async throws {
        let h = try await Harness.make()
        h.server.serve("/hold", .init(body: testBytes(50_000), bytesPerSecond: 500_000))
        h.server.serve("/f", .init(body: body))
        var configuration = DownloadManager.Configuration(stateDirectory: h.stateDirectory)
        configuration.clock = h.clock
        configuration.startsStoredDownloads = false
        configuration.maxConcurrentDownloads = 1
        configuration.rateLimit = 1_000_000
        let manager = try DownloadManager(configuration: configuration)
        let hold = try await manager.add(h.server.url("/hold"), to: .file(h.path("hold.bin")))
        let id = try await manager.add(h.server.url("/f"), to: .file(h.path("f.bin")))
        try await manager.setRateLimit(100_000, for: id)
        _ = try await manager.result(of: hold)
        _ = try await manager.result(of: id)
        await manager.shutdown()
        #expect(h.holds("f.bin", body))
        // Every wait counts: the first download (50 KB within the global limit's burst) waits for nothing, and the
        // second may start while the first is still being moved into place.
        let taken = seconds(h.clock.sleeps)
        #expect(taken >= (Double(body.count) - 16_384) / 100_000 - 0.01, "\(taken) s")
        await #expect(throws: DownloadError.self) { try await manager.setRateLimit(0) }
    }
}
