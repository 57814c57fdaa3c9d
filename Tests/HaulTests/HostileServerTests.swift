import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

/// The engine against every server behaviour of HOSTILE.md 1–24, through the fault server.
@Suite("Hostile servers", .timeLimit(.minutes(2)), .teardowns)
struct HostileServerTests {
    static let size = 300_000
    static let cut = 120_000
    let body = testBytes(size)

    /// The default idle timeout (30 s): a `.stall(afterBytes:)` fault cuts the transfer at exactly that many bytes,
    /// since the harness's idle clock jumps past the timeout only once every byte sent is in the file. No test waits
    /// it out.
    static var stallOptions: DownloadOptions { DownloadOptions() }

    // MARK: Ranges and responses (1–11)

    @Test("1: a cut download resumes with a 206 and appends")
    func appendsPartial() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body) { index, _ in index == 0 ? .stall(afterBytes: Self.cut) : nil })
        let result = try await h.fetch("/f", options: Self.stallOptions)
        #expect(h.holds("file.bin", body))
        let requests = h.server.requests(to: "/f")
        #expect(requests.count == 2)
        #expect(requests[1].range == "bytes=\(Self.cut)-")
        #expect(requests[1].headers["if-range"] == "\"v1\"")
        #expect(requests[1].status == 206)
        #expect(h.server.bodyBytesSent(for: "/f") == Self.size, "no byte fetched twice")
        #expect(requests.allSatisfy { $0.headers["accept-encoding"] == "identity" })
        #expect(result.bytes == Int64(Self.size))
        #expect(!h.exists("file.bin.part"))
    }

    @Test("2: part already complete, 416 */L with L = part length: success, nothing re-fetched")
    func completeBy416() async throws {
        let h = try await Harness.make()
        // A chunked answer that stalls after every byte, before its last chunk: all bytes held, length never announced.
        h.server.serve("/f", .init(body: body) { index, _ in index == 0 ? .stallChunked(afterBytes: Self.size) : nil })
        _ = try await h.fetch("/f", options: Self.stallOptions)
        #expect(h.holds("file.bin", body))
        let requests = h.server.requests(to: "/f")
        #expect(requests.map(\.status) == [200, 416])
        #expect(requests[1].range == "bytes=\(Self.size)-")
        #expect(h.server.bodyBytesSent(for: "/f") == Self.size)
    }

    @Test("3, 4: 416 with a smaller total, or without Content-Range, restarts")
    func bad416Restarts() async throws {
        for answer in ["bytes */\(Self.size - 10)", nil] {
            let h = try await Harness.make()
            h.server.serve(
                "/f",
                .init(body: body) { index, _ in
                    switch index {
                    case 0: .stallChunked(afterBytes: Self.size)
                    case 1: .rangeNotSatisfiable(contentRange: answer)
                    default: nil
                    }
                })
            _ = try await h.fetch("/f", options: Self.stallOptions)
            #expect(h.holds("file.bin", body))
            let requests = h.server.requests(to: "/f")
            #expect(requests.count == 3)
            #expect(requests[2].range == nil, "restart asks for the whole file")
            await h.stop()
        }
    }

    @Test("5: range ignored: the full 200 body is written from 0, with no extra request")
    func rangeIgnored() async throws {
        let h = try await Harness.make()
        h.server.serve(
            "/f",
            .init(body: body) { index, _ in
                index == 0 ? .cut(afterBytes: Self.cut) : index == 1 ? .ignoreRange : nil
            })
        _ = try await h.fetch("/f")
        #expect(h.holds("file.bin", body))
        #expect(h.server.requests(to: "/f").count == 2)
    }

    @Test(
        "6, 7, 9, 10: unusable 206 answers are never written",
        arguments: [
            FaultServer.Fault.wrongStart(shift: -1000), .wrongStart(shift: 1000), .partialWithContentRange(nil),
            .partialWithContentRange("bytes */1024"), .partialWithContentRange("bytes 0-9/*"),
            .partialWithContentRange("bytes 130000-120000/300000"),
            .partialWithContentRange("bytes 120000-300000/300000"),
            .partialWithContentRange("bytes 120000-99999999999999999999/99999999999999999999"),
            .partialWithContentRange("items 120000-299999/300000"), .wrongTotal(delta: 1), .multipart,
        ]
    )
    func unusablePartials(fault: FaultServer.Fault) async throws {
        let h = try await Harness.make()
        h.server.serve(
            "/f",
            .init(body: body) { index, _ in
                index == 0 ? .cut(afterBytes: Self.cut) : index == 1 ? fault : nil
            })
        _ = try await h.fetch("/f")
        #expect(h.holds("file.bin", body))
        let requests = h.server.requests(to: "/f")
        #expect(requests.count == 3)
        #expect(requests[2].range == nil)
    }

    @Test("a declined 206 is not read on: its connection closes at once, not at the body's end")
    func declinedBodyStops() async throws {
        // A file's 200 or 206 is read on while the loop decides (`Connector.readsAtOnce`); this one is declined. The
        // server sends 4 MiB a second and counts what went out until the client closed.
        let large = testBytes(16 << 20)
        // No jumps of the idle clock: the cut closes its connection, and a jump would make the last answer, which
        // takes four seconds, look idle.
        let h = try await Harness.make(jumpsPastStalls: false)
        var resource = FaultServer.Resource(body: large) { index, _ in
            index == 0 ? .cut(afterBytes: Self.cut) : index == 1 ? .wrongStart(shift: 1000) : nil
        }
        resource.bytesPerSecond = 4 << 20
        h.server.serve("/f", resource)
        // One connection: the ramp would add more to a server that throttles each one.
        _ = try await h.fetch("/f", options: DownloadOptions(maxConnectionsPerDownload: 1))
        #expect(h.holds("file.bin", large))
        let requests = h.server.requests(to: "/f")
        // The cut, the declined 206, then the whole file; on a loaded machine perhaps one more request for its end
        // (the throttled server closes its connection once it has queued the last bytes, dropping what a slow reader
        // had not taken yet).
        try #require(requests.count >= 3)
        #expect(requests[1].status == 206 && requests[1].range == "bytes=\(Self.cut)-")
        // Read to its end, the declined answer would have sent all 16 MiB but the first 120 KB, over four seconds.
        #expect(requests[1].bodyBytesSent < 8 << 20, "the declined body was read on: \(requests[1].bodyBytesSent)")
    }

    @Test("8: a 206 to a request without Range is rejected")
    func partialWithoutRange() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body) { _, _ in .partialWithoutRange })
        let error = await h.fetchError("/f")
        #expect(error?.code == .invalidResponse)
        #expect(error?.message.contains("206") == true)
        #expect(!h.exists("file.bin"))
    }

    @Test("11: Accept-Ranges none: no Range is ever sent; a cut restarts from 0")
    func rangesRefused() async throws {
        let h = try await Harness.make()
        h.server.serve(
            "/f",
            .init(body: body, acceptsRanges: false, refusesRangesExplicitly: true) { index, _ in
                index == 0 ? .cut(afterBytes: Self.cut) : nil
            })
        let manager = try h.manager()
        let id = try await manager.add(h.server.url("/f"), to: .file(h.path("file.bin")))
        _ = try await manager.result(of: id)
        #expect(try await manager.snapshot(id).isResumable == false)
        await manager.shutdown()
        #expect(h.holds("file.bin", body))
        #expect(h.server.requests(to: "/f").allSatisfy { $0.range == nil })
    }

    // MARK: Validators (12–16)

    @Test("12: ETag changed: If-Range fails, the new version is written from 0")
    func changedFile() async throws {
        let h = try await Harness.make()
        let newBody = testBytes(250_000, seed: 2)
        let server = h.server
        h.server.serve(
            "/f",
            .init(body: body) { index, _ in
                if index == 0 {
                    server.serve("/f", .init(body: newBody, etag: "\"v2\""))
                    return .cut(afterBytes: Self.cut)
                }
                return nil
            })
        _ = try await h.fetch("/f")
        #expect(h.holds("file.bin", newBody))
    }

    @Test("12: ETag changed and the server ignores If-Range: the 206 is refused, never mixed")
    func changedFileBrokenIfRange() async throws {
        let h = try await Harness.make()
        let newBody = testBytes(Self.size, seed: 3)
        let server = h.server
        h.server.serve(
            "/f",
            .init(body: body) { index, _ in
                if index == 0 {
                    server.serve("/f", .init(body: newBody, etag: "\"v2\"", ignoresIfRange: true))
                    return .cut(afterBytes: Self.cut)
                }
                return nil
            })
        _ = try await h.fetch("/f")
        #expect(h.holds("file.bin", newBody))
    }

    @Test("13, 14, 15: weak or no validators: no If-Range, the overlap is compared")
    func weakValidators() async throws {
        let variants: [(String?, String?, String?)] = [
            ("W/\"weak\"", nil, nil),
            (nil, "Mon, 01 Jan 2024 00:00:00 GMT", "Mon, 01 Jan 2024 00:00:30 GMT"),
            (nil, nil, nil),
        ]
        for (etag, lastModified, date) in variants {
            let h = try await Harness.make()
            h.server.serve(
                "/f",
                .init(body: body, etag: etag, lastModified: lastModified, date: date) { index, _ in
                    index == 0 ? .stall(afterBytes: Self.cut) : nil
                })
            _ = try await h.fetch("/f", options: Self.stallOptions)
            #expect(h.holds("file.bin", body))
            let requests = h.server.requests(to: "/f")
            #expect(requests.count == 2)
            #expect(requests[1].headers["if-range"] == nil)
            #expect(requests[1].range == "bytes=\(Self.cut - 65_536)-")
            await h.stop()
        }
    }

    @Test("15: no validator and the bytes changed: the overlap differs, restart from 0")
    func overlapMismatch() async throws {
        let h = try await Harness.make()
        let newBody = testBytes(Self.size, seed: 4)
        let server = h.server
        h.server.serve(
            "/f",
            .init(body: body, etag: nil, lastModified: nil) { index, _ in
                if index == 0 {
                    server.serve("/f", .init(body: newBody, etag: nil, lastModified: nil))
                    return .cut(afterBytes: Self.cut)
                }
                return nil
            })
        _ = try await h.fetch("/f")
        #expect(h.holds("file.bin", newBody))
        let requests = h.server.requests(to: "/f")
        #expect(requests.count == 3)
        #expect(requests[2].range == nil)
    }

    @Test("16: redirect on resume: the Range goes to the final target")
    func redirectOnResume() async throws {
        let h = try await Harness.make()
        h.server.serve("/start", .init(body: []) { _, _ in .redirect(to: "/target") })
        h.server.serve("/target", .init(body: body) { index, _ in index == 0 ? .stall(afterBytes: Self.cut) : nil })
        _ = try await h.fetch("/start", options: Self.stallOptions)
        #expect(h.holds("file.bin", body))
        let target = h.server.requests(to: "/target")
        #expect(target.count == 2)
        #expect(target[1].range == "bytes=\(Self.cut)-")
        // The resume starts from the URL the user gave (redirect targets may be short-lived), Range and all.
        #expect(h.server.requests(to: "/start").map(\.range) == [nil, "bytes=\(Self.cut)-"])
    }

    @Test("16: a redirect target that then refuses ranges restarts cleanly")
    func redirectTargetRefusesRanges() async throws {
        let h = try await Harness.make()
        h.server.serve("/start", .init(body: []) { _, _ in .redirect(to: "/target") })
        h.server.serve(
            "/target",
            .init(body: body) { index, _ in
                index == 0 ? .cut(afterBytes: Self.cut) : .ignoreRange
            })
        _ = try await h.fetch("/start")
        #expect(h.holds("file.bin", body))
    }

    // MARK: Transport (17–24)

    @Test("17, 23: connection closed mid-body, Content-Length or chunked: resumed at once from exactly what was sent")
    func closedMidBody() async throws {
        for fault in [FaultServer.Fault.cut(afterBytes: Self.cut), .cutChunked(afterBytes: Self.cut)] {
            let h = try await Harness.make()
            h.server.serve("/f", .init(body: body) { index, _ in index < 3 ? fault : nil })
            _ = try await h.fetch("/f")
            #expect(h.holds("file.bin", body))
            let requests = h.server.requests(to: "/f")
            #expect(requests.count >= 2)
            #expect(h.clock.sleeps.isEmpty, "a break after bytes arrived is resumed at once, with no backoff")
            // Every byte the server sent before it closed was written: each request starts exactly there.
            var sentBefore = 0
            for request in requests {
                let start = request.range.flatMap { Int($0.dropFirst(6).dropLast()) } ?? 0
                #expect(start == sentBefore)
                sentBefore += request.bodyBytesSent
            }
            #expect(h.server.bodyBytesSent(for: "/f") == Self.size, "no byte fetched twice")
            await h.stop()
        }
    }

    @Test(
        "17: a server that cuts every answer after 3 MiB: 16 MiB cost exactly 16 MiB, each request where the last stopped"
    )
    func noWastedByte() async throws {
        let h = try await Harness.make()
        let body = testBytes(16 << 20, seed: 17)
        h.server.serve("/f", .init(body: body) { _, _ in .cut(afterBytes: 3 << 20) })
        var options = DownloadOptions()
        options.maxConnectionsPerDownload = 1
        _ = try await h.fetch("/f", options: options)
        #expect(h.holds("file.bin", body))
        let requests = h.server.requests(to: "/f")
        #expect(requests.count == 6)
        #expect(requests.dropFirst().map(\.range) == (1...5).map { "bytes=\($0 * (3 << 20))-" })
        #expect(h.server.bodyBytesSent(for: "/f") == 16 << 20)
    }

    @Test("18: headers then silence: abandoned after the idle timeout, then resumed")
    func stalled() async throws {
        let h = try await Harness.make()
        h.server.serve(
            "/f",
            .init(body: body) { index, _ in
                index == 0 ? .stall(afterBytes: Self.cut) : index == 1 ? .stallBeforeHead : nil
            })
        _ = try await h.fetch("/f", options: Self.stallOptions)
        #expect(h.holds("file.bin", body))
        let requests = h.server.requests(to: "/f")
        #expect(requests.count == 3)
        #expect(requests[2].range == "bytes=\(Self.cut)-")
    }

    @Test("19: 503 and 429 with Retry-After wait that long, then resume")
    func retryAfter() async throws {
        for status in [503, 429] {
            let h = try await Harness.make()
            h.server.serve(
                "/f",
                .init(body: body) { index, _ in
                    index == 0
                        ? .stall(afterBytes: Self.cut)
                        : index == 1 ? .status(status, headers: ["Retry-After": "7"]) : nil
                })
            _ = try await h.fetch("/f", options: Self.stallOptions)
            #expect(h.holds("file.bin", body))
            #expect(h.clock.sleeps.contains(.seconds(7)))
            #expect(h.server.requests(to: "/f").last?.range == "bytes=\(Self.cut)-")
            await h.stop()
        }
    }

    @Test("19: a retry's error is shown while the download waits, and is over once bytes arrive again")
    func retryErrorEnds() async throws {
        let h = try await Harness.make()
        h.server.serve(
            "/f", .init(body: body) { index, _ in index == 0 ? .status(503, headers: ["Retry-After": "2"]) : nil })
        let manager = try h.manager()
        let events = manager.events()
        let id = try await manager.add(h.server.url("/f"), to: .file(h.path("file.bin")))
        try await manager.start()
        var seen: [String] = []
        for await event in events {
            switch event {
            case .retrying(id, let error, _): seen.append("retrying \(error.status ?? 0)")
            case .changed(let download) where download.id == id:
                seen.append(
                    "\(download.state) \(download.error == nil ? "fine" : "failing")"
                        + (download.state == .running ? " \(download.connections)" : ""))
            default: break
            }
            if seen.last?.hasPrefix("completed") == true { break }
        }
        let retry = try #require(seen.firstIndex(of: "retrying 503"), "\(seen)")
        // While it waits, no connection is open; once bytes arrive again, the error is over.
        #expect(seen[retry...].first { $0.hasPrefix("running") } == "running failing 0", "\(seen)")
        #expect(seen[retry...].contains { $0.hasPrefix("running fine") }, "\(seen)")
        #expect(seen.last == "completed fine", "\(seen)")
        #expect(h.holds("file.bin", body))
        await manager.shutdown()
    }

    @Test("19: 401, 403, 404, 410 are not retried and the message names the status", arguments: [401, 403, 404, 410])
    func finalStatuses(status: Int) async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body) { _, _ in .status(status, headers: [:]) })
        let error = await h.fetchError("/f")
        #expect(error?.code == .httpStatus)
        #expect(error?.status == status)
        #expect(error?.message.contains("\(status)") == true)
        #expect(h.server.requests(to: "/f").count == 1)
        #expect(!h.exists("file.bin"))
    }

    @Test("20: retries are bounded")
    func boundedRetries() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body) { _, _ in .status(500, headers: [:]) })
        let error = await h.fetchError("/f")
        #expect(error?.status == 500)
        #expect(error?.message.contains("gave up after 5 attempts") == true)
        #expect(h.server.requests(to: "/f").count == 5)
        #expect(h.clock.sleeps == [.seconds(1), .seconds(2), .seconds(4), .seconds(8)])
    }

    @Test("20: progress resets the count: a server that cuts every answer still finishes")
    func progressResetsRetries() async throws {
        let h = try await Harness.make()
        h.server.serve(
            "/f",
            .init(body: body) { _, request in
                let start = Int(request.range?.dropFirst(6).split(separator: "-").first ?? "0") ?? 0
                return start + 60_000 >= Self.size ? nil : .stall(afterBytes: 60_000)
            })
        var options = Self.stallOptions
        options.maximumAttemptsWithoutProgress = 2
        let error = await h.fetchError("/f", options: options)
        #expect(error == nil)
        #expect(h.holds("file.bin", body))
        #expect(h.server.requests(to: "/f").count == 5, "four cut answers, each after progress, then the rest")
    }

    @Test("21: Content-Length and chunked together: chunked wins")
    func lengthAndChunked() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body) { index, _ in index == 0 ? .lengthAndChunked : nil })
        let outcome = await h.fetchError("/f")
        // Either chunked framing wins and the file is right, or the answer is refused; never a file of the wrong size.
        if outcome == nil {
            #expect(h.holds("file.bin", body))
        } else {
            #expect(!h.exists("file.bin"))
        }
    }

    @Test(
        "21: two different Content-Lengths, or a negative one, are rejected",
        arguments: [FaultServer.Fault.conflictingLengths, .negativeLength])
    func badLengths(fault: FaultServer.Fault) async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body) { _, _ in fault })
        let error = await h.fetchError("/f", options: DownloadOptions(maximumAttemptsWithoutProgress: 2))
        #expect(error != nil)
        #expect(!h.exists("file.bin"))
    }

    @Test("22: an encoded body although identity was asked: fails clearly, nothing saved")
    func gzip() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body) { _, _ in .gzipEncoding })
        let error = await h.fetchError("/f")
        #expect(error?.code == .contentEncoding)
        #expect(error?.message.contains("gzip") == true)
        #expect(!h.exists("file.bin"))
        #expect(h.server.requests(to: "/f").count == 1)
    }

    @Test("24: a body longer than announced is never saved past the announced end")
    func longerThanAnnounced() async throws {
        let h = try await Harness.make()
        h.server.serve(
            "/f",
            .init(body: body) { index, _ in
                index == 0 ? .cut(afterBytes: Self.cut) : index == 1 ? .longerThanAnnounced(extra: 5000) : nil
            })
        _ = try await h.fetch("/f")
        #expect(h.holds("file.bin", body))
    }
}
