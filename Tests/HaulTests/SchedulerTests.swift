import Foundation
import Haul
import HaulCore
import HaulTesting
import Synchronization
import Testing

/// Collects the state changes of every download, in the order the manager emitted them.
final class StateLog: Sendable {
    private let entries = Mutex<[(DownloadID, DownloadState)]>([])

    /// Starts collecting from `events` until the stream ends.
    init(_ events: DownloadEvents) {
        Task { [self] in
            var last: [DownloadID: DownloadState] = [:]
            for await event in events {
                // Transitions only: a download also changes while it runs (its name, a retry's error).
                guard let id = event.downloadID, let state = event.state, last[id] != state else { continue }
                last[id] = state
                entries.withLock { $0.append((id, state)) }
            }
        }
    }

    var all: [(DownloadID, DownloadState)] { entries.withLock { $0 } }

    /// Ids in the order they started running.
    var starts: [DownloadID] { all.filter { $0.1 == .running }.map(\.0) }

    /// The most downloads running at any moment.
    var peakRunning: Int {
        var running = Set<DownloadID>()
        var peak = 0
        for (id, state) in all {
            if state == .running { running.insert(id) } else { running.remove(id) }
            peak = max(peak, running.count)
        }
        return peak
    }
}

@Suite("Scheduler", .timeLimit(.minutes(2)), .teardowns)
struct SchedulerTests {
    let body = testBytes(100_000)

    func manager(_ h: Harness, limit: Int) throws -> DownloadManager {
        var configuration = DownloadManager.Configuration(stateDirectory: h.stateDirectory)
        configuration.clock = h.clock
        configuration.startsStoredDownloads = false
        configuration.maxConcurrentDownloads = limit
        return try DownloadManager(configuration: configuration)
    }

    /// Serves `/0` … `/n-1`, each slow enough to overlap with the others.
    func serve(_ h: Harness, count: Int, bytesPerSecond: Int = 1_000_000) {
        for index in 0..<count { h.server.serve("/\(index)", .init(body: body, bytesPerSecond: bytesPerSecond)) }
    }

    /// Adds `count` served files under a limit of `limit`, waits for all of them and shuts the manager down.
    func batch(_ h: Harness, count: Int, limit: Int) async throws -> (ids: [DownloadID], log: StateLog) {
        serve(h, count: count)
        let manager = try manager(h, limit: limit)
        let log = StateLog(manager.events())
        var ids: [DownloadID] = []
        for index in 0..<count {
            ids.append(try await manager.add(h.server.url("/\(index)"), to: .file(h.path("\(index).bin"))))
        }
        for id in ids { _ = try await manager.result(of: id) }
        await manager.shutdown()
        return (ids, log)
    }

    @Test("--max-per-host: a host at its limit waits while another host's download starts; its server never sees more")
    func perHostLimit() async throws {
        let h = try await Harness.make()
        serve(h, count: 4, bytesPerSecond: 400_000)
        var configuration = DownloadManager.Configuration(stateDirectory: h.stateDirectory)
        configuration.clock = h.clock
        configuration.startsStoredDownloads = false
        configuration.maxConcurrentDownloads = 3
        configuration.maxDownloadsPerHost = 1
        let manager = try DownloadManager(configuration: configuration)
        let log = StateLog(manager.events())
        let options = DownloadOptions(maxConnectionsPerDownload: 1)
        var ids: [DownloadID] = []
        for index in 0..<3 {
            ids.append(
                try await manager.add(h.server.url("/\(index)"), to: .file(h.path("\(index).bin")), options: options))
        }
        for id in ids { _ = try await manager.result(of: id) }
        // One host: its downloads ran one at a time, in queue order, and its server never saw two connections.
        #expect(log.starts == ids)
        #expect(h.server.peakConnections == 1)
        // Another host (the same server under another name) starts at once beside one of the first host.
        // Slow enough to be running still when the next two are added, on a loaded machine too.
        h.server.serve("/slow", .init(body: body, bytesPerSecond: 50_000))
        let first = try await manager.add(
            h.server.url("/slow"), to: .file(h.path("3.bin")), options: options)
        let waiting = try await manager.add(
            h.server.url("/0?again"), to: .file(h.path("4.bin")), options: options)
        let other = h.server.url("/3").absoluteString.replacingOccurrences(of: "127.0.0.1", with: "localhost")
        let beside = try await manager.add(URL(string: other)!, to: .file(h.path("5.bin")), options: options)
        for id in [first, waiting, beside] { _ = try await manager.result(of: id) }
        #expect(Array(log.starts.suffix(3)) == [first, beside, waiting])
        await manager.shutdown()
        await #expect(throws: DownloadError.self) {
            var settings = await manager.currentSettings()
            settings.maxDownloadsPerHost = 0
            try await manager.update(settings)
        }
    }

    @Test("the concurrency limit holds at every moment, and is reached")
    func concurrencyLimit() async throws {
        let h = try await Harness.make()
        let (ids, log) = try await batch(h, count: 8, limit: 3)
        // Each throttled answer is one connection, closed by the server after its last byte: the connections open
        // at once are the transfers at once.
        #expect(h.server.peakConnections <= 3)
        // The first three start together. A download whose bytes have all arrived gives its slot to the next while
        // its file is synced and moved: at most as many again are running.
        #expect((3...6).contains(log.peakRunning))
        #expect(log.starts == ids, "same priority: the order of adding")
        for index in 0..<8 { #expect(h.holds("\(index).bin", body)) }
    }

    @Test("a limit of connections to one host holds across downloads and their segments, and every download completes")
    func connectionsPerHost() async throws {
        let h = try await Harness.make()
        let large = testBytes(6 << 20, seed: 7)
        h.server.serve("/large", .init(body: large, bytesPerSecond: 3 << 20))
        // A second each: they overlap however slowly they are added.
        serve(h, count: 6, bytesPerSecond: 100_000)
        var configuration = DownloadManager.Configuration(stateDirectory: h.stateDirectory)
        configuration.clock = h.clock
        configuration.idleClock = h.idleClock
        configuration.startsStoredDownloads = false
        configuration.maxConcurrentDownloads = 7
        configuration.maxConnectionsPerHost = 3
        let manager = try DownloadManager(configuration: configuration)
        let log = StateLog(manager.events())
        var ids = [
            try await manager.add(
                h.server.url("/large"), to: .file(h.path("large.bin")),
                options: DownloadOptions(maxConnectionsPerDownload: 8, minimumSplitSize: 1 << 20))
        ]
        for index in 0..<6 {
            ids.append(try await manager.add(h.server.url("/\(index)"), to: .file(h.path("\(index).bin"))))
        }
        for id in ids { _ = try await manager.result(of: id) }
        await manager.shutdown()
        // Throttled answers close their connection after the last byte: the connections open are those in flight.
        // How many were open at the busiest moment depends on how the downloads overlapped (on a loaded machine the
        // ramp may not add a connection); that the limit held does not.
        #expect(h.server.peakConnections <= 3, "\(h.server.peakConnections) at once")
        #expect(log.peakRunning > 3, "more downloads ran than connections were open: their connections waited")
        #expect(h.holds("large.bin", large))
        for index in 0..<6 { #expect(h.holds("\(index).bin", body)) }
    }

    @Test("a download whose bytes have all arrived gives its slot to the next before its file is moved into place")
    func finishingGivesItsSlot() async throws {
        let h = try await Harness.make()
        let (ids, log) = try await batch(h, count: 3, limit: 1)
        let order = log.all.map { "\(ids.firstIndex(of: $0.0) ?? -1) \($0.1)" }
        // The second starts when the first reports that it is finishing, before its sync and rename: always before
        // the first completes. (The third may not start that way: when the second finishes while the first still
        // does, the second keeps its slot, as at most one may finish besides the one transferring.)
        let second = order.firstIndex(of: "1 running") ?? .max
        let first = order.firstIndex(of: "0 completed") ?? .min
        #expect(second < first, "\(order)")
        #expect(log.peakRunning == 2, "at most one finishing besides the one transferring")
        for index in 0..<3 { #expect(h.holds("\(index).bin", body)) }
    }

    @Test("a finishing download sent back to transferring (its checksum failed after a resume) takes its slot back")
    func refetchTakesItsSlotBack() async throws {
        let h = try await Harness.make(jumpsPastStalls: false)
        // A continues a partial file with a damaged byte: its checksum fails once all bytes are in, and it fetches
        // the file whole again. That second request never answers (until A is cancelled).
        let whole = testBytes(300_000, seed: 7)
        var partial = Array(whole.prefix(120_000))
        partial[1_000] ^= 0xFF
        try Data(partial).write(to: URL(fileURLWithPath: h.path("a.bin")))
        h.server.serve("/a", .init(body: whole) { index, _ in index == 1 ? .stallBeforeHead : nil })
        let (stalls, stalled) = AsyncStream<Void>.makeStream()
        h.server.onStall { _ in stalled.yield() }
        serve(h, count: 2)
        let manager = try manager(h, limit: 1)
        let log = StateLog(manager.events())
        let options = DownloadOptions(
            checksum: try Checksum(parsing: "sha256=\(sha256Hex(whole))"), continuePartial: true)
        let a = try await manager.add(h.server.url("/a"), to: .file(h.path("a.bin")), options: options)
        let b = try await manager.add(h.server.url("/0"), to: .file(h.path("0.bin")))
        let c = try await manager.add(h.server.url("/1"), to: .file(h.path("1.bin")))
        // B started when A first finished. A then went back to transferring (its request is out), so when B finishes
        // and completes, the one slot is A's: C must wait. (B's answer takes 0.1 s at 1 MB/s; A's check of its
        // 300 KB and its new request take about a millisecond, so A is transferring again before B finishes.)
        var waits = stalls.makeAsyncIterator()
        _ = await waits.next()
        _ = try await manager.result(of: b)
        try await manager.cancel(a)
        _ = try await manager.result(of: c)
        await manager.shutdown()
        let order = log.all.map { "\([a, b, c].firstIndex(of: $0.0) ?? -1) \($0.1)" }
        let cStarts = order.firstIndex(of: "2 running") ?? .min
        #expect(cStarts > (order.firstIndex(of: "0 cancelled") ?? .max), "\(order)")
        // Continued (from a little before the partial's end: an adopted file's tail is fetched again), then whole.
        let ranges = h.server.requests(to: "/a").map(\.range)
        #expect(ranges.count == 2 && ranges[0]?.hasPrefix("bytes=") == true && ranges[1] == nil, "\(ranges)")
        #expect(h.holds("1.bin", body))
    }

    @Test("priority first, then the order of adding; move reorders")
    func priorityAndMove() async throws {
        let h = try await Harness.make()
        serve(h, count: 6)
        let manager = try manager(h, limit: 1)
        let log = StateLog(manager.events())
        let first = try await manager.add(h.server.url("/0"), to: .file(h.path("0.bin")))
        let low = try await manager.add(h.server.url("/1"), to: .file(h.path("1.bin")), priority: .low)
        let normal = try await manager.add(h.server.url("/2"), to: .file(h.path("2.bin")))
        let high = try await manager.add(h.server.url("/3"), to: .file(h.path("3.bin")), priority: .high)
        let last = try await manager.add(h.server.url("/4"), to: .file(h.path("4.bin")))
        try await manager.move(last, before: normal)
        for id in [first, low, normal, high, last] { _ = try await manager.result(of: id) }
        await manager.shutdown()
        #expect(log.starts == [first, high, last, normal, low])
    }

    @Test("dependencies wait for completion; a failed prerequisite fails its dependents, naming it")
    func dependencies() async throws {
        let h = try await Harness.make()
        serve(h, count: 3)
        h.server.serve("/missing", .init(body: []) { _, _ in .status(404, headers: [:]) })
        let manager = try manager(h, limit: 3)
        let log = StateLog(manager.events())
        let a = try await manager.add(h.server.url("/0"), to: .file(h.path("0.bin")))
        let b = try await manager.add(h.server.url("/1"), to: .file(h.path("1.bin")), after: [a])
        let broken = try await manager.add(h.server.url("/missing"), to: .file(h.path("m.bin")))
        let c = try await manager.add(h.server.url("/2"), to: .file(h.path("2.bin")), after: [broken])
        let d = try await manager.add(h.server.url("/2"), to: .file(h.path("d.bin")), after: [c])
        _ = try await manager.result(of: b)
        for (id, upstream) in [(c, broken), (d, c)] {
            do {
                _ = try await manager.result(of: id)
                Issue.record("\(id) should have failed")
            } catch let error as DownloadError {
                #expect(error.message.contains(upstream.rawValue))
            }
        }
        await manager.shutdown()
        let states = log.all
        let aCompleted = try #require(states.firstIndex { $0.0 == a && $0.1 == .completed })
        let bRunning = try #require(states.firstIndex { $0.0 == b && $0.1 == .running })
        #expect(aCompleted < bRunning)
        #expect(!log.starts.contains(c) && !log.starts.contains(d))
        await #expect(throws: DownloadError.self) {
            _ = try await manager.add(h.server.url("/0"), to: .file(h.path("x.bin")), after: [DownloadID("nope")])
        }
    }

    @Test("when a running download pauses, the next queued one starts; raising the limit starts more")
    func nextStartsAndLimitChanges() async throws {
        let h = try await Harness.make()
        serve(h, count: 4, bytesPerSecond: 200_000)
        let manager = try manager(h, limit: 1)
        let log = StateLog(manager.events())
        var ids: [DownloadID] = []
        for index in 0..<4 {
            ids.append(try await manager.add(h.server.url("/\(index)"), to: .file(h.path("\(index).bin"))))
        }
        #expect(try await manager.snapshot(ids[0]).state == .running)
        #expect(try await manager.snapshot(ids[1]).state == .queued)
        try await manager.pause(ids[0])
        #expect(try await manager.snapshot(ids[1]).state == .running)
        try await manager.setMaxConcurrentDownloads(3)
        #expect(try await manager.snapshot(ids[2]).state == .running)
        #expect(try await manager.snapshot(ids[3]).state == .running)
        await manager.pauseAll()
        #expect(try await manager.snapshots().allSatisfy { $0.state == .paused || $0.state == .completed })
        await manager.resumeAll()
        for id in ids { _ = try await manager.result(of: id) }
        await manager.shutdown()
        #expect((3...4).contains(log.peakRunning), "the raised limit is reached (one more while it finishes)")
        for index in 0..<4 { #expect(h.holds("\(index).bin", body)) }
        await #expect(throws: DownloadError.self) { try await manager.setMaxConcurrentDownloads(0) }
        await #expect(throws: DownloadError.self) { try await manager.setMaxConcurrentDownloads(1001) }
    }

    @Test("pausing all starts none of the queued downloads on the way")
    func pauseAllStartsNone() async throws {
        let h = try await Harness.make()
        // Each answer holds its body back after its first bytes: the two that start run until they are paused.
        for index in 0..<6 { h.server.serve("/\(index)", .init(body: body) { _, _ in .hold(afterBytes: 1_000) }) }
        let manager = try manager(h, limit: 2)
        var ids: [DownloadID] = []
        for index in 0..<6 {
            ids.append(try await manager.add(h.server.url("/\(index)"), to: .file(h.path("\(index).bin"))))
        }
        #expect(
            try await manager.snapshots(of: ids).map(\.state) == [.running, .running]
                + Array(repeating: .queued, count: 4))
        await manager.pauseAll()
        #expect(try await manager.snapshots(of: ids).allSatisfy { $0.state == .paused })
        await manager.shutdown()
        // Only the two that ran when it was asked were ever asked for, and only they hold part files.
        #expect(Set(h.server.requests.map(\.path)).isSubset(of: ["/0", "/1"]), "\(h.server.requests.map(\.path))")
        for index in 2..<6 { #expect(!FileManager.default.fileExists(atPath: h.path("\(index).bin.part"))) }
    }

    @Test("the engine refuses options outside the documented rules, naming them, and adds nothing")
    func refusesOutsideTheRules() async throws {
        let h = try await Harness.make()
        let manager = try h.manager()
        let url = h.server.url("/never")
        for (options, words) in [
            (DownloadOptions(maxConnectionsPerDownload: 17), "connections must be between 1 and 16, not 17"),
            (DownloadOptions(maxConnectionsPerDownload: 0), "connections must be between 1 and 16, not 0"),
            (DownloadOptions(minimumSplitSize: 1000), "the minimum split size must be at least 1048576"),
            (DownloadOptions(idleTimeoutSeconds: 0), "the idle timeout must be a positive number of seconds"),
            (DownloadOptions(maximumAttemptsWithoutProgress: -1), "the attempts without progress must be between"),
            (
                DownloadOptions(headers: [RequestHeader(name: "Range", value: "bytes=0-5")]),
                "a header 'Range' is Haul's to set"
            ),
        ] {
            do {
                _ = try await manager.add(url, to: .directory(h.folder), options: options)
                Issue.record("added with \(words)")
            } catch {
                #expect(error.code == .invalidArgument && error.message.hasPrefix(words), "\(error.message)")
            }
        }
        #expect(try await manager.snapshots().isEmpty)
        var settings = await manager.currentSettings()
        settings.connectionsPerDownload = 17
        await #expect(throws: DownloadError.self) { try await manager.update(settings) }
        await manager.shutdown()
    }

    @Test("restart: a new manager on the same store finishes the batch in its old order, nothing fetched twice")
    func restart() async throws {
        let h = try await Harness.make()
        serve(h, count: 5, bytesPerSecond: 400_000)
        // The others slower, so that some are still unfinished when the first manager stops, however busy the
        // machine (a download whose bytes have all arrived hands its slot on at once).
        for index in 1..<5 { h.server.serve("/\(index)", .init(body: body, bytesPerSecond: 100_000)) }
        let first = try manager(h, limit: 2)
        var ids: [DownloadID] = []
        for index in 0..<5 {
            ids.append(try await first.add(h.server.url("/\(index)"), to: .file(h.path("\(index).bin"))))
        }
        _ = try await first.result(of: ids[0])
        try await first.pause(ids[4])
        // Drop the first manager as a crash would: its store rows still say running.
        await first.shutdown()
        var configuration = DownloadManager.Configuration(stateDirectory: h.stateDirectory)
        configuration.clock = h.clock
        configuration.maxConcurrentDownloads = 2
        let second = try DownloadManager(configuration: configuration)
        let log = StateLog(second.events())
        try await second.start()
        for id in ids.prefix(4) { _ = try await second.result(of: id) }
        #expect(try await second.snapshot(ids[4]).state == .paused, "paused stays paused")
        await second.shutdown()
        #expect(!log.starts.contains(ids[0]))
        // Whatever the first manager left unfinished starts again in its old order.
        let order = { (id: DownloadID) in ids.firstIndex(of: id) ?? -1 }
        #expect(log.starts == log.starts.sorted { order($0) < order($1) })
        #expect(!log.starts.isEmpty)
        for index in 0..<4 { #expect(h.holds("\(index).bin", body)) }
        #expect(h.server.requests(to: "/0").count == 1, "a completed file is not fetched again")
    }
}
