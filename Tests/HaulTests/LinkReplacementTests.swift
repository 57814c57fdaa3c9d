import Foundation
import Haul
import HaulCore
import HaulTesting
import Synchronization
import Testing

/// Expired links and their replacement through the manager, against the fault server acting as a host of signed
/// URLs: each link serves the file until its deadline (a byte count here, so the test needs no clock), then answers
/// 403 with S3's "Request has expired" document.
@Suite("Expired links and their replacement", .teardowns)
struct LinkReplacementTests {
    let body = testBytes(3_000_000, seed: 36)

    /// Serves `bytes` at `path` as a fresh link whose ETag is `etag`.
    static func serveFresh(_ h: Harness, _ bytes: [UInt8], etag: String = "\"v1\"", at path: String = "/new") {
        var fresh = FaultServer.Resource(body: bytes)
        fresh.etag = etag
        h.server.serve(path, fresh)
    }

    /// Adds `path` on one connection and waits until it fails; returns the manager, the id and the failure.
    func expire(_ h: Harness, _ path: String, name: String = "file.bin", connections: Int = 1) async throws
        -> (DownloadManager, DownloadID, DownloadError?)
    {
        let manager = try h.manager()
        var options = DownloadOptions(maxConnectionsPerDownload: connections)
        options.maximumAttemptsWithoutProgress = 5
        let id = try await manager.add(h.server.url(path), to: .file(h.path(name)), options: options)
        var failure: DownloadError?
        do { _ = try await manager.result(of: id) } catch { failure = error as? DownloadError }
        return (manager, id, failure)
    }

    @Test("a 403 after progress ends the download as linkExpired at once, keeping its bytes; S3's body says so too")
    func expiry() async throws {
        let h = try await Harness.make()
        h.server.serve("/old", FaultServer.Resource.signed(body, deadline: 1_000_000))
        let (manager, id, failure) = try await expire(h, "/old")
        #expect(failure?.code == .linkExpired)
        #expect(
            failure?.message.hasPrefix("the link expired: give a new one") == true, "\(String(describing: failure))")
        // One 403, not a retry loop.
        #expect(h.server.requests(to: "/old").count == 2)
        let snapshot = try await manager.snapshot(id)
        #expect(snapshot.state == .failed && snapshot.receivedBytes == 1_000_000)
        await manager.shutdown()

        // Expired before a byte came: only the body tells.
        h.server.serve(
            "/gone", .init(body: body) { _, _ in .statusXML(403, body: FaultServer.Resource.expiredDocument) })
        let fresh = await h.fetchError("/gone", to: "other.bin")
        #expect(fresh?.code == .linkExpired && fresh?.message.contains("Request has expired") == true)
        // A plain 403 before any byte stays a 403.
        h.server.serve("/forbidden", .init(body: body) { _, _ in .status(403, headers: [:]) })
        #expect(await h.fetchError("/forbidden", to: "third.bin")?.code == .httpStatus)
    }

    @Test("replaced halfway by a link to the same file: no byte is fetched twice, and the file is identical")
    func sameFile() async throws {
        let h = try await Harness.make()
        h.server.serve("/old", FaultServer.Resource.signed(body, deadline: 1_200_000))
        let (manager, id, failure) = try await expire(h, "/old")
        #expect(failure?.code == .linkExpired)
        Self.serveFresh(h, body)
        try await manager.replaceURL(h.server.url("/new"), for: id)
        _ = try await manager.result(of: id)
        #expect(h.holds("file.bin", body))
        let sent = h.server.bodyBytesSent(for: "/old") + h.server.bodyBytesSent(for: "/new")
        #expect(sent == body.count, "every byte sent once: \(sent)")
        #expect(h.server.requests(to: "/new").first?.range == "bytes=1200000-")
        #expect(try await manager.snapshot(id).url == h.server.url("/new").absoluteString)
        await manager.shutdown()
    }

    @Test("adding the new link to the same path is the same download with its link replaced")
    func addedAgain() async throws {
        let h = try await Harness.make()
        h.server.serve("/old", FaultServer.Resource.signed(body, deadline: 1_000_000))
        let (manager, id, _) = try await expire(h, "/old")
        Self.serveFresh(h, body)
        let again = try await manager.add(h.server.url("/new"), to: .file(h.path("file.bin")))
        #expect(again == id)
        _ = try await manager.result(of: id)
        #expect(h.holds("file.bin", body))
        #expect(h.server.bodyBytesSent(for: "/new") == body.count - 1_000_000)
        // And once more: the same URL and path find it again, completed.
        #expect(try await manager.add(h.server.url("/new"), to: .file(h.path("file.bin"))) == id)
        #expect(try await manager.snapshots().count == 1)
        await manager.shutdown()
    }

    @Test("--refresh-command runs once per expiry and the download goes on from each link it prints, no byte twice")
    func refreshCommand() async throws {
        let h = try await Harness.make()
        h.server.serve("/old", FaultServer.Resource.signed(body, deadline: 1_000_000))
        h.server.serve("/mid", FaultServer.Resource.signed(body, deadline: 500_000))
        Self.serveFresh(h, body)
        let runs = h.folder + "/../refreshes.txt"
        let (mid, new) = (h.server.url("/mid").absoluteString, h.server.url("/new").absoluteString)
        // As a cloud CLI would: a line of chatter, then the URL signed again (the next one for each link).
        let script = """
            echo "$HAUL_ID $HAUL_URL" >> '\(runs)'; echo "signing again"
            case "$HAUL_URL" in */old) echo '\(mid)';; */mid) echo '\(new)';; esac
            """
        var notices = Notices()
        notices.refreshLink = try Hook(arguments: ["/bin/sh", "-c", script])
        let manager = try h.manager()
        await manager.setNotices(notices)
        let id = try await manager.add(
            h.server.url("/old"), to: .file(h.path("file.bin")), options: DownloadOptions(maxConnectionsPerDownload: 1))
        _ = try await manager.result(of: id)
        #expect(h.holds("file.bin", body))
        let lines = try String(contentsOfFile: runs, encoding: .utf8).split(separator: "\n")
        #expect(lines == ["\(id.rawValue) \(h.server.url("/old"))", "\(id.rawValue) \(mid)"])
        let sent = ["/old", "/mid", "/new"].reduce(0) { $0 + h.server.bodyBytesSent(for: $1) }
        #expect(sent == body.count)

        // A command whose link has expired already: it runs once, and the download fails with the expiry.
        h.server.serve(
            "/stale", .init(body: body) { _, _ in .statusXML(403, body: FaultServer.Resource.expiredDocument) })
        h.server.serve("/old2", FaultServer.Resource.signed(body, deadline: 1_000_000))
        let staleScript = "echo run >> '\(runs)'; echo '\(h.server.url("/stale"))'"
        notices.refreshLink = try Hook(arguments: ["/bin/sh", "-c", staleScript])
        await manager.setNotices(notices)
        let events = manager.events()
        let other = try await manager.add(
            h.server.url("/old2"), to: .file(h.path("other.bin")),
            options: DownloadOptions(maxConnectionsPerDownload: 1))
        await #expect(throws: DownloadError.self) { _ = try await manager.result(of: other) }
        #expect(try await manager.snapshot(other).error?.code == .linkExpired)
        #expect(try String(contentsOfFile: runs, encoding: .utf8).split(separator: "\n").count == 3)

        // A command that prints no link: the download fails with the expiry.
        h.server.serve("/old3", FaultServer.Resource.signed(body, deadline: 1_000_000))
        notices.refreshLink = try Hook(arguments: ["/bin/sh", "-c", "echo run >> '\(runs)'; echo 'no link today'"])
        await manager.setNotices(notices)
        let third = try await manager.add(
            h.server.url("/old3"), to: .file(h.path("third.bin")),
            options: DownloadOptions(maxConnectionsPerDownload: 1))
        await #expect(throws: DownloadError.self) { _ = try await manager.result(of: third) }
        #expect(try String(contentsOfFile: runs, encoding: .utf8).split(separator: "\n").count == 4)
        await manager.shutdown()
        // Each failure is told once, when it is one: an expiry the command is asked to cure is no event of its own.
        var states: [DownloadID: [DownloadState]] = [:]
        for await event in events {
            if case .changed(let download) = event, [other, third].contains(download.id) {
                states[download.id, default: []].append(download.state)
            }
        }
        for id in [other, third] {
            #expect(states[id]?.filter { $0 == .failed }.count == 1, "\(states[id] ?? [])")
            #expect(states[id]?.last == .failed, "\(states[id] ?? [])")
        }
    }

    @Test("split over several connections and replaced: each segment goes on where it stopped, no byte twice")
    func segmentedSameFile() async throws {
        let h = try await Harness.make()
        let large = testBytes(8_000_000, seed: 37)
        var old = FaultServer.Resource.signed(large, deadline: 1_500_000, requests: 3)
        old.bytesPerSecond = 4_000_000
        h.server.serve("/old", old)
        let manager = try h.manager()
        let id = try await manager.add(
            h.server.url("/old"), to: .file(h.path("file.bin")),
            options: DownloadOptions(maxConnectionsPerDownload: 4, minimumSplitSize: 1 << 20))
        await #expect(throws: DownloadError.self) { _ = try await manager.result(of: id) }
        let held = try await manager.snapshot(id)
        #expect(held.error?.code == .linkExpired && held.receivedBytes > 1_500_000)
        Self.serveFresh(h, large)
        try await manager.replaceURL(h.server.url("/new"), for: id)
        _ = try await manager.result(of: id)
        #expect(h.holds("file.bin", large))
        let sent = h.server.bodyBytesSent(for: "/old") + h.server.bodyBytesSent(for: "/new")
        #expect(sent == large.count, "every byte sent once: \(sent)")
        await manager.shutdown()
    }

    @Test("a new link with another ETag: the bytes before the offset are compared, then kept")
    func otherValidator() async throws {
        let h = try await Harness.make()
        h.server.serve("/old", FaultServer.Resource.signed(body, deadline: 1_200_000))
        let (manager, id, _) = try await expire(h, "/old")
        Self.serveFresh(h, body, etag: "\"other-host\"", at: "/new")
        try await manager.replaceURL(h.server.url("/new"), for: id)
        _ = try await manager.result(of: id)
        #expect(h.holds("file.bin", body))
        // Another version answers the first request's If-Match with 412 and no body: only the compared 64 KiB come twice.
        #expect(h.server.requests(to: "/new").first?.status == 412)
        let sent = h.server.bodyBytesSent(for: "/old") + h.server.bodyBytesSent(for: "/new")
        #expect(sent - body.count == 65_536, "fetched twice: \(sent - body.count)")
        let ranges = h.server.requests(to: "/new").compactMap(\.range)
        #expect(ranges.contains("bytes=\(1_200_000 - 65_536)-"), "\(ranges)")
        await manager.shutdown()
    }

    @Test("a new link to a different file of the same size: the download starts again and says why")
    func differentFile() async throws {
        let h = try await Harness.make()
        h.server.serve("/old", FaultServer.Resource.signed(body, deadline: 1_200_000))
        let (manager, id, _) = try await expire(h, "/old")
        let other = testBytes(body.count, seed: 99)
        Self.serveFresh(h, other, etag: "\"v2\"", at: "/new")
        // Every download's events: the stream of a failed one alone would end at once.
        let events = manager.events()
        // The restarts told until the download completes.
        let watcher = Task { () -> [String] in
            var reasons: [String] = []
            for await event in events {
                switch event {
                case .restarted(id, let reason): reasons.append(reason)
                case .changed(let snapshot) where snapshot.id == id && snapshot.state == .completed: return reasons
                default: break
                }
            }
            return reasons
        }
        try await manager.replaceURL(h.server.url("/new"), for: id)
        _ = try await manager.result(of: id)
        #expect(h.holds("file.bin", other))
        let reasons = await watcher.value
        #expect(reasons == ["the bytes held differ from the server's; fetching it again from 0"], "\(reasons)")

        // Another length: said at the first answer.
        h.server.serve("/old2", FaultServer.Resource.signed(body, deadline: 1_200_000))
        let (second, id2, _) = try await expire(h, "/old2", name: "short.bin")
        let shorter = Array(body.prefix(2_000_000))
        Self.serveFresh(h, shorter, etag: "\"v1\"", at: "/short")
        try await second.replaceURL(h.server.url("/short"), for: id2)
        _ = try await second.result(of: id2)
        #expect(h.holds("short.bin", shorter))
        await manager.shutdown()
        await second.shutdown()
    }
}
