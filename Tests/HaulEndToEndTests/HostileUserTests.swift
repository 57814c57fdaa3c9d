import Foundation
import HaulTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// HOSTILE.md 38–41: another local user who can create entries in the download folder (a shared folder, `/tmp`, a
/// folder the daemon was allowed) plants links, hard links, FIFOs, devices and files of their own where Haul is about
/// to write, or swaps a folder for a link while a download runs. Each case runs against the real `haul get` and the
/// real `haul serve` (the daemon also under a seccomp filter that refuses `openat2`, so the walk that replaces it is
/// proven too), and checks that nothing outside the intended folder was written, that no file Haul did not make
/// changed, and what Haul said.
@Suite("Hostile local users, end to end", .serialized, .timeLimit(.minutes(5)))
struct HostileUserTests {
    let body = testBytes(600_000, seed: 38)

    /// What another user plants at a part file's name.
    enum Plant: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case symbolicLink, hardLink, fifo, device, otherUsersFile

        var testDescription: String { rawValue }

        /// How Haul names what it found.
        var words: String {
            switch self {
            case .symbolicLink: "is a symbolic link"
            case .hardLink: "has 2 hard links (another name shares it)"
            case .fifo: "is a FIFO"
            case .device: "is a device node"
            case .otherUsersFile: "belongs to another user (uid 65534)"
            }
        }

        /// Plants it at `path`; links lead to the victim outside.
        func make(at path: String, outside: Outside) throws {
            let made: Int32
            switch self {
            case .symbolicLink: made = symlink(outside.victim, path)
            case .hardLink: made = link(outside.victim, path)
            case .fifo: made = mkfifo(path, 0o666)
            // The memory device /dev/null is: major 1, minor 3.
            case .device: made = mknod(path, mode_t(S_IFCHR) | 0o666, 0x103)
            case .otherUsersFile:
                made = FileManager.default.createFile(atPath: path, contents: Data(Outside.victimBytes)) ? 0 : -1
                #expect(chown(path, 65534, 65534) == 0, "chown needs root (CI runs as root)")
            }
            #expect(made == 0, "planting \(rawValue) at \(path): \(String(cString: strerror(errno)))")
        }

        /// Whether what was planted at `path` is still there, as it was.
        func isIntact(at path: String, outside: Outside) -> Bool {
            var info = stat()
            guard lstat(path, &info) == 0 else { return false }
            let kind = UInt32(info.st_mode) & UInt32(S_IFMT)
            switch self {
            case .symbolicLink:
                return kind == UInt32(S_IFLNK)
                    && (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) == outside.victim
            case .hardLink: return kind == UInt32(S_IFREG) && info.st_nlink == 2 && outside.isUntouched
            case .fifo: return kind == UInt32(S_IFIFO)
            case .device: return kind == UInt32(S_IFCHR) && info.st_rdev == 0x103
            case .otherUsersFile:
                return kind == UInt32(S_IFREG) && info.st_uid == 65534
                    && FileManager.default.contents(atPath: path).map { [UInt8]($0) } == Outside.victimBytes
            }
        }
    }

    // MARK: The command line

    @Test(
        "haul get -o: an entry planted at NAME.part is never opened for writing; it stops naming it, fetching nothing",
        arguments: Plant.allCases)
    func commandLinePart(_ plant: Plant) async throws {
        let (workspace, outside, server) = try await Self.setUp()
        try await withTeardown({ await Self.tearDown(workspace, server) }) {
            server.serve("/f.bin", .init(body: body))
            try plant.make(at: workspace.path("f.bin.part"), outside: outside)
            let run = try await Self.finish(
                HaulProcess(["get", server.url("/f.bin").absoluteString, "-o", workspace.path("f.bin")], in: workspace))
            #expect(run.status == 1, "\(run.stderr)")
            #expect(
                run.stderr.contains("\(workspace.path("f.bin.part")) \(plant.words); Haul will not write through it"),
                "\(run.stderr)")
            #expect(outside.isUntouched)
            #expect(plant.isIntact(at: workspace.path("f.bin.part"), outside: outside))
            #expect(workspace.size("f.bin") == nil)
            #expect(server.requests.isEmpty, "nothing fetched")
            #expect(Self.strays(workspace).isEmpty)
        }
    }

    @Test("haul get -o: a link planted at the final name mid-download is neither followed nor replaced")
    func commandLineFinalName() async throws {
        let (workspace, outside, server) = try await Self.setUp()
        try await withTeardown({ await Self.tearDown(workspace, server) }) {
            let stalled = Self.hold(server, "/f.bin", body)
            let haul = try HaulProcess(
                ["get", server.url("/f.bin").absoluteString, "-o", workspace.path("f.bin")], in: workspace)
            await stalled()
            #expect(symlink(outside.victim, workspace.path("f.bin")) == 0)
            server.release()
            let run = await Self.finish(haul)
            #expect(run.status == 1, "\(run.stderr)")
            #expect(run.stderr.contains("\(workspace.path("f.bin")) appeared while downloading; not overwriting it"))
            #expect(outside.isUntouched)
            #expect(
                (try? FileManager.default.destinationOfSymbolicLink(atPath: workspace.path("f.bin"))) == outside.victim)
            #expect(workspace.holds("f.bin.part", body), "the bytes stay in the part file")
            #expect(Self.strays(workspace).isEmpty)
        }
    }

    @Test("haul get -o: the folder renamed and replaced by a link mid-download: finished in the folder Haul opened")
    func commandLineFolderSwapped() async throws {
        let (workspace, outside, server) = try await Self.setUp()
        try await withTeardown({ await Self.tearDown(workspace, server) }) {
            let sub = workspace.path("sub")
            try FileManager.default.createDirectory(atPath: sub, withIntermediateDirectories: true)
            let stalled = Self.hold(server, "/f.bin", body)
            let haul = try HaulProcess(
                ["get", server.url("/f.bin").absoluteString, "-o", sub + "/f.bin"], in: workspace)
            await stalled()
            #expect(rename(sub, workspace.path("sub-moved")) == 0)
            #expect(symlink(outside.path, sub) == 0)
            server.release()
            let run = await Self.finish(haul)
            #expect(run.status == 0, "\(run.stderr)")
            #expect(workspace.holds("sub-moved/f.bin", body))
            #expect(outside.isUntouched)
            #expect(Self.strays(workspace).isEmpty)
        }
    }

    @Test("haul get -o: a folder swapped for a link between runs is not the download's folder; nothing written there")
    func commandLineFolderSwappedBetweenRuns() async throws {
        let (workspace, outside, server) = try await Self.setUp()
        try await withTeardown({ await Self.tearDown(workspace, server) }) {
            let sub = workspace.path("sub")
            try FileManager.default.createDirectory(atPath: sub, withIntermediateDirectories: true)
            let stalled = Self.hold(server, "/f.bin", body)
            let command = ["get", server.url("/f.bin").absoluteString, "-o", sub + "/f.bin"]
            let first = try HaulProcess(command, in: workspace)
            await stalled()
            #expect(await waitUntil { (workspace.size("sub/f.bin.part") ?? 0) > 0 })
            first.signal(SIGKILL)
            _ = await first.finish()
            let held = try #require(workspace.contents("sub/f.bin.part"))
            #expect(rename(sub, workspace.path("sub-old")) == 0)
            #expect(symlink(outside.path, sub) == 0)
            server.serve("/f.bin", .init(body: body))
            let again = try await Self.finish(HaulProcess(command, in: workspace))
            #expect(again.status == 1, "\(again.stderr)")
            #expect(
                again.stderr.contains("the folder \(sub) is no longer the folder this download was added to"),
                "\(again.stderr)")
            #expect(outside.isUntouched)
            #expect(workspace.contents("sub-old/f.bin.part") == held, "the bytes Haul holds are kept")
            #expect(Self.strays(workspace).isEmpty)
        }
    }

    @Test("haul get -d: server names with .. or a leading / stay in the folder")
    func commandLineServerNames() async throws {
        let (workspace, outside, server) = try await Self.setUp()
        try await withTeardown({ await Self.tearDown(workspace, server) }) {
            server.serve("/a", .init(body: body, contentDisposition: #"attachment; filename="../../escape.bin""#))
            server.serve("/b", .init(body: body, contentDisposition: #"attachment; filename="/tmp/absolute.bin""#))
            let run = try await Self.finish(
                HaulProcess(
                    ["get", server.url("/a").absoluteString, server.url("/b").absoluteString, "-d", workspace.files],
                    in: workspace))
            #expect(run.status == 0, "\(run.stderr)")
            #expect(workspace.holds("escape.bin", body))
            #expect(workspace.holds("absolute.bin", body))
            #expect(!FileManager.default.fileExists(atPath: "/tmp/absolute.bin.part"))
            #expect(outside.isUntouched)
            #expect(Self.strays(workspace).isEmpty)
        }
    }

    // MARK: The daemon

    @Test(
        "haul serve: an entry planted at NAME.part is left alone; the download takes the next free name",
        arguments: Plant.allCases, [false, true])
    func daemonPart(_ plant: Plant, withoutOpenat2: Bool) async throws {
        let (workspace, outside, server) = try await Self.setUp()
        try await withTeardown({ await Self.tearDown(workspace, server) }) {
            server.serve("/g.bin", .init(body: body))
            try plant.make(at: workspace.path("g.bin.part"), outside: outside)
            let daemon = try await Self.daemon(workspace, withoutOpenat2: withoutOpenat2)
            let id = try await Self.add(daemon, ["url": server.url("/g.bin").absoluteString, "filename": "g.bin"])
            let done = try await daemon.waitUntilStopped(id, seconds: 30)
            #expect(done["state"] as? String == "completed", "\(done)")
            #expect(done["path"] as? String == workspace.path("g (1).bin"))
            #expect(workspace.holds("g (1).bin", body))
            #expect(plant.isIntact(at: workspace.path("g.bin.part"), outside: outside))
            #expect(outside.isUntouched)
            #expect(workspace.size("g.bin") == nil)
            let log = await Self.stop(daemon, withoutOpenat2: withoutOpenat2)
            #expect(
                log.contains(
                    "\(workspace.path("g.bin.part")) \(plant.words); Haul will not write through it; taking the next "
                        + "free name"), "\(log)")
            #expect(Self.strays(workspace).isEmpty)
        }
    }

    @Test(
        "haul serve: a link planted at the final name mid-download is neither followed nor replaced",
        arguments: [false, true])
    func daemonFinalName(withoutOpenat2: Bool) async throws {
        let (workspace, outside, server) = try await Self.setUp()
        try await withTeardown({ await Self.tearDown(workspace, server) }) {
            let stalled = Self.hold(server, "/g.bin", body)
            let daemon = try await Self.daemon(workspace, withoutOpenat2: withoutOpenat2)
            let id = try await Self.add(daemon, ["url": server.url("/g.bin").absoluteString, "filename": "g.bin"])
            await stalled()
            #expect(symlink(outside.victim, workspace.path("g.bin")) == 0)
            server.release()
            let done = try await daemon.waitUntilStopped(id, seconds: 30)
            #expect(done["state"] as? String == "completed", "\(done)")
            #expect(done["path"] as? String == workspace.path("g (1).bin"))
            #expect(workspace.holds("g (1).bin", body))
            #expect(
                (try? FileManager.default.destinationOfSymbolicLink(atPath: workspace.path("g.bin"))) == outside.victim)
            #expect(outside.isUntouched)
            _ = await Self.stop(daemon, withoutOpenat2: withoutOpenat2)
            #expect(Self.strays(workspace).isEmpty)
        }
    }

    @Test(
        "haul serve: the folder renamed and replaced by a link mid-download: finished in the folder it opened",
        arguments: [false, true])
    func daemonFolderSwapped(withoutOpenat2: Bool) async throws {
        let (workspace, outside, server) = try await Self.setUp()
        try await withTeardown({ await Self.tearDown(workspace, server) }) {
            let stalled = Self.hold(server, "/g.bin", body)
            let daemon = try await Self.daemon(workspace, withoutOpenat2: withoutOpenat2)
            let id = try await Self.add(
                daemon, ["url": server.url("/g.bin").absoluteString, "directory": "sub", "filename": "g.bin"])
            await stalled()
            #expect(rename(workspace.path("sub"), workspace.path("sub-moved")) == 0)
            #expect(symlink(outside.path, workspace.path("sub")) == 0)
            server.release()
            let done = try await daemon.waitUntilStopped(id, seconds: 30)
            #expect(done["state"] as? String == "completed", "\(done)")
            #expect(workspace.holds("sub-moved/g.bin", body))
            #expect(outside.isUntouched)
            _ = await Self.stop(daemon, withoutOpenat2: withoutOpenat2)
            #expect(Self.strays(workspace).isEmpty)
        }
    }

    @Test(
        "haul serve: a link in an allowed folder works while it stays inside; one leading out is refused, added or later",
        arguments: [false, true])
    func daemonLinkedFolders(withoutOpenat2: Bool) async throws {
        let (workspace, outside, server) = try await Self.setUp()
        try await withTeardown({ await Self.tearDown(workspace, server) }) {
            server.serve("/g.bin", .init(body: body))
            try FileManager.default.createDirectory(atPath: workspace.path("inner"), withIntermediateDirectories: true)
            #expect(symlink("inner", workspace.path("in-link")) == 0)
            #expect(symlink("../outside", workspace.path("out-link")) == 0)
            let daemon = try await Self.daemon(workspace, withoutOpenat2: withoutOpenat2)
            let url = server.url("/g.bin").absoluteString

            let refused = try await daemon.call(
                .POST, "/api/v1/downloads", json: ["url": url, "directory": "out-link", "filename": "g.bin"])
            #expect(refused.status == 403)
            let error = (refused.body as? [String: Any])?["error"] as? [String: Any]
            #expect(error?["code"] as? String == "forbiddenFolder")
            #expect((error?["message"] as? String)?.contains("leads out of") == true, "\(refused.body ?? "")")

            let inside = try await Self.add(daemon, ["url": url, "directory": "in-link", "filename": "g.bin"])
            let done = try await daemon.waitUntilStopped(inside, seconds: 30)
            #expect(done["state"] as? String == "completed", "\(done)")
            #expect(workspace.holds("inner/g.bin", body))

            // Added while the folder is a real one inside; by the time it starts, a link leading out stands there.
            try FileManager.default.createDirectory(atPath: workspace.path("sub"), withIntermediateDirectories: true)
            let later = try await Self.add(
                daemon, ["url": url, "directory": "sub", "filename": "g.bin", "paused": true])
            #expect(rename(workspace.path("sub"), workspace.path("sub-old")) == 0)
            #expect(symlink("../outside", workspace.path("sub")) == 0)
            #expect(try await daemon.call(.POST, "/api/v1/downloads/\(later)/resume").status == 200)
            let failed = try await daemon.waitUntilStopped(later, seconds: 30)
            #expect(failed["state"] as? String == "failed", "\(failed)")
            let reason = (failed["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(reason.contains("sub leads outside"), "\(failed)")
            #expect(outside.isUntouched)
            _ = await Self.stop(daemon, withoutOpenat2: withoutOpenat2)
            #expect(Self.strays(workspace).isEmpty)
        }
    }

    @Test(
        "haul serve: .. and absolute names in filename and directory never leave the folder: a path as a file name refused, a folder outside refused",
        arguments: [false, true])
    func daemonNames(withoutOpenat2: Bool) async throws {
        let (workspace, outside, server) = try await Self.setUp()
        try await withTeardown({ await Self.tearDown(workspace, server) }) {
            server.serve("/g.bin", .init(body: body))
            let daemon = try await Self.daemon(workspace, withoutOpenat2: withoutOpenat2)
            let url = server.url("/g.bin").absoluteString
            // A path as a file name is refused; one name that starts like a way up or a hidden file is made safe.
            for filename in ["../../escape.bin", "/etc/absolute.bin", ".."] {
                let refused = try await daemon.call(
                    .POST, "/api/v1/downloads", json: ["url": url, "filename": filename])
                #expect(refused.status == 400, "\(filename)")
            }
            for (filename, landed) in [("..escape.bin", "escape.bin"), (".absolute.bin", "absolute.bin")] {
                let id = try await Self.add(daemon, ["url": url, "filename": filename])
                let done = try await daemon.waitUntilStopped(id, seconds: 30)
                #expect(done["state"] as? String == "completed", "\(done)")
                let path = done["path"] as? String ?? ""
                #expect(
                    path.hasPrefix(workspace.files + "/") && !path.dropFirst(workspace.files.count + 1).contains("/"))
                #expect(path.hasSuffix(landed), "\(filename) → \(path)")
            }
            for directory in ["../outside", outside.path, "/etc"] {
                let refused = try await daemon.call(
                    .POST, "/api/v1/downloads", json: ["url": url, "directory": directory, "filename": "x.bin"])
                #expect(refused.status == 403, "\(directory)")
            }
            #expect(outside.isUntouched)
            #expect(!FileManager.default.fileExists(atPath: "/etc/x.bin"))
            _ = await Self.stop(daemon, withoutOpenat2: withoutOpenat2)
            #expect(Self.strays(workspace).isEmpty)
        }
    }

    @Test("haul serve: its state folder is made its owner's alone; token, serve.json and socket are 0600")
    func daemonStateFolder() async throws {
        let (workspace, outside, server) = try await Self.setUp()
        try await withTeardown({ await Self.tearDown(workspace, server) }) {
            try FileManager.default.createDirectory(atPath: workspace.state, withIntermediateDirectories: true)
            #expect(chmod(workspace.state, 0o755) == 0)
            // A link where serve.json is written first: replaced, never followed.
            #expect(symlink(outside.victim, workspace.state + "/serve.json.tmp") == 0)
            let daemon = try await Self.daemon(workspace, withoutOpenat2: false)
            var info = stat()
            for (name, kind, mode) in [
                ("", S_IFDIR, 0o700), ("/token", S_IFREG, 0o600), ("/serve.json", S_IFREG, 0o600),
                ("/haul.sock", S_IFSOCK, 0o600),
            ] {
                #expect(lstat(workspace.state + name, &info) == 0, "\(name)")
                #expect(UInt32(info.st_mode) & UInt32(S_IFMT) == UInt32(kind), "\(name)")
                #expect(UInt32(info.st_mode) & 0o7777 == UInt32(mode), "\(name)")
            }
            #expect(outside.isUntouched)
            _ = await Self.stop(daemon, withoutOpenat2: false)
        }
    }

    // MARK: Support

    static func setUp() async throws -> (Workspace, Outside, FaultServer) {
        guard getuid() == 0 else {
            throw HostileSetupError(
                message: "the hostile-user tests chown and mknod, which need root (CI runs as root)")
        }
        let workspace = try Workspace()
        return (workspace, try Outside(workspace), try await FaultServer.start())
    }

    static func tearDown(_ workspace: Workspace, _ server: FaultServer) async {
        await server.stop()
        workspace.remove()
    }

    struct HostileSetupError: Error, CustomStringConvertible {
        var message: String
        var description: String { message }
    }

    /// Serves `body` at `path`, holding back all but its first 256 KiB; the returned wait ends once those are out.
    static func hold(_ server: FaultServer, _ path: String, _ body: [UInt8]) -> @Sendable () async -> Void {
        server.serve(path, .init(body: body) { index, _ in index == 0 ? .hold(afterBytes: 256 << 10) : nil })
        let (stalls, stalled) = AsyncStream<Void>.makeStream()
        server.onStall { _ in stalled.yield() }
        return {
            var waits = stalls.makeAsyncIterator()
            _ = await waits.next()
        }
    }

    /// Waits for `haul` to exit; one still running after 60 s (hung on a FIFO, say) is killed and fails the test.
    static func finish(_ haul: HaulProcess) async -> (status: Int32, stdout: String, stderr: String) {
        let exited = await waitUntil(seconds: 60) { !haul.process.isRunning }
        if !exited { haul.signal(SIGKILL) }
        #expect(exited, "haul did not finish within 60 s")
        return await haul.finish()
    }

    /// `haul serve` on the workspace, as is or under a seccomp filter that answers ENOSYS to `openat2`.
    static func daemon(_ workspace: Workspace, withoutOpenat2: Bool) async throws -> DaemonProcess {
        let launcher =
            withoutOpenat2
            ? [
                "/usr/bin/python3",
                URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                    .deletingLastPathComponent().appendingPathComponent("support/without_openat2.py").path,
            ] : []
        return try await DaemonProcess(workspace, launcher: launcher)
    }

    /// Adds one download through the API; 201 expected.
    static func add(_ daemon: DaemonProcess, _ item: [String: Any]) async throws -> String {
        let added = try await daemon.call(.POST, "/api/v1/downloads", json: item)
        #expect(added.status == 201, "\(added.body ?? "")")
        return try #require((added.body as? [String: Any])?["id"] as? String)
    }

    /// Stops the daemon with SIGTERM and returns its log; under the filter, checks the log says the walk replaced
    /// `openat2`.
    static func stop(_ daemon: DaemonProcess, withoutOpenat2: Bool) async -> String {
        let stopped = await daemon.stop(SIGTERM)
        #expect(stopped.status == 0, "\(stopped.stderr)")
        #expect(stopped.stderr.contains("openat2 is not available here") == withoutOpenat2, "\(stopped.stderr)")
        return stopped.stderr
    }

    /// What is in the workspace's root besides its own folders and the processes' output: anything a download wrote
    /// where it should not.
    static func strays(_ workspace: Workspace) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: workspace.root)) ?? []
        return names.filter {
            !["files", "outside", "state"].contains($0)
                && !($0.hasPrefix("haul-") && ($0.hasSuffix(".out") || $0.hasSuffix(".err")))
        }
    }
}

/// A folder beside the download folder that nothing may write to, holding one file of someone else's.
struct Outside {
    let path: String
    static let victimBytes = Array("someone else's file\n".utf8)

    var victim: String { path + "/victim" }

    init(_ workspace: Workspace) throws {
        path = workspace.root + "/outside"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: path + "/victim", contents: Data(Self.victimBytes)))
    }

    /// Whether the folder holds the victim file alone, unchanged.
    var isUntouched: Bool {
        (try? FileManager.default.contentsOfDirectory(atPath: path)) == ["victim"]
            && FileManager.default.contents(atPath: victim).map { [UInt8]($0) } == Self.victimBytes
    }
}
