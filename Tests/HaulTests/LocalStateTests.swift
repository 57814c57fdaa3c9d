import Foundation
import HaulCore
import HaulTesting
import Testing

@testable import Haul

/// HOSTILE.md 28–35 for one download, checksums, and the destination rules.
@Suite("Local state", .timeLimit(.minutes(2)), .teardowns)
struct LocalStateTests {
    static let size = 300_000
    static let cut = 120_000
    let body = testBytes(size)

    /// Leaves a failed download with exactly `cut` bytes durable in `file.bin.part`: the first answer stalls after
    /// them (a break after progress is resumed at once), the second sends nothing, which with one attempt allowed
    /// without progress fails.
    func leavePartial(_ h: Harness) async throws {
        h.server.serve(
            "/f",
            .init(body: body) { index, _ in
                index == 0 ? .stall(afterBytes: Self.cut) : index == 1 ? .stallBeforeHead : nil
            })
        // The default idle timeout (30 s): the harness's idle clock jumps past it once each answer goes quiet.
        let options = DownloadOptions(maximumAttemptsWithoutProgress: 1)
        let error = await h.fetchError("/f", options: options)
        #expect(error?.code == .idleTimeout)
        #expect(FileSystemProbe.size(h.path("file.bin.part")) == Int64(Self.cut))
        #expect(!h.exists("file.bin"))
    }

    @Test("28: part file shorter than the stored offset: resume from its real length")
    func partShorter() async throws {
        let h = try await Harness.make()
        try await leavePartial(h)
        try FileSystemProbe.truncate(h.path("file.bin.part"), to: 50_000)
        _ = try await h.fetch("/f")
        #expect(h.holds("file.bin", body))
        #expect(h.server.requests(to: "/f").last?.range == "bytes=50000-")
    }

    @Test("29: part file longer than the stored offset: truncated to the offset")
    func partLonger() async throws {
        let h = try await Harness.make()
        try await leavePartial(h)
        let handle = FileHandle(forWritingAtPath: h.path("file.bin.part"))!
        handle.seekToEndOfFile()
        handle.write(Data(repeating: 0xEE, count: 5000))
        try handle.close()
        _ = try await h.fetch("/f")
        #expect(h.holds("file.bin", body))
        #expect(h.server.requests(to: "/f").last?.range == "bytes=\(Self.cut)-")
    }

    @Test("30: part file deleted while the row holds an offset: start again")
    func partDeleted() async throws {
        let h = try await Harness.make()
        try await leavePartial(h)
        try FileManager.default.removeItem(atPath: h.path("file.bin.part"))
        _ = try await h.fetch("/f")
        #expect(h.holds("file.bin", body))
        #expect(h.server.requests(to: "/f").last?.range == nil)
    }

    @Test("31: part file with no store row: never written to; handed over with -c, compared before appending")
    func partWithoutRecord() async throws {
        for (bytes, restarts) in [(Array(body.prefix(Self.cut)), false), (testBytes(Self.cut, seed: 9), true)] {
            let h = try await Harness.make()
            h.server.serve("/f", .init(body: body))
            _ = FileManager.default.createFile(atPath: h.path("file.bin.part"), contents: Data(bytes))
            let error = await h.fetchError("/f")
            #expect(error?.code == .untrustedFile)
            #expect(error?.message.contains("file.bin.part was not made by this download") == true, "\(error!)")
            #expect(error?.message.contains("-c") == true)
            #expect(h.contents("file.bin.part") == bytes, "left as it was")
            #expect(h.server.requests.isEmpty, "nothing fetched")
            _ = try await h.fetch("/f", options: DownloadOptions(continuePartial: true))
            #expect(h.holds("file.bin", body))
            let requests = h.server.requests(to: "/f")
            #expect(requests.first?.range == "bytes=\(Self.cut - 65_536)-")
            #expect(requests.first?.headers["if-range"] == nil)
            #expect(requests.count == (restarts ? 2 : 1))
            await h.stop()
        }
    }

    @Test("a row stored before Haul recorded identities: its part file is compared with the server, then resumed")
    func earlierRow() async throws {
        let h = try await Harness.make()
        try await leavePartial(h)
        let store = try DownloadStore(directory: h.stateDirectory)
        var record = try #require(try store.allRecords().first)
        #expect(record.folderIdentity != nil && record.partIdentity != nil)
        record.folderIdentity = nil
        record.partIdentity = nil
        try store.save(record)
        store.flush()
        _ = try await h.fetch("/f")
        #expect(h.holds("file.bin", body))
        #expect(h.server.requests(to: "/f").last?.range == "bytes=\(Self.cut - 65_536)-")
    }

    @Test("32: an unreadable state database gives a clear error naming it")
    func unreadableStore() async throws {
        let h = try await Harness.make()
        try FileManager.default.createDirectory(atPath: h.stateDirectory, withIntermediateDirectories: true)
        let path = h.stateDirectory + "/haul.sqlite"
        _ = FileManager.default.createFile(atPath: path, contents: Data(repeating: 0x42, count: 4096))
        do {
            _ = try h.manager()
            Issue.record("expected an error")
        } catch {
            let error = error as? DownloadError
            #expect(error?.code == .store)
            #expect(error?.message.contains(path) == true)
            #expect(error?.message.contains("not a Haul database") == true)
            #expect(error?.message.contains("move it aside to begin a new one") == true, "\(String(describing: error))")
        }
        #expect(FileManager.default.contents(atPath: path) == Data(repeating: 0x42, count: 4096), "nothing lost")
    }

    @Test("38: a symbolic link at the part file's name is never followed; the file it leads to is untouched")
    func linkedPart() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body))
        let victim = h.path("../victim")
        _ = FileManager.default.createFile(atPath: victim, contents: Data("victim".utf8))
        try FileManager.default.createSymbolicLink(atPath: h.path("file.bin.part"), withDestinationPath: victim)
        let error = await h.fetchError("/f")
        #expect(error?.code == .untrustedFile)
        #expect(error?.message.contains("file.bin.part is a symbolic link; Haul will not write through it") == true)
        #expect(FileManager.default.contents(atPath: victim) == Data("victim".utf8))
        #expect(!h.exists("file.bin"))
        #expect(h.server.requests.isEmpty)
        try FileManager.default.removeItem(atPath: h.path("file.bin.part"))
        _ = try await h.fetch("/f")
        #expect(h.holds("file.bin", body))
    }

    @Test("34: destination folder missing: a clear error before any byte is fetched")
    func missingFolder() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body))
        let error = await h.fetchError("/f", to: "missing/file.bin")
        #expect(error?.code == .destinationNotWritable)
        #expect(error?.message.contains("does not exist") == true)
        #expect(h.server.requests.isEmpty)
    }

    @Test("35: one writer per part file: a second lock on it is refused")
    func oneWriter() async throws {
        let h = try await Harness.make()
        let folder = DownloadFolder(try HeldFolder.open(h.folder))
        guard case .opened(let first, isNew: true) = try folder.openPart("x.part", recorded: nil, adopting: false)
        else {
            Issue.record("the part file was not made")
            return
        }
        do {
            _ = try folder.openPart("x.part", recorded: first.identity, adopting: false)
            Issue.record("a second writer was let in")
        } catch {
            #expect(error.code == .locked)
        }
    }

    @Test("35: two managers asked for the same destination: the second refuses, the file is written once")
    func twoManagers() async throws {
        let h = try await Harness.make()
        // The first download's answer is held back after some bytes: it surely runs while the second is asked for.
        h.server.serve("/f", .init(body: body) { index, _ in index == 0 ? .hold(afterBytes: 100_000) : nil })
        let first = try h.manager()
        let firstID = try await first.add(h.server.url("/f"), to: .file(h.path("file.bin")))
        for await event in first.events(for: firstID) {
            if case .progress = event { break }
        }
        var configuration = DownloadManager.Configuration(stateDirectory: nil)
        configuration.startsStoredDownloads = false
        let second = try DownloadManager(configuration: configuration)
        let secondID = try await second.add(h.server.url("/f"), to: .file(h.path("file.bin")))
        await #expect(throws: DownloadError.self) { try await second.result(of: secondID) }
        do {
            _ = try await second.result(of: secondID)
        } catch let error as DownloadError {
            #expect(error.code == .locked)
        }
        h.server.release()
        _ = try await first.result(of: firstID)
        await first.shutdown()
        #expect(h.holds("file.bin", body))
    }

    // MARK: Checksums

    @Test func checksumMatches() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body))
        let sha = sha256Hex(body)
        let result = try await h.fetch("/f", options: DownloadOptions(checksum: try Checksum(parsing: "sha256=\(sha)")))
        #expect(result.sha256 == sha)
        #expect(h.holds("file.bin", body))
    }

    @Test("37: checksum mismatch: the final name never holds the file")
    func checksumMismatch() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body))
        let wrong = try Checksum(parsing: "sha256=" + String(repeating: "0", count: 64))
        let error = await h.fetchError("/f", options: DownloadOptions(checksum: wrong))
        #expect(error?.code == .checksumMismatch)
        #expect(error?.message.contains("expected sha256=0000") == true)
        #expect(!h.exists("file.bin"))
        #expect(!h.exists("file.bin.part"))
        #expect(h.server.requests(to: "/f").count == 1, "a fresh download is not fetched twice")
    }

    @Test("37: after a resumed download, one fresh full fetch is tried before failing")
    func checksumAfterResume() async throws {
        let h = try await Harness.make()
        try await leavePartial(h)
        // Damage a byte the planner cannot see: only the checksum can.
        let handle = FileHandle(forUpdatingAtPath: h.path("file.bin.part"))!
        handle.seek(toFileOffset: 1000)
        handle.write(Data([body[1000] ^ 0xFF]))
        try handle.close()
        let options = DownloadOptions(checksum: try Checksum(parsing: "sha256=\(sha256Hex(body))"))
        _ = try await h.fetch("/f", options: options)
        #expect(h.holds("file.bin", body))
        let requests = h.server.requests(to: "/f")
        #expect(requests.suffix(2).map(\.range) == ["bytes=\(Self.cut)-", nil])
    }

    // MARK: Destinations

    @Test("27: a file Haul did not create is never overwritten unless asked")
    func existingFile() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body))
        _ = FileManager.default.createFile(atPath: h.path("file.bin"), contents: Data("mine".utf8))
        let error = await h.fetchError("/f")
        #expect(error?.code == .destinationExists)
        #expect(error?.message.contains("--overwrite") == true)
        #expect(h.contents("file.bin") == Array("mine".utf8))
        #expect(h.server.requests.isEmpty)
        _ = try await h.fetch("/f", options: DownloadOptions(overwrite: true))
        #expect(h.holds("file.bin", body))
        // A link there is refused as a link at once, overwrite or not: asking to overwrite would not help.
        try FileManager.default.createSymbolicLink(atPath: h.path("link.bin"), withDestinationPath: h.path("file.bin"))
        let linked = await h.fetchError("/f", to: "link.bin")
        #expect(linked?.code == .untrustedFile && linked?.message.contains("is a symbolic link") == true)
    }

    @Test("-c adopts an existing file after comparing an overlap; a different file restarts")
    func continueExisting() async throws {
        for (bytes, matches) in [(Array(body.prefix(Self.cut)), true), (testBytes(Self.cut, seed: 7), false)] {
            let h = try await Harness.make()
            h.server.serve("/f", .init(body: body))
            _ = FileManager.default.createFile(atPath: h.path("file.bin"), contents: Data(bytes))
            let result = try await h.fetch("/f", options: DownloadOptions(continuePartial: true))
            #expect(h.holds("file.bin", body))
            #expect(h.server.requests(to: "/f").first?.range == "bytes=\(Self.cut - 65_536)-")
            #expect(h.server.requests(to: "/f").count == (matches ? 1 : 2))
            // A different file is fetched whole: none of its bytes were kept.
            #expect(result.resumedFrom == (matches ? Int64(Self.cut) : 0))
            await h.stop()
        }
    }

    @Test("-c refuses a file with a hole (a segmented part file whose record is gone): nothing fetched, left as it is")
    func continueRefusesHoles() async throws {
        for name in ["file.bin", "file.bin.part"] {
            let h = try await Harness.make()
            h.server.serve("/f", .init(body: body))
            // The first and the third of four segments written, as several connections leave them.
            let path = h.path(name)
            _ = FileManager.default.createFile(atPath: path, contents: nil)
            let handle = try #require(FileHandle(forWritingAtPath: path))
            try handle.write(contentsOf: Data(body[0..<8192]))
            try handle.seek(toOffset: 200_704)
            try handle.write(contentsOf: Data(body[200_704..<240_000]))
            try handle.close()
            let before = h.contents(name)
            let error = await h.fetchError("/f", options: DownloadOptions(continuePartial: true))
            #expect(error?.code == .untrustedFile)
            #expect(error?.message.contains("has a hole at byte") == true, "\(error?.message ?? "none")")
            #expect(h.contents(name) == before, "left as it is, under its own name")
            #expect(h.server.requests.isEmpty)
            await h.stop()
        }
    }

    @Test("-c: a file the server cannot give yet stays under its name as it was, empty or not; -c later continues it")
    func continueGivesBack() async throws {
        for bytes in [Array(body.prefix(Self.cut)), []] {
            let h = try await Harness.make()
            h.server.serve("/f", .init(body: body) { index, _ in index == 0 ? .status(404, headers: [:]) : nil })
            _ = FileManager.default.createFile(atPath: h.path("file.bin"), contents: Data(bytes))
            let inode = FileSystemProbe.inode(h.path("file.bin"))
            let error = await h.fetchError("/f", options: DownloadOptions(continuePartial: true))
            #expect(error?.code == .httpStatus && error?.status == 404)
            #expect(h.contents("file.bin") == bytes, "\(bytes.count) bytes: as it was")
            #expect(FileSystemProbe.inode(h.path("file.bin")) == inode, "the same file, not a copy")
            #expect(!h.exists("file.bin.part"))
            // The same download again: the row forgot the file, and -c hands it over again.
            let result = try await h.fetch("/f", options: DownloadOptions(continuePartial: true))
            #expect(h.holds("file.bin", body))
            #expect(result.resumedFrom == Int64(bytes.count))
            #expect(FileSystemProbe.inode(h.path("file.bin")) == inode)
            await h.stop()
        }
    }

    @Test(
        "-c: paused or cancelled before a byte is written into it, the file handed over goes back",
        arguments: [false, true])
    func continuePausedGivesBack(cancelling: Bool) async throws {
        let h = try await Harness.make(jumpsPastStalls: false)
        // The first answer goes quiet before its head: the download runs, and nothing is written into the file.
        h.server.serve("/f", .init(body: body) { index, _ in index == 0 ? .stallBeforeHead : nil })
        let (stalls, stalled) = AsyncStream<Void>.makeStream()
        h.server.onStall { _ in stalled.yield() }
        let bytes = Array(body.prefix(Self.cut))
        _ = FileManager.default.createFile(atPath: h.path("file.bin"), contents: Data(bytes))
        let inode = FileSystemProbe.inode(h.path("file.bin"))
        let manager = try h.manager()
        let id = try await manager.add(
            h.server.url("/f"), to: .file(h.path("file.bin")), options: DownloadOptions(continuePartial: true))
        for await _ in stalls { break }
        #expect(h.exists("file.bin.part") && !h.exists("file.bin"), "handed over while it runs")
        if cancelling { try await manager.cancel(id) } else { try await manager.pause(id) }
        #expect(try await manager.snapshot(id).state == (cancelling ? .cancelled : .paused))
        #expect(h.contents("file.bin") == bytes, "as it was")
        #expect(FileSystemProbe.inode(h.path("file.bin")) == inode)
        #expect(!h.exists("file.bin.part"))
        if cancelling {
            await manager.shutdown()
            return
        }
        try await manager.resume(id)
        let result = try await manager.result(of: id)
        await manager.shutdown()
        #expect(h.holds("file.bin", body))
        #expect(result.resumedFrom == Int64(Self.cut))
        #expect(FileSystemProbe.inode(h.path("file.bin")) == inode)
    }

    @Test("-c: the hand-over is in the store, counting the user's bytes, by the time the first request is out")
    func continueHandOverStoredFirst() async throws {
        let h = try await Harness.make(jumpsPastStalls: false)
        h.server.serve("/f", .init(body: body) { index, _ in index == 0 ? .stallBeforeHead : nil })
        let (stalls, stalled) = AsyncStream<Void>.makeStream()
        h.server.onStall { _ in stalled.yield() }
        _ = FileManager.default.createFile(atPath: h.path("file.bin"), contents: Data(body.prefix(Self.cut)))
        let inode = FileSystemProbe.inode(h.path("file.bin"))
        let manager = try h.manager()
        let id = try await manager.add(
            h.server.url("/f"), to: .file(h.path("file.bin")), options: DownloadOptions(continuePartial: true))
        for await _ in stalls { break }
        // What a crash now leaves in the store: a cancel or `rm` after it gives the file back cut to the bytes the
        // row counts, and a resume compares them; a row counting none would give back an empty file.
        let row = try #require(try DownloadStore(directory: h.stateDirectory).record(id: id.rawValue))
        #expect(row.handOver == .fromName)
        #expect(row.partIdentity.map { Int($0.inode) } == inode)
        #expect(row.durableOffset == Int64(Self.cut) && row.segments == nil && !row.isPartVerified)
        h.server.release()
        try await manager.cancel(id)
        await manager.shutdown()
    }

    /// How a download whose part file holds bytes ends for the user.
    enum Ending: String, CaseIterable, Sendable { case cancel, remove, clean }

    @Test(
        "-c: cancelled, removed or cleaned away after Haul wrote into it, the file handed over goes back, cut to the bytes held from its start",
        arguments: Ending.allCases)
    func continueWrittenGivesBack(ending: Ending) async throws {
        let h = try await Harness.make(jumpsPastStalls: false)
        let held = Self.cut + 40_000
        // The first answer starts 64 KiB before the user's last byte (the overlap Haul compares) and gives 130,000
        // bytes, then holds the rest back (or breaks, and the server has the file no more: the download fails).
        h.server.serve(
            "/f",
            .init(body: body) { index, _ in
                index > 0
                    ? .status(404, headers: [:])
                    : ending == .clean ? .cut(afterBytes: 130_000) : .hold(afterBytes: 130_000)
            })
        _ = FileManager.default.createFile(atPath: h.path("file.bin"), contents: Data(body.prefix(Self.cut)))
        let inode = FileSystemProbe.inode(h.path("file.bin"))
        let manager = try h.manager()
        let id = try await manager.add(
            h.server.url("/f"), to: .file(h.path("file.bin")), options: DownloadOptions(continuePartial: true))
        switch ending {
        case .cancel, .remove:
            for await event in manager.events(for: id) {
                if case .progress(let progress) = event, progress.receivedBytes >= held { break }
            }
            if ending == .cancel {
                try await manager.cancel(id)
            } else {
                try await manager.pause(id)
                #expect(h.exists("file.bin.part") && !h.exists("file.bin"), "paused, it stays the part file")
                try await manager.remove(id)
            }
        case .clean:
            await #expect(throws: DownloadError.self) { try await manager.result(of: id) }
            #expect(h.exists("file.bin.part") && !h.exists("file.bin"), "failed, it stays the part file")
            #expect(try await manager.clean() == 1)
        }
        h.server.release()
        await manager.shutdown()
        let given = h.contents("file.bin") ?? []
        #expect(given.count >= held, "longer than it was: \(given.count)")
        #expect(given == Array(body.prefix(given.count)), "a prefix of the file")
        #expect(FileSystemProbe.inode(h.path("file.bin")) == inode, "the user's file, not a copy")
        #expect(!h.exists("file.bin.part"))
    }

    @Test(
        "-c after a crash: what Haul appended to the file handed over and no mark counted is cut off before the overlap is compared"
    )
    func continueCrashedCutsUncounted() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body))
        // What a power cut can leave: the user's bytes, then Haul's appends, one of them lost (zeros) before others
        // that reached the disk. The end of the file matches the server's, so comparing only the last bytes held
        // would append to a file with a gap in it.
        let (gap, appended) = (40_000, 150_000)
        var held = Array(body.prefix(Self.cut)) + [UInt8](repeating: 0, count: gap)
        held += body[(Self.cut + gap)..<(Self.cut + appended)]
        #expect(FileManager.default.createFile(atPath: h.path("file.bin.part"), contents: Data(held)))
        // The row the hand-over stored: the user's file, its length as what it durably holds, not yet compared.
        let result = try await resumeHandedOver(h, file: "file.bin.part") { record in
            record.durableOffset = Int64(Self.cut)
            record.isPartVerified = false
        }
        #expect(h.holds("file.bin", body), "no gap under the final name")
        #expect(result.resumedFrom == Int64(Self.cut))
    }

    @Test("-c: a file given back whose removal did not reach the store is handed over again when the download resumes")
    func continueGivenBackResumes() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body))
        // What a power cut can leave after a cancel of a download with two connections: the file given back to its
        // name, cut to what was held from its start, and the row as it was, counting a second segment too.
        let given = Self.cut + 30_000
        #expect(FileManager.default.createFile(atPath: h.path("file.bin"), contents: Data(body.prefix(given))))
        let size = Int64(Self.size)
        let result = try await resumeHandedOver(h, file: "file.bin") { record in
            record.totalLength = size
            record.isResumable = true
            record.segments = [
                Segment(start: 0, end: 200_000, offset: Int64(given)),
                Segment(start: 200_000, end: size, offset: 260_000),
            ]
        }
        #expect(h.holds("file.bin", body), "the given-back file completed under its name")
        #expect(!h.exists("file.bin.part"))
        #expect(result.resumedFrom == Int64(given), "its bytes kept, and nothing counted beyond them")
    }

    /// Stores the paused row of a `-c` download of `/f` to `file.bin` whose file handed over from `file.bin` is
    /// `file` (as `change` makes it), resumes it, and returns how it ended.
    func resumeHandedOver(
        _ h: Harness, file: String, change: (inout DownloadRecord) -> Void
    ) async throws -> DownloadResult {
        var info = stat()
        #expect(stat(h.path(file), &info) == 0)
        var folder = stat()
        #expect(stat(h.folder, &folder) == 0)
        var record = DownloadRecord(
            id: "handed", url: h.server.url("/f").absoluteString, finalURL: nil, directory: nil,
            destination: h.path("file.bin"), state: .paused, totalLength: nil, durableOffset: 0,
            etag: nil, lastModified: nil, isLastModifiedStrong: false, isResumable: nil, isPartVerified: true,
            mayReplaceDestination: false, attempts: 0, lastError: nil,
            options: DownloadOptions(continuePartial: true), priority: 0, queuePosition: 1, prerequisites: [],
            rateLimit: nil, segments: nil, activeConnections: 0, createdAt: Date(), updatedAt: Date(), errorCode: nil,
            errorStatus: nil, origin: .library, completedAt: nil)
        record.partIdentity = FileIdentity(info)
        record.folderIdentity = FileIdentity(folder)
        record.handOver = .fromName
        change(&record)
        try DownloadStore(directory: h.stateDirectory).insert([record])
        let manager = try h.manager()
        try await manager.resume(DownloadID("handed"))
        let result = try await manager.result(of: DownloadID("handed"))
        await manager.shutdown()
        return result
    }

    @Test("-c: a part file Haul makes after the one handed over went is Haul's own, and a cancel deletes it")
    func continueRemadeIsHauls() async throws {
        let h = try await Harness.make(jumpsPastStalls: false)
        h.server.serve("/f", .init(body: body) { _, _ in .hold(afterBytes: 130_000) })
        _ = FileManager.default.createFile(atPath: h.path("file.bin"), contents: Data(body.prefix(Self.cut)))
        let manager = try h.manager()
        let id = try await manager.add(
            h.server.url("/f"), to: .file(h.path("file.bin")), options: DownloadOptions(continuePartial: true))
        for await event in manager.events(for: id) {
            if case .progress(let progress) = event, progress.receivedBytes > Self.cut { break }
        }
        try await manager.pause(id)
        // Another program deletes the user's file, now the part file: the download starts again in a file of its own.
        try FileManager.default.removeItem(atPath: h.path("file.bin.part"))
        h.server.release()
        try await manager.resume(id)
        for await event in manager.events(for: id) {
            if case .progress(let progress) = event, progress.receivedBytes > 0 { break }
        }
        try await manager.cancel(id)
        h.server.release()
        await manager.shutdown()
        #expect(!h.exists("file.bin") && !h.exists("file.bin.part"), "Haul's part file deleted, nothing given back")
    }

    @Test("25, 26, 27: folder downloads take the server's name, sanitised, never over an existing file")
    func folderNames() async throws {
        let h = try await Harness.make()
        h.server.serve(
            "/a",
            .init(
                body: body,
                contentDisposition: "attachment; filename=\"plain.txt\"; filename*=UTF-8''%E2%82%AC%20rates.txt"))
        h.server.serve("/b", .init(body: body, contentDisposition: "attachment; filename=\"../../etc/passwd\""))
        h.server.serve("/dir/c%20d.iso", .init(body: body))
        h.server.serve("/", .init(body: body))
        _ = FileManager.default.createFile(atPath: h.path("c d.iso"), contents: Data("mine".utf8))
        let manager = try h.manager()
        var paths: [String] = []
        for path in ["/a", "/b", "/dir/c%20d.iso", "/"] {
            let id = try await manager.add(h.server.url(path), to: .directory(h.folder))
            paths.append(try await manager.result(of: id).path)
        }
        await manager.shutdown()
        #expect(paths == [h.path("€ rates.txt"), h.path("passwd"), h.path("c d (1).iso"), h.path("index.html")])
        #expect(h.contents("c d.iso") == Array("mine".utf8))
        for path in paths { #expect(FileManager.default.contents(atPath: path).map { [UInt8]($0) } == body) }
    }

    @Test("two folder downloads with the same server name at once get two names")
    func sameNameAtOnce() async throws {
        let h = try await Harness.make()
        let other = testBytes(Self.size, seed: 31)
        h.server.serve("/x/data.bin", .init(body: body, bytesPerSecond: 2_000_000))
        h.server.serve("/y/data.bin", .init(body: other, bytesPerSecond: 2_000_000))
        let manager = try h.manager()
        let x = try await manager.add(h.server.url("/x/data.bin"), to: .directory(h.folder))
        let y = try await manager.add(h.server.url("/y/data.bin"), to: .directory(h.folder))
        let paths = [try await manager.result(of: x).path, try await manager.result(of: y).path]
        await manager.shutdown()
        #expect(Set(paths) == [h.path("data.bin"), h.path("data (1).bin")])
        #expect(FileManager.default.contents(atPath: paths[0]).map { [UInt8]($0) } == body)
        #expect(FileManager.default.contents(atPath: paths[1]).map { [UInt8]($0) } == other)
    }

    @Test(
        "a folder download takes the empty part file a run killed before storing it left at its name, not one a process holds or one with bytes"
    )
    func emptyPartOfKilledRun() async throws {
        let h = try await Harness.make()
        for name in ["data.bin", "held.bin", "kept.bin"] { h.server.serve("/x/\(name)", .init(body: body)) }
        // What a run killed between making its part file and storing it leaves: an empty file that no process holds.
        #expect(FileManager.default.createFile(atPath: h.path("data.bin.part"), contents: Data()))
        // An empty one another process holds (it is about to store it), and one with someone's bytes.
        #expect(FileManager.default.createFile(atPath: h.path("held.bin.part"), contents: Data()))
        let holder = open(h.path("held.bin.part"), O_RDWR)
        defer { close(holder) }
        #expect(flock(holder, LOCK_EX) == 0)
        #expect(FileManager.default.createFile(atPath: h.path("kept.bin.part"), contents: Data([1, 2, 3])))
        let manager = try h.manager()
        var paths: [String] = []
        for name in ["data.bin", "held.bin", "kept.bin"] {
            let id = try await manager.add(h.server.url("/x/\(name)"), to: .directory(h.folder))
            paths.append(try await manager.result(of: id).path)
        }
        await manager.shutdown()
        #expect(paths == [h.path("data.bin"), h.path("held (1).bin"), h.path("kept (1).bin")])
        #expect(h.contents("data.bin") == body && h.contents("held (1).bin") == body)
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: h.folder).sorted() == [
                "data.bin", "held (1).bin", "held.bin.part", "kept (1).bin", "kept.bin.part",
            ])
        #expect(h.contents("held.bin.part") == [] && h.contents("kept.bin.part") == [1, 2, 3])
    }

    @Test(
        "a folder download passes over the empty part file of a download paused before its first byte; one that fails before it leaves none"
    )
    func emptyPartOfStoppedDownload() async throws {
        let h = try await Harness.make()
        // The first answer sends its head and holds its body back: the download names its file, and is paused
        // with its part file empty.
        h.server.serve("/a/x.bin", .init(body: body) { index, _ in index == 0 ? .hold(afterBytes: 0) : nil })
        h.server.serve("/b/x.bin", .init(body: Array(body.reversed())))
        h.server.serve("/c/y.bin", .init(body: body) { _, _ in .status(404, headers: [:]) })
        let manager = try h.manager()
        let paused = try await manager.add(h.server.url("/a/x.bin"), to: .directory(h.folder))
        for await event in manager.events(for: paused) {
            if case .changed(let download) = event, download.path != nil { break }
        }
        try await manager.pause(paused)
        #expect(h.contents("x.bin.part") == [])
        let inode = try #require(FileSystemProbe.inode(h.path("x.bin.part")))
        let other = try await manager.add(h.server.url("/b/x.bin"), to: .directory(h.folder))
        #expect(try await manager.result(of: other).path == h.path("x (1).bin"))
        #expect(FileSystemProbe.inode(h.path("x.bin.part")) == inode)
        try await manager.resume(paused)
        h.server.release()
        #expect(try await manager.result(of: paused).path == h.path("x.bin"))
        let failed = try await manager.add(h.server.url("/c/y.bin"), to: .file(h.path("y.bin")))
        await #expect(throws: DownloadError.self) { try await manager.result(of: failed) }
        await manager.shutdown()
        #expect(h.contents("x.bin") == body && h.contents("x (1).bin") == Array(body.reversed()))
        #expect(try FileManager.default.contentsOfDirectory(atPath: h.folder).sorted() == ["x (1).bin", "x.bin"])
    }

    @Test(
        "a folder download passes over a name another download claims before its part file exists, and leaves no file of it"
    )
    func nameClaimedByAnother() async throws {
        let h = try await Harness.make()
        h.server.serve("/x/data.bin", .init(body: body))
        let manager = try h.manager()
        // Paused: its destination is claimed, and nothing of it is on the disk.
        let held = try await manager.add([
            DownloadRequest(
                url: h.server.url("/other"), destination: .file(h.path("data.bin")), isPaused: true, origin: .api)
        ])
        let id = try await manager.add(h.server.url("/x/data.bin"), to: .directory(h.folder))
        let path = try await manager.result(of: id).path
        #expect(try await manager.snapshot(held[0].id).state == .paused)
        await manager.shutdown()
        #expect(path == h.path("data (1).bin"))
        #expect(h.contents("data (1).bin") == body)
        // The part file made for the refused name went with the refusal.
        #expect(try FileManager.default.contentsOfDirectory(atPath: h.folder).sorted() == ["data (1).bin"])
    }

    /// Fetches `/f` whole, then leaves its row as a process killed between the rename and the completed state would:
    /// `change` applied, the state running.
    func rowKilledAfterRename(_ h: Harness, _ change: (inout DownloadRecord) -> Void) async throws {
        h.server.serve("/f", .init(body: body))
        _ = try await h.fetch("/f")
        let store = try DownloadStore(directory: h.stateDirectory)
        var record = try #require(try store.allRecords().first)
        #expect(record.totalLength == Int64(body.count))
        record.mayReplaceDestination = false
        change(&record)
        try store.save(record)
        try store.saveState(.running, for: record.id)
    }

    @Test(
        "killed between the final rename and the completed state: the next run recognises its own file",
        arguments: [false, true])
    func killedAfterRename(singleStream: Bool) async throws {
        let h = try await Harness.make()
        // Several connections store the full offset before the rename; one stream renames as soon as its file is
        // synced, with nothing stored since its first answer (the identity and the length).
        try await rowKilledAfterRename(h) { record in
            if singleStream {
                record.durableOffset = 0
                record.segments = nil
            }
        }
        let again = try await h.fetch("/f")
        #expect(again.wasAlreadyComplete)
        #expect(h.holds("file.bin", body))
        #expect(h.server.requests(to: "/f").count == 1, "nothing fetched again")
    }

    @Test("segments not all stored: a file of the right length at the destination is not taken as finished")
    func segmentsNotStoredAfterRename() async throws {
        let h = try await Harness.make()
        // Several connections store the length before the rename: a row whose segments do not hold it all never
        // renamed its file, whatever has the name now.
        let half = Int64(body.count / 2)
        let total = Int64(body.count)
        try await rowKilledAfterRename(h) { record in
            record.durableOffset = half
            record.segments = [
                Segment(start: 0, end: half, offset: half), Segment(start: half, end: total, offset: half),
            ]
        }
        // Fetched again, and the file found under the name is not replaced.
        await #expect {
            _ = try await h.fetch("/f")
        } throws: { error in
            (error as? DownloadError)?.code == .destinationExists
        }
        #expect(h.server.requests(to: "/f").count > 1, "fetched again")
        #expect(h.holds("file.bin", body))
    }

    @Test("a completed download run again fetches no body")
    func alreadyComplete() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body))
        _ = try await h.fetch("/f")
        let again = try await h.fetch("/f")
        #expect(again.wasAlreadyComplete)
        #expect(h.server.requests(to: "/f").count == 1)
    }

    @Test(
        "a completed file changed since, or replaced by another URL's with overwrite, is not reported complete nor replaced unasked"
    )
    func changedAfterCompletion() async throws {
        let h = try await Harness.make()
        let other = testBytes(body.count, seed: 99)
        h.server.serve("/f", .init(body: body))
        h.server.serve("/g", .init(body: other))
        let manager = try h.manager()
        let (f, g) = (h.server.url("/f"), h.server.url("/g"))
        _ = try await manager.result(of: try await manager.add(f, to: .file(h.path("file.bin"))))

        // Another URL to the same name: refused as the earlier download's file, then replaced when asked.
        do {
            _ = try await manager.add(g, to: .file(h.path("file.bin")))
            Issue.record("another URL took the file without being asked")
        } catch {
            #expect(error.code == .destinationExists)
            #expect(error.message.contains("holds an earlier download, of \(f.absoluteString)"), "\(error.message)")
        }
        let replaced = try await manager.add(
            g, to: .file(h.path("file.bin")), options: DownloadOptions(overwrite: true))
        _ = try await manager.result(of: replaced)
        #expect(h.holds("file.bin", other))
        // The first URL again: the file of the same length is not its file.
        do {
            _ = try await manager.add(f, to: .file(h.path("file.bin")))
            Issue.record("the first download took the file that is the second's")
        } catch {
            #expect(error.code == .destinationExists)
            #expect(error.message.contains("is not the file Haul finished any more"), "\(error.message)")
        }
        #expect(h.holds("file.bin", other), "nothing replaced")

        // Edited by its user: the same.
        let handle = try #require(FileHandle(forWritingAtPath: h.path("file.bin")))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("notes".utf8))
        try handle.close()
        do {
            _ = try await manager.add(g, to: .file(h.path("file.bin")))
            Issue.record("an edited file was taken as complete or replaced")
        } catch {
            #expect(error.code == .destinationExists)
        }
        #expect(h.holds("file.bin", other + Array("notes".utf8)), "the edit stays")
        #expect(h.server.requests(to: "/f").count == 1 && h.server.requests(to: "/g").count == 1)
        await manager.shutdown()
    }

    @Test("one manager (a daemon): a completed file deleted since is fetched again when added again, not reported")
    func deletedAfterCompletion() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body))
        let manager = try h.manager()
        let url = h.server.url("/f")
        let first = try await manager.result(of: try await manager.add(url, to: .file(h.path("file.bin"))))
        #expect(!first.wasAlreadyComplete && h.holds("file.bin", body))
        try FileManager.default.removeItem(atPath: h.path("file.bin"))
        let again = try await manager.result(of: try await manager.add(url, to: .file(h.path("file.bin"))))
        #expect(!again.wasAlreadyComplete)
        #expect(h.holds("file.bin", body))
        #expect(h.server.requests(to: "/f").count == 2)
        // Still there: the next add fetches nothing.
        let third = try await manager.result(of: try await manager.add(url, to: .file(h.path("file.bin"))))
        #expect(third.path == h.path("file.bin") && h.server.requests(to: "/f").count == 2)
        await manager.shutdown()
    }

    // MARK: Control and events

    @Test("pause flushes the exact offset; resume continues from it")
    func pauseAndResume() async throws {
        let h = try await Harness.make()
        // Five seconds of transfer: the pause lands before the end even on a busy machine.
        h.server.serve("/f", .init(body: body, bytesPerSecond: 60_000))
        let manager = try h.manager()
        let id = try await manager.add(h.server.url("/f"), to: .file(h.path("file.bin")))
        for await event in manager.events(for: id) {
            if case .progress(let progress) = event, progress.receivedBytes > 0 { break }
        }
        try await manager.pause(id)
        let snapshot = try await manager.snapshot(id)
        #expect(snapshot.state == .paused)
        let held = FileSystemProbe.size(h.path("file.bin.part"))
        #expect(held == snapshot.receivedBytes, "the stored offset is the exact part length")
        #expect((held ?? 0) > 0)
        try await manager.resume(id)
        _ = try await manager.result(of: id)
        await manager.shutdown()
        #expect(h.holds("file.bin", body))
        #expect(h.server.requests(to: "/f").last?.range == "bytes=\(held ?? -1)-")
        await #expect(throws: DownloadError.self) { try await manager.resume(id) }
    }

    @Test("cancel stops the download and deletes its part file")
    func cancel() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body, bytesPerSecond: 100_000))
        let manager = try h.manager()
        let id = try await manager.add(h.server.url("/f"), to: .file(h.path("file.bin")))
        for await event in manager.events(for: id) {
            if case .progress = event { break }
        }
        try await manager.cancel(id)
        #expect(try await manager.snapshot(id).state == .cancelled)
        #expect(!h.exists("file.bin.part"))
        #expect(!h.exists("file.bin"))
        await manager.shutdown()
    }

    @Test("remove forgets a download; with deletingFile it also deletes the completed file; a running one is refused")
    func remove() async throws {
        let h = try await Harness.make()
        h.server.serve("/a", .init(body: body))
        h.server.serve("/b", .init(body: body))
        h.server.serve("/slow", .init(body: body, bytesPerSecond: 100_000))
        let manager = try h.manager()
        let a = try await manager.add(h.server.url("/a"), to: .file(h.path("a.bin")))
        let b = try await manager.add(h.server.url("/b"), to: .file(h.path("b.bin")))
        _ = try await manager.result(of: a)
        _ = try await manager.result(of: b)
        try await manager.remove(a)
        try await manager.remove(b, deletingFile: true)
        #expect(h.holds("a.bin", body))
        #expect(!h.exists("b.bin"))
        await #expect(throws: DownloadError.self) { try await manager.snapshot(a) }
        let slow = try await manager.add(h.server.url("/slow"), to: .file(h.path("slow.bin")))
        await #expect(throws: DownloadError.self) { try await manager.remove(slow) }
        try await manager.cancel(slow)
        try await manager.remove(slow)
        await manager.shutdown()
        #expect(try await manager.snapshots().isEmpty)
    }

    @Test("events(for:) delivers one download's events only")
    func filteredEvents() async throws {
        let h = try await Harness.make()
        h.server.serve("/a", .init(body: body))
        h.server.serve("/b", .init(body: body))
        let manager = try h.manager()
        let a = try await manager.add(h.server.url("/a"), to: .file(h.path("a.bin")))
        let stream = manager.events(for: a)
        let b = try await manager.add(h.server.url("/b"), to: .file(h.path("b.bin")))
        _ = try await manager.result(of: a)
        _ = try await manager.result(of: b)
        await manager.shutdown()
        var ids = Set<DownloadID>()
        var sawCompletion = false
        for await event in stream {
            if let id = event.downloadID { ids.insert(id) }
            if event.state == .completed { sawCompletion = true }
        }
        #expect(ids == [a])
        #expect(sawCompletion)
    }

    @Test("adding the same URL to the same destination returns the same download")
    func dedupe() async throws {
        let h = try await Harness.make()
        h.server.serve("/f", .init(body: body, bytesPerSecond: 2_000_000))
        let manager = try h.manager()
        let first = try await manager.add(h.server.url("/f"), to: .file(h.path("file.bin")))
        let second = try await manager.add(h.server.url("/f"), to: .file(h.path("file.bin")))
        #expect(first == second)
        _ = try await manager.result(of: first)
        await manager.shutdown()
        #expect(h.server.requests(to: "/f").count == 1)
    }

    @Test("adding a download again while it runs returns it, still running")
    func readdWhileRunning() async throws {
        let h = try await Harness.make()
        // Held back after some bytes: the download surely runs, its part file locked, when it is asked for again.
        h.server.serve("/f", .init(body: body) { index, _ in index == 0 ? .hold(afterBytes: 100_000) : nil })
        h.server.serve("/g", .init(body: body) { index, _ in index == 0 ? .hold(afterBytes: 100_000) : nil })
        let manager = try h.manager()
        let file = try await manager.add(h.server.url("/f"), to: .file(h.path("file.bin")))
        let folder = try await manager.add(h.server.url("/g"), to: .directory(h.folder))
        for id in [file, folder] {
            for await event in manager.events(for: id) {
                if case .progress = event { break }
            }
        }
        #expect(try await manager.add(h.server.url("/f"), to: .file(h.path("file.bin"))) == file)
        #expect(try await manager.add(h.server.url("/g"), to: .directory(h.folder)) == folder)
        #expect(try await manager.snapshots(of: [file, folder]).map(\.state) == [.running, .running])
        h.server.release()
        #expect(try await manager.result(of: file).path == h.path("file.bin"))
        #expect(try await manager.result(of: folder).path == h.path("g"))
        await manager.shutdown()
        #expect(h.holds("file.bin", body) && h.holds("g", body))
    }

    @Test("bad URLs are refused with a message naming them")
    func badURLs() async throws {
        let manager = try DownloadManager(configuration: .init(stateDirectory: nil))
        for text in ["gopher://example.com/x", "sftp://example.com/x", "file:///etc/passwd", "http:///nohost"] {
            do {
                _ = try await manager.add(URL(string: text)!, to: .directory(NSTemporaryDirectory()))
                Issue.record("accepted \(text)")
            } catch {
                #expect(error.code == .invalidURL)
            }
        }
    }
}

/// Direct file-system checks for tests.
enum FileSystemProbe {
    static func size(_ path: String) -> Int64? {
        (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value
    }

    /// The file's inode number: whether a name still has the same file.
    static func inode(_ path: String) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: path)[.systemFileNumber] as? NSNumber)?.intValue
    }

    static func truncate(_ path: String, to length: Int64) throws {
        let handle = FileHandle(forUpdatingAtPath: path)!
        try handle.truncate(atOffset: UInt64(length))
        try handle.close()
    }
}
