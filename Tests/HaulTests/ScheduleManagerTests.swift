import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

/// The settings' schedule in the manager, on a calendar clock the test sets.
@Suite("Schedules in the manager", .timeLimit(.minutes(2)), .teardowns)
struct ScheduleManagerTests {
    let body = testBytes(400_000)

    @Test("a pause rule starts nothing and stops what runs (queued, its bytes kept); a jobs rule caps the downloads")
    func pauseAndJobs() async throws {
        let h = try await Harness.make(jumpsPastStalls: false)
        // The first answer of a.bin holds back all but 100,000 bytes, so it is surely running when the pause comes.
        h.server.serve("/a.bin", .init(body: body) { index, _ in index == 0 ? .hold(afterBytes: 100_000) : nil })
        h.server.serve("/b.bin", .init(body: body))
        h.server.serve("/c.bin", .init(body: body))
        let calendar = ManualCalendar("2026-11-23 08:00", in: TimeZone(identifier: "Europe/Berlin")!)  // a Monday
        var configuration = DownloadManager.Configuration(stateDirectory: h.stateDirectory)
        configuration.clock = h.clock
        configuration.idleClock = h.idleClock
        configuration.calendar = calendar
        configuration.maxConcurrentDownloads = 3
        let manager = try DownloadManager(configuration: configuration)
        var settings = await manager.currentSettings()
        settings.schedule = ["sat,sun pause", "mon-fri 09:00-18:00 jobs=1 rate=0"]
        try await manager.update(settings)
        #expect(await manager.scheduleInForce() == nil)

        let (stalls, stalled) = AsyncStream<FaultServer.Stall>.makeStream()
        h.server.onStall { stalled.yield($0) }
        let a = try await manager.add([
            DownloadRequest(url: h.server.url("/a.bin"), destination: .file(h.path("a.bin")))
        ])[0].id
        var waits = stalls.makeAsyncIterator()
        await Harness.waitUntilLanded(try #require(await waits.next()), in: h.folder)

        // Saturday: the running download stops, queued again, and nothing starts.
        let changes = manager.events(for: a)
        calendar.set("2026-11-28 10:00")
        await manager.checkSchedule()
        #expect(await manager.scheduleInForce() == "sat,sun pause")
        for await event in changes {
            if case .changed(let download) = event, download.state == .queued { break }
        }
        #expect(try await manager.snapshot(a).state == .queued)
        h.server.release()
        let later = try await manager.add([
            DownloadRequest(url: h.server.url("/b.bin"), destination: .file(h.path("b.bin"))),
            DownloadRequest(url: h.server.url("/c.bin"), destination: .file(h.path("c.bin"))),
        ]).map(\.id)
        for id in [a] + later { #expect(try await manager.snapshot(id).state == .queued) }
        #expect(h.server.requests(to: "/b.bin").isEmpty && h.server.requests(to: "/c.bin").isEmpty)

        // Monday 10:00: one at a time, and a.bin goes on from the bytes it kept.
        calendar.set("2026-11-30 10:00")
        h.server.resetPeakConnections()
        await manager.checkSchedule()
        #expect(await manager.scheduleInForce() == "mon-fri 09:00-18:00 jobs=1 rate=0")
        for result in await manager.results(of: [a] + later) { _ = try result.get() }
        #expect(h.server.peakConnections == 1)
        #expect(h.holds("a.bin", body) && h.holds("b.bin", body) && h.holds("c.bin", body))
        #expect(h.server.requests(to: "/a.bin").last?.range?.hasPrefix("bytes=") == true)
        await manager.shutdown()
    }

    @Test("a rule that does not read is refused by update, and the settings stay as they were")
    func badRule() async throws {
        let h = try await Harness.make()
        let manager = try h.manager()
        var settings = await manager.currentSettings()
        settings.schedule = ["mon-fri 9-18 rate=1M"]
        await #expect(throws: DownloadError.self) { try await manager.update(settings) }
        #expect(await manager.currentSettings().schedule.isEmpty)
        await manager.shutdown()
    }
}
