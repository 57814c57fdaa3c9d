import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

/// `DownloadManager.waitUntilStopped`, the daemon's long poll (`GET /api/v1/wait`) underneath.
@Suite("Waiting for downloads to stop", .timeLimit(.minutes(2)), .teardowns)
struct StopWaitTests {
    let body = testBytes(50_000)

    func request(_ h: Harness, _ path: String) -> DownloadRequest {
        DownloadRequest(url: h.server.url(path), destination: .directory(h.folder), isPaused: true, origin: .api)
    }

    /// Returns once `manager` holds `count` pending waits (each wait registers on the actor before it suspends).
    func untilWaiting(_ manager: DownloadManager, _ count: Int) async {
        while await manager.pendingStopWaits < count { await Task.yield() }
    }

    @Test("paused, completed and failed downloads have stopped; a running one has not; an unknown id has")
    func stoppedStates() async throws {
        let h = try await Harness.make()
        h.server.serve("/ok", .init(body: body))
        h.server.serve("/gone", .init(body: body) { _, _ in .status(404, headers: [:]) })
        h.server.serve("/stuck", .init(body: body) { _, _ in .stall(afterBytes: 1000) })
        let manager = try h.manager()
        #expect(await manager.haveStopped(), "no download at all")
        let ids = try await manager.add([request(h, "/ok"), request(h, "/gone"), request(h, "/stuck")]).map(\.id)
        #expect(await manager.haveStopped(), "all paused")
        try await manager.resume(ids[0])
        try await manager.resume(ids[1])
        _ = await manager.results(of: [ids[0], ids[1]])
        try await manager.resume(ids[2])
        #expect(await !manager.haveStopped())
        #expect(await manager.haveStopped([ids[0], ids[1], DownloadID("no-such-download")]))
        #expect(await !manager.haveStopped([ids[0], ids[2]]))
        await manager.shutdown()
    }

    @Test(
        "a wait ends when the last download stops (paused, cancelled), counts a download queued again, and ends when cancelled or at shutdown"
    )
    func waits() async throws {
        let h = try await Harness.make()
        for path in ["/s1", "/s2", "/s3"] {
            h.server.serve(path, .init(body: body) { _, _ in .stall(afterBytes: 1000) })
        }
        let manager = try h.manager()
        let ids = try await manager.add([request(h, "/s1"), request(h, "/s2"), request(h, "/s3")]).map(\.id)
        for id in ids { try await manager.resume(id) }

        // Every download: the wait is told of each stop and ends with the last.
        async let all: Void = manager.waitUntilStopped()
        await untilWaiting(manager, 1)
        try await manager.pause(ids[0])
        try await manager.pause(ids[1])
        #expect(await manager.pendingStopWaits == 1, "one is still running")
        try await manager.pause(ids[2])
        await all
        #expect(await manager.haveStopped())

        // Named ones: one queued again counts again; a cancelled one has stopped.
        try await manager.resume(ids[0])
        async let named: Void = manager.waitUntilStopped([ids[0], ids[1]])
        await untilWaiting(manager, 1)
        try await manager.resume(ids[1])
        try await manager.pause(ids[0])
        #expect(await manager.pendingStopWaits == 1, "the second was queued again")
        try await manager.cancel(ids[1])
        await named
        #expect(await manager.haveStopped([ids[0], ids[1]]))

        // A cancelled wait leaves nothing behind; a shutdown ends the others.
        try await manager.resume(ids[2])
        let cancelled = Task { await manager.waitUntilStopped([ids[2]]) }
        await untilWaiting(manager, 1)
        cancelled.cancel()
        await cancelled.value
        #expect(await manager.pendingStopWaits == 0)
        async let last: Void = manager.waitUntilStopped()
        await untilWaiting(manager, 1)
        await manager.shutdown()
        await last
        #expect(await manager.pendingStopWaits == 0)
    }
}
