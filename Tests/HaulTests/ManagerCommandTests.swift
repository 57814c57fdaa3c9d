import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

/// The manager's commands and views that the daemon builds on: lists, settings, the event subscription.
@Suite("Manager commands", .timeLimit(.minutes(2)), .teardowns)
struct ManagerCommandTests {
    let body = testBytes(50_000)

    func request(_ h: Harness, _ path: String, paused: Bool = true, origin: DownloadOrigin = .api) -> DownloadRequest {
        DownloadRequest(
            url: h.server.url(path), destination: .directory(h.folder), isPaused: paused, origin: origin)
    }

    @Test("a download's own event stream ends with it: after it completes or fails, and at once when it had ended")
    func streamEndsWithDownload() async throws {
        let h = try await Harness.make()
        h.server.serve("/ok", .init(body: body))
        h.server.serve("/gone", .init(body: body) { _, _ in .status(404, headers: [:]) })
        let manager = try h.manager()
        let everything = manager.events()
        let ok = try await manager.add([request(h, "/ok")])[0].id
        let gone = try await manager.add([request(h, "/gone")])[0].id
        let streams = (manager.events(for: ok), manager.events(for: gone))
        try await manager.resume(ok)
        try await manager.resume(gone)
        var last: [DownloadID: DownloadState] = [:]
        for (id, stream) in [(ok, streams.0), (gone, streams.1)] {
            for await event in stream {
                if case .changed(let download) = event { last[id] = download.state }
            }
        }
        #expect(last == [ok: .completed, gone: .failed])
        // Subscribed after the end: nothing to wait for.
        var after = 0
        for await _ in manager.events(for: ok) { after += 1 }
        #expect(after == 0)
        // The stream of every download does not end with one of them.
        try await manager.remove(gone)
        var sawRemoval = false
        for await event in everything {
            if case .removed(let id) = event, id == gone {
                sawRemoval = true
                break
            }
        }
        #expect(sawRemoval)
        await manager.shutdown()
    }

    @Test("one wait gives every download's outcome in order; a removal or a shutdown ends the wait for the others")
    func resultsOfBatch() async throws {
        let h = try await Harness.make()
        h.server.serve("/ok", .init(body: body))
        h.server.serve("/gone", .init(body: body) { _, _ in .status(404, headers: [:]) })
        let manager = try h.manager()
        let ids = try await manager.add(
            [request(h, "/ok"), request(h, "/gone"), request(h, "/never"), request(h, "/removed")]
        ).map(\.id)
        func failure(_ result: Result<DownloadResult, any Error>) -> DownloadError? {
            guard case .failure(let error) = result else { return nil }
            return error as? DownloadError
        }
        // An unknown id is not waited for.
        let unknown = await manager.results(of: [DownloadID("no-such-download")])
        #expect(failure(unknown[0])?.code == .notFound)
        try await manager.resume(ids[0])
        try await manager.resume(ids[1])
        // The fourth stays paused until it is removed: the removal ends the wait (else it would last until the
        // test's time limit), and it is not found.
        async let outcomes = manager.results(of: [ids[0], ids[1], ids[3]])
        for await event in manager.events(for: ids[1]) { _ = event }
        _ = try await manager.result(of: ids[0])
        try await manager.remove(ids[3])
        let results = await outcomes
        #expect(try results[0].get().bytes == Int64(body.count))
        #expect(failure(results[1])?.status == 404)
        #expect(failure(results[2])?.code == .notFound)
        // The third stays paused: only the shutdown ends its wait.
        async let paused = manager.results(of: [ids[2]])
        await manager.shutdown()
        #expect(failure(await paused[0])?.code == .cancelled)
    }

    @Test("a list is added in one go, in order; a duplicate in it or in the store returns the existing id")
    func batch() async throws {
        let h = try await Harness.make()
        let manager = try h.manager()
        let first = try await manager.add([request(h, "/a")])
        let added = try await manager.add([request(h, "/b"), request(h, "/a"), request(h, "/c"), request(h, "/b")])
        #expect(added.map(\.isNew) == [true, false, true, false])
        #expect(added[1].id == first[0].id)
        #expect(added[3].id == added[0].id)
        let listed = try await manager.snapshots()
        #expect(listed.map(\.url) == ["/a", "/b", "/c"].map { h.server.url($0).absoluteString })
        #expect(listed.allSatisfy { $0.state == .paused && $0.origin == .api })
        #expect(zip(listed, listed.dropFirst()).allSatisfy { $0.position < $1.position })
        await manager.shutdown()
    }

    @Test("when one item of a list cannot be added, none is, and the error names its index")
    func batchAllOrNothing() async throws {
        let h = try await Harness.make()
        let manager = try h.manager()
        var bad = request(h, "/b")
        bad.destination = .directory(h.folder + "/missing")
        do {
            _ = try await manager.add([request(h, "/a"), bad, request(h, "/c")])
            Issue.record("a list with a missing folder was added")
        } catch {
            #expect(error.index == 1)
            #expect(error.error.code == .destinationNotWritable)
            #expect(error.error.message.contains("missing"))
        }
        #expect(try await manager.snapshots().isEmpty)
        await manager.shutdown()
        // Nothing reached the store either.
        let reopened = try h.manager()
        #expect(try await reopened.snapshots().isEmpty)
        await reopened.shutdown()
    }

    @Test("pages follow the queue order, stay stable while downloads are added and moved, and filter by state")
    func paging() async throws {
        let h = try await Harness.make()
        h.server.serve("/0", .init(body: body))
        let manager = try h.manager()
        let ids = try await manager.add((0..<10).map { request(h, "/\($0)") }).map(\.id)
        let first = await manager.snapshots(in: nil, after: nil, limit: 4)
        #expect(first.downloads.map(\.id) == Array(ids[0..<4]))
        // A download moved to the top and one added at the end: the next page starts after the last one shown.
        try await manager.move(ids[8], to: .top)
        let late = try await manager.add([request(h, "/late")])[0].id
        let second = await manager.snapshots(in: nil, after: first.next, limit: 4)
        #expect(second.downloads.map(\.id) == Array(ids[4..<8]))
        let third = await manager.snapshots(in: nil, after: second.next, limit: 4)
        #expect(third.downloads.map(\.id) == [ids[9], late])
        #expect(third.next == nil)
        // The largest limit there is (aria2's tellActive asks for all so) is all of them, with no next page.
        let all = await manager.snapshots(in: nil, after: nil, limit: .max)
        #expect(all.downloads.count == 11 && all.next == nil)
        let cursorText = try #require(first.next?.text)
        #expect(DownloadManager.QueueCursor(text: cursorText) == first.next)
        #expect(DownloadManager.QueueCursor(text: "garbage") == nil)
        try await manager.resume(ids[0])
        _ = try await manager.result(of: ids[0])
        let completed = await manager.snapshots(in: [.completed], after: nil, limit: nil)
        #expect(completed.downloads.map(\.id) == [ids[0]])
        await manager.shutdown()
    }

    @Test("settings persist across managers when asked, and reach subscribers as an event")
    func settings() async throws {
        let h = try await Harness.make()
        var configuration = DownloadManager.Configuration(stateDirectory: h.stateDirectory)
        configuration.persistsSettings = true
        let manager = try DownloadManager(configuration: configuration)
        let subscription = await manager.subscribe()
        var events = subscription.makeAsyncIterator()
        guard case .snapshot(let snapshot) = await events.next()?.event else {
            Issue.record("the first event is not a snapshot")
            return
        }
        #expect(snapshot.settings == ManagerSettings())
        let changed = ManagerSettings(maxConcurrentDownloads: 5, rateLimit: 1 << 20, connectionsPerDownload: 8)
        try await manager.update(changed)
        #expect(await events.next()?.event == .settings(changed))
        await #expect(throws: DownloadError.self) {
            try await manager.update(ManagerSettings(maxConcurrentDownloads: 0))
        }
        await manager.shutdown()
        let reopened = try DownloadManager(configuration: configuration)
        #expect(await reopened.currentSettings() == changed)
        configuration.persistsSettings = false
        let unpersisted = try DownloadManager(configuration: configuration)
        #expect(await unpersisted.currentSettings() == ManagerSettings())
    }

    @Test("event ids never repeat across restarts; an id of an earlier run gets a snapshot")
    func runs() async throws {
        let h = try await Harness.make()
        h.server.serve("/a", .init(body: body))
        let first = try h.manager()
        let id = try await first.add(h.server.url("/a"), to: .file(h.path("a.bin")))
        _ = try await first.result(of: id)
        let lastOfFirst = first.lastEventID
        await first.shutdown()
        let second = try h.manager()
        #expect(second.lastEventID.run > lastOfFirst.run)
        var events = await second.subscribe(after: lastOfFirst).makeAsyncIterator()
        guard case .snapshot(let snapshot) = await events.next()?.event else {
            Issue.record("an id of an earlier run was replayed")
            return
        }
        #expect(snapshot.downloads.map(\.state) == [.completed])
        #expect(snapshot.downloads.first?.completedAt != nil)
        #expect(snapshot.stats.counts[.completed] == 1 && snapshot.stats.counts[.queued] == 0)
        await second.shutdown()
    }

    @Test("a completed download is reported once, whole, with its state; a failed one with its code and status")
    func completionOnce() async throws {
        let h = try await Harness.make()
        h.server.serve("/a", .init(body: body))
        h.server.serve("/gone", .init(body: body) { _, _ in .status(404, headers: [:]) })
        let manager = try h.manager()
        let events = manager.events()
        let a = try await manager.add(h.server.url("/a"), to: .file(h.path("a.bin")))
        let gone = try await manager.add(h.server.url("/gone"), to: .file(h.path("gone.bin")))
        _ = try await manager.result(of: a)
        _ = try? await manager.result(of: gone)
        await manager.shutdown()
        var states: [DownloadID: [DownloadState]] = [:]
        var failure: DownloadError?
        for await event in events {
            guard case .changed(let download) = event else { continue }
            states[download.id, default: []].append(download.state)
            if download.state == .failed { failure = download.error }
            if download.state == .completed {
                #expect(download.receivedBytes == Int64(body.count) && download.totalBytes == Int64(body.count))
                #expect(download.path == h.path("a.bin"))
            }
        }
        #expect(states[a]?.filter { $0 == .completed }.count == 1)
        #expect(states[gone]?.filter { $0 == .failed }.count == 1)
        #expect(failure?.code == .httpStatus && failure?.status == 404)
        let stored = try await manager.snapshot(gone)
        #expect(stored.error?.status == 404 && stored.error?.code == .httpStatus)
    }

    @Test("priority, connections and rate limit of a download change at once and stay through its run")
    func perDownloadChanges() async throws {
        let h = try await Harness.make()
        h.server.serve("/a", .init(body: body, bytesPerSecond: 100_000))
        let manager = try h.manager()
        let id = try await manager.add(h.server.url("/a"), to: .file(h.path("a.bin")))
        try await manager.setPriority(.high, for: id)
        try await manager.setConnections(2, for: id)
        try await manager.setRateLimit(1 << 20, for: id)
        await #expect(throws: DownloadError.self) { try await manager.setConnections(17, for: id) }
        _ = try await manager.result(of: id)
        let done = try await manager.snapshot(id)
        #expect(done.priority == .high && done.options.maxConnectionsPerDownload == 2 && done.rateLimit == 1 << 20)
        #expect(done.state == .completed)
        await manager.shutdown()
    }

    @Test("retry queues a failed download again; it refuses a running or completed one")
    func retry() async throws {
        let h = try await Harness.make()
        h.server.serve("/a", .init(body: body) { _, _ in .status(404, headers: [:]) })
        let manager = try h.manager()
        let id = try await manager.add(h.server.url("/a"), to: .file(h.path("a.bin")))
        _ = try? await manager.result(of: id)
        h.server.serve("/a", .init(body: body))
        try await manager.retry(id)
        _ = try await manager.result(of: id)
        #expect(h.holds("a.bin", body))
        await #expect(throws: DownloadError.self) { try await manager.retry(id) }
        #expect(try await manager.clean() == 1)
        #expect(try await manager.snapshots().isEmpty)
        await manager.shutdown()
    }

    @Test("clean forgets thousands of ended downloads (several transactions), tells each, and keeps the files")
    func cleanMany() async throws {
        let h = try await Harness.make()
        // 2,500 completed downloads in the store, as a long day of small files leaves them.
        let store = try DownloadStore(directory: h.stateDirectory)
        func record(_ id: String, position: Int, through events: [DownloadStateMachine.Event]) throws
            -> DownloadRecord
        {
            var record = StoreRowTests.queued(
                id: id, url: "http://example.com/\(id)", finalURL: nil, destination: h.path("\(id).bin"), etag: nil)
            record.queuePosition = Double(position)
            for event in events { try record.apply(event) }
            return record
        }
        let records =
            try (0..<2_500).map { try record("done-\($0)", position: $0, through: [.started, .finished]) }
            + [try record("waiting", position: 2_500, through: [.pauseRequested])]
        try store.insert(records)
        #expect(FileManager.default.createFile(atPath: h.path("done-7.bin"), contents: Data("kept".utf8)))
        let manager = try h.manager()
        let events = manager.events()
        #expect(try await manager.clean() == 2_500)
        #expect(try await manager.snapshots().map(\.id.rawValue) == ["waiting"])
        var removed = 0
        for await event in events {
            if case .removed = event { removed += 1 }
            if removed == 2_500 { break }
        }
        #expect(removed == 2_500)
        #expect(FileManager.default.contents(atPath: h.path("done-7.bin")) == Data("kept".utf8))
        await manager.shutdown()
        // Gone from the store too: a manager opened on it finds only the one waiting.
        let again = try h.manager()
        #expect(try await again.snapshots().map(\.id.rawValue) == ["waiting"])
        await again.shutdown()
    }
}
