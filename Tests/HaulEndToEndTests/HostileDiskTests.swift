import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A real small file system: a tmpfs of a given size mounted on a fresh folder, unmounted at the end. Mounting
/// needs root, which CI has; elsewhere the tests fail saying so (they never skip).
struct SmallDisk {
    let path: String

    init(bytes: Int) async throws {
        guard getuid() == 0 else {
            throw DownloadError(
                .invalidArgument, "the hostile-disk tests mount a tmpfs and need root (CI runs as root)")
        }
        path = NSTemporaryDirectory() + "haul-disk-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        try await Self.run("mount", ["-t", "tmpfs", "-o", "size=\(bytes),mode=0755", "tmpfs", path])
    }

    /// Gives the file system `bytes` in all (more room, or less).
    func resize(bytes: Int) async throws {
        try await Self.run("mount", ["-o", "remount,size=\(bytes)", path])
    }

    /// Takes every free byte with a file of its own.
    func fill() async {
        await onOwnThread {
            let descriptor = open(path + "/filler", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            guard descriptor >= 0 else { return }
            let block = [UInt8](repeating: 0xAB, count: 4096)
            while block.withUnsafeBytes({ write(descriptor, $0.baseAddress, $0.count) }) > 0 {}
            close(descriptor)
        }
    }

    /// Frees what `fill` took.
    func free() { unlink(path + "/filler") }

    /// Clears any immutable flag, unmounts, removes the folder.
    func remove() async {
        try? await Self.run("chattr", ["-R", "-i", path])
        try? await Self.run("umount", [path])
        rmdir(path)
    }

    static func run(_ tool: String, _ arguments: [String]) async throws {
        guard let executable = executable(tool) else {
            throw DownloadError(.invalidArgument, "\(tool) is not installed")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        await onOwnThread { process.waitUntilExit() }
        guard process.terminationStatus == 0 else {
            throw DownloadError(.fileSystem, "\(tool) \(arguments.joined(separator: " ")) failed")
        }
    }
}

/// Runs `body`, then `teardown`, awaited, whether `body` threw or not.
func withTeardown(_ teardown: () async -> Void, _ body: () async throws -> Void) async throws {
    do { try await body() } catch {
        await teardown()
        throw error
    }
    await teardown()
}

/// Runs `body` with a workspace, a small disk of `bytes` and a fault server, each removed at the end, also when `body`
/// throws.
func onSmallDisk(bytes: Int, _ body: (Workspace, SmallDisk, FaultServer) async throws -> Void) async throws {
    let workspace = try Workspace()
    let disk = try await SmallDisk(bytes: bytes)
    let server = try await FaultServer.start()
    try await withTeardown({
        await server.stop()
        await disk.remove()
        workspace.remove()
    }) {
        try await body(workspace, disk, server)
    }
}

/// The first byte each request to `path` asked for (0 without a Range).
func rangeStarts(_ server: FaultServer, _ path: String) -> [Int64] {
    server.requests(to: path).map { request in
        request.range.flatMap { Int64($0.dropFirst(6).prefix { $0.isNumber }) } ?? 0
    }
}

/// The disks of the brief's hostile list, each a real small file system: full while writing the part file, full
/// while the store commits, the folder made read-only or deleted, the part file deleted or cut short by someone
/// else. Each ends with a clear message, and what was durable is kept.
@Suite("Hostile disks, end to end", .serialized, .timeLimit(.minutes(2)))
struct HostileDiskTests {
    @Test("the disk fills mid-download: 'disk full', the bytes stay, the same command resumes once there is room")
    func diskFullMidDownload() async throws {
        try await onSmallDisk(bytes: 2 << 20) { workspace, disk, server in
            let body = testBytes(4 << 20)
            server.serve("/f", .init(body: body))
            let command = ["get", server.url("/f").absoluteString, "-o", disk.path + "/f.bin"]
            let full = try await HaulProcess.run(command, in: workspace)
            #expect(full.status == 1)
            #expect(full.stderr.contains("the disk is full"), "\(full.stderr)")
            let kept = fileSize(disk.path + "/f.bin.part") ?? 0
            #expect(kept > 1 << 20, "the bytes written before the disk filled stay")

            try await disk.resize(bytes: 16 << 20)
            let again = try await HaulProcess.run(command, in: workspace)
            #expect(again.status == 0, "\(again.stderr)")
            #expect(FileManager.default.contents(atPath: disk.path + "/f.bin").map { [UInt8]($0) } == body)
            let starts = rangeStarts(server, "/f")
            #expect(starts.count == 2 && starts[1] > 0 && starts[1] <= kept, "resumed, not restarted: \(starts)")
        }
    }

    @Test("the store's disk fills while it commits: a clear message, the store stays readable, the download resumes")
    func storeDiskFull() async throws {
        try await onSmallDisk(bytes: 4 << 20) { workspace, disk, server in
            // A second and a half of the body at 1 MiB/s (a checkpoint is stored about every second), then the rest
            // is held back until the store's disk is full: a fill while the body flows could end after the last
            // checkpoint, and the write of the completion that follows is one Haul does not wait for. The rest, at
            // the same rate, takes long enough for a checkpoint to come due on the full disk.
            let body = testBytes(4 << 20)
            server.serve(
                "/f",
                .init(body: body, bytesPerSecond: 1 << 20) { index, _ in index == 0 ? .hold(afterBytes: 3 << 19) : nil }
            )
            let (stalls, stalled) = AsyncStream<Void>.makeStream()
            server.onStall { _ in stalled.yield() }
            let state = disk.path + "/state"
            let command = ["get", server.url("/f").absoluteString, "-o", "f.bin", "--state-dir", state]
            let haul = try HaulProcess(command, in: workspace)
            var waits = stalls.makeAsyncIterator()
            _ = await waits.next()
            await disk.fill()
            server.release()
            let full = await haul.finish()
            #expect(full.status == 1, "\(full.stderr)")
            #expect(
                full.stderr.contains("cannot save to the state database \(state)/haul.sqlite: the disk is full"),
                "\(full.stderr)")

            // Still full: the store reads.
            let listed = try await HaulProcess.run(["ls", "--json", "--state-dir", state], in: workspace)
            let rows = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]]
            #expect(listed.status == 0, "\(listed.stderr)")
            #expect(rows?.map { $0["url"] as? String } == [server.url("/f").absoluteString], "\(listed.stdout)")

            disk.free()
            let again = try await HaulProcess.run(command, in: workspace)
            #expect(again.status == 0, "\(again.stderr)")
            #expect(workspace.holds("f.bin", body))
            let starts = rangeStarts(server, "/f")
            #expect(starts.count == 2 && starts[1] > 0, "the stored checkpoint was kept: \(starts)")
        }
    }

    @Test(
        "the store's disk is full when a download claims its file's name: the empty part file goes, and the rerun takes that name"
    )
    func storeFullAtClaim() async throws {
        try await onSmallDisk(bytes: 4 << 20) { workspace, disk, server in
            // One at a time: /a holds the rest of its body back until the store's disk is full, so /b, added with it,
            // starts on a full disk; its name is claimed (its part file made, then stored) when its answer comes.
            let body = testBytes(256 << 10)
            server.serve("/a", .init(body: body) { index, _ in index == 0 ? .hold(afterBytes: 1 << 16) : nil })
            server.serve("/b", .init(body: body))
            let (stalls, stalled) = AsyncStream<Void>.makeStream()
            server.onStall { _ in stalled.yield() }
            let command = [
                "get", server.url("/a").absoluteString, server.url("/b").absoluteString, "-j", "1", "-d",
                workspace.files, "--state-dir", disk.path + "/state",
            ]
            let haul = try HaulProcess(command, in: workspace)
            var waits = stalls.makeAsyncIterator()
            _ = await waits.next()
            // /a's name is stored before its first byte is written.
            #expect(await waitUntil { (workspace.size("a.part") ?? 0) > 0 })
            await disk.fill()
            server.release()
            let full = await haul.finish()
            #expect(full.status == 1, "\(full.stderr)")
            #expect(full.stderr.contains("the disk is full"), "\(full.stderr)")
            #expect(server.requests.contains { $0.path == "/b" }, "b started on the full disk")
            // No row names it: left, the rerun would take it for another program's file and write "b (1)".
            #expect(!FileManager.default.fileExists(atPath: workspace.path("b.part")))

            disk.free()
            let again = try await HaulProcess.run(command, in: workspace)
            #expect(again.status == 0, "\(again.stderr)")
            #expect(workspace.holds("a", body) && workspace.holds("b", body))
            #expect(!FileManager.default.fileExists(atPath: workspace.path("b (1)")))
        }
    }

    @Test("the folder turns read-only before the end: a clear message, the part file stays, the rerun only moves it")
    func folderReadOnly() async throws {
        try await onSmallDisk(bytes: 16 << 20) { workspace, disk, server in
            // The answer holds back its second half until the folder is read-only, so the download is surely not
            // done when it turns (a rate alone raced the `chattr` on a busy machine).
            let body = testBytes(2 << 20)
            server.serve("/f", .init(body: body) { _, _ in .hold(afterBytes: 1 << 20) })
            let (stalls, stalled) = AsyncStream<Void>.makeStream()
            server.onStall { _ in stalled.yield() }
            let folder = disk.path + "/downloads"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let command = ["get", server.url("/f").absoluteString, "-o", folder + "/f.bin"]
            let haul = try HaulProcess(command, in: workspace)
            var waits = stalls.makeAsyncIterator()
            _ = await waits.next()
            // Immutable: not even root may add a name to it (chmod would not stop root).
            try await SmallDisk.run("chattr", ["+i", folder])
            server.release()
            let refused = await haul.finish()
            #expect(refused.status == 1)
            #expect(refused.stderr.contains("not writable"), "\(refused.stderr)")
            #expect(FileManager.default.contents(atPath: folder + "/f.bin.part").map { [UInt8]($0) } == body)

            try await SmallDisk.run("chattr", ["-i", folder])
            let sent = server.bodyBytesSent(for: "/f")
            let again = try await HaulProcess.run(command, in: workspace)
            #expect(again.status == 0, "\(again.stderr)")
            #expect(FileManager.default.contents(atPath: folder + "/f.bin").map { [UInt8]($0) } == body)
            #expect(server.bodyBytesSent(for: "/f") == sent, "the rerun fetched nothing again")
        }
    }

    @Test(
        "the folder, or the part file, is deleted mid-download: it stops naming what went; the rerun starts over",
        arguments: [true, false])
    func deletedMidDownload(folderToo: Bool) async throws {
        try await onSmallDisk(bytes: 16 << 20) { workspace, disk, server in
            let body = testBytes(4 << 20)
            server.serve("/f", .init(body: body, bytesPerSecond: 1 << 20))
            let folder = disk.path + "/downloads"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let command = ["get", server.url("/f").absoluteString, "-o", folder + "/f.bin"]
            let haul = try HaulProcess(command, in: workspace)
            #expect(await waitUntil { fileSize(folder + "/f.bin.part") ?? 0 > 300_000 || !haul.process.isRunning })
            if folderToo {
                try FileManager.default.removeItem(atPath: folder)
            } else {
                unlink(folder + "/f.bin.part")
            }
            let stopped = await haul.finish()
            #expect(stopped.status == 1)
            let named = folderToo ? "the folder \(folder) was deleted" : "was deleted or replaced by another program"
            #expect(stopped.stderr.contains(named), "\(stopped.stderr)")

            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let again = try await HaulProcess.run(command, in: workspace)
            #expect(again.status == 0, "\(again.stderr)")
            #expect(FileManager.default.contents(atPath: folder + "/f.bin").map { [UInt8]($0) } == body)
            #expect(rangeStarts(server, "/f").last == 0, "started over: the deleted bytes are gone")
        }
    }

    @Test("the part file is cut short by someone else mid-download: it stops, and the rerun resumes from what is left")
    func truncatedMidDownload() async throws {
        try await onSmallDisk(bytes: 32 << 20) { workspace, disk, server in
            let body = testBytes(6 << 20)
            server.serve("/f", .init(body: body, bytesPerSecond: 2 << 20))
            let part = disk.path + "/f.bin.part"
            let command = ["get", server.url("/f").absoluteString, "-o", disk.path + "/f.bin"]
            let haul = try HaulProcess(command, in: workspace)
            #expect(await waitUntil { fileSize(part) ?? 0 > 3 << 20 || !haul.process.isRunning })
            let cut: Int64 = 2_500_000
            #expect(truncate(part, off_t(cut)) == 0)
            let stopped = await haul.finish()
            #expect(stopped.status == 1)
            #expect(stopped.stderr.contains("was cut short by another program"), "\(stopped.stderr)")

            let again = try await HaulProcess.run(command, in: workspace)
            #expect(again.status == 0, "\(again.stderr)")
            #expect(FileManager.default.contents(atPath: disk.path + "/f.bin").map { [UInt8]($0) } == body)
            let resumed = rangeStarts(server, "/f").last ?? -1
            #expect(resumed > 0 && resumed <= cut, "resumed from what was left before \(cut): \(resumed)")
        }
    }
}

/// The length of the file at `path`, nil when there is none.
func fileSize(_ path: String) -> Int64? {
    var info = stat()
    return stat(path, &info) == 0 ? Int64(info.st_size) : nil
}
