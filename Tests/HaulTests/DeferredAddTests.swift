import Foundation
import GRDB
import HaulCore
import HaulTesting
import Testing

@testable import Haul

/// The daemon's add: the manager takes the download at once and the store commits it with the adds around it.
@Suite("Adds whose commit is awaited later", .timeLimit(.minutes(1)), .teardowns)
struct DeferredAddTests {
    func request(_ h: Harness, _ path: String) -> DownloadRequest {
        DownloadRequest(url: h.server.url(path), destination: .directory(h.folder), isPaused: true, origin: .api)
    }

    @Test("once committed, the downloads are in the store: a new manager on it finds them, in order")
    func committedIsStored() async throws {
        let h = try await Harness.make()
        let manager = try h.manager()
        var commits: [(DownloadManager.Added, DownloadStore.Commit)] = []
        for index in 0..<20 {
            let added = try await manager.addOneDeferringCommit(request(h, "/f\(index)"))
            #expect(added.download.state == .paused && added.added.isNew)
            commits.append((added.added, added.commit))
        }
        // The same URL again is found before its row is committed.
        let again = try await manager.addOneDeferringCommit(request(h, "/f3"))
        #expect(!again.added.isNew && again.added.id == commits[3].0.id)
        for (added, commit) in commits.reversed() { try await manager.committed(commit, rollingBack: [added]) }
        await manager.shutdown()
        let reopened = try h.manager()
        let stored = try await reopened.snapshots()
        #expect(stored.map(\.id) == commits.map(\.0.id))
        await reopened.shutdown()
    }

    @Test("a commit the store refuses undoes the add: the download is gone and subscribers are told")
    func refusedCommitRollsBack() async throws {
        let h = try await Harness.make()
        let manager = try h.manager()
        let events = manager.events()
        // Another connection breaks the store under the manager: its insert will fail.
        let other = try DatabaseQueue(path: h.stateDirectory + "/haul.sqlite")
        try await other.write { db in try db.execute(sql: "DROP TABLE download") }
        let added = try await manager.addOneDeferringCommit(request(h, "/f"))
        await #expect(throws: DownloadError.self) {
            try await manager.committed(added.commit, rollingBack: [added.added])
        }
        await #expect(throws: DownloadError.self) { try await manager.snapshot(added.added.id) }
        var seen: [String] = []
        for await event in events {
            switch event {
            case .added(let download): seen.append("added \(download.id)")
            case .removed(let id): seen.append("removed \(id)")
            default: continue
            }
            if seen.count == 2 { break }
        }
        #expect(seen == ["added \(added.added.id)", "removed \(added.added.id)"])
        await manager.shutdown()
    }
}

@Suite("A store owned by one process", .teardowns)
struct ExclusiveStoreTests {
    @Test("opened for one process, it keeps what the manager writes; an ordinary open after it sees it all")
    func exclusiveRoundTrip() async throws {
        let h = try await Harness.make()
        var configuration = DownloadManager.Configuration(stateDirectory: h.stateDirectory)
        configuration.ownsStateDirectory = true
        configuration.startsStoredDownloads = false
        do {
            let manager = try DownloadManager(configuration: configuration)
            for index in 0..<5 {
                let added = try await manager.addOneDeferringCommit(
                    DownloadRequest(url: h.server.url("/f\(index)"), destination: .directory(h.folder), isPaused: true))
                try await manager.committed(added.commit, rollingBack: [added.added])
            }
            try await manager.setPriority(.high, for: try await manager.snapshots()[2].id)
            await manager.shutdown()
        }
        // No shared-memory index was made: the WAL index lived in the process.
        #expect(!FileManager.default.fileExists(atPath: h.stateDirectory + "/haul.sqlite-shm"))
        let reopened = try h.manager()
        let stored = try await reopened.snapshots()
        #expect(stored.count == 5 && stored[0].priority == .high)
        await reopened.shutdown()
    }
}

@Suite("Paths and folders", .teardowns)
struct PathNameTests {
    @Test("a path is absolute by its first byte: a combining mark after the / makes one Character, not a relative path")
    func combiningMark() {
        let path = "/\u{301}folder/file"
        #expect(!path.hasPrefix("/"), "Swift compares Characters: the premise of the test")
        #expect(PathName.absolute(path) == path)
    }

    /// Every string of up to 7 characters from an alphabet that makes every kind of component.
    static func shortPaths() -> [String] {
        let alphabet: [Character] = ["/", ".", "a"]
        var paths = [""]
        var all: [String] = []
        for _ in 0..<7 {
            paths = paths.flatMap { path in alphabet.map { path + String($0) } }
            all += paths
        }
        return all
    }

    @Test("the quick check for a normalised absolute path agrees with normalising, over every short path")
    func quickCheckAgrees() {
        for path in Self.shortPaths() {
            #expect(
                PathName.isNormalizedAbsolute(path) == (path.hasPrefix("/") && PathName.normalized(path) == path),
                "\(path)")
        }
    }

    @Test("folder, name and joining agree with Foundation's NSString over every short normalised absolute path")
    func lexicalPartsAgree() {
        // Only where the lexical reading applies: the others go to Foundation itself (whose
        // `deletingLastPathComponent` traps on "." here).
        let all = Self.shortPaths().filter(PathName.isNormalizedAbsolute)
        #expect(all.count > 50)
        for path in all + ["/tmp/x/f0001.bin", "/é/ü.txt", "/a b/c d"] {
            #expect(PathName.folder(of: path) == (path as NSString).deletingLastPathComponent, "\(path)")
            #expect(PathName.lastComponent(of: path) == (path as NSString).lastPathComponent, "\(path)")
            for name in ["a", "..", ".", "", "a/b", "f (1).bin", "ü"] {
                #expect(
                    PathName.appending(name, to: path) == (path as NSString).appendingPathComponent(name),
                    "\(path) + \(name)")
            }
        }
    }

    /// Foundation's `deletingLastPathComponent` traps on a one-character name ("x", "x/", "é"), as `-o x` gives.
    @Test(
        "the folder of a relative or untidy path, as NSString gives it, without Foundation",
        arguments: [
            ("x", ""), ("x/", ""), ("a//", ""), ("é", ""), (".", ""), ("ab", ""), ("./x", "."), ("../f", ".."),
            ("a/b/", "a"), ("a//b", "a"), ("/", "/"), ("//", "/"), ("", ""), ("/x", "/"), ("/ab/", "/"),
            ("new/deeper/f.bin", "new/deeper"),
        ])
    func folderOfAnyPath(_ path: String, _ folder: String) {
        #expect(PathName.folder(of: path) == folder)
    }

    @Test("a folder opens and is writable; a file, a missing path, a file's child and a link do not open")
    func heldFolders() throws {
        let root = NSTemporaryDirectory() + "haul-paths-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: root + "/dir", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        #expect(FileManager.default.createFile(atPath: root + "/file", contents: Data("x".utf8)))
        try FileManager.default.createSymbolicLink(atPath: root + "/link", withDestinationPath: root + "/dir")
        #expect(try HeldFolder.open(root + "/dir").isWritable)
        #expect(try HeldFolder.open(root + "/dir/").identity == HeldFolder.open(root + "/dir").identity)
        for (path, code, words) in [
            ("/file", DownloadError.Code.destinationNotWritable, "is not a folder"),
            ("/missing", .destinationNotWritable, "does not exist"),
            ("/file/x", .destinationNotWritable, "is not a folder"),
            ("/link", .untrustedFile, "is a symbolic link"),
        ] {
            #expect(throws: DownloadError.self) { try HeldFolder.open(root + path) }
            do { _ = try HeldFolder.open(root + path) } catch {
                #expect(error.code == code, "\(path)")
                #expect(error.message.contains(words), "\(path): \(error.message)")
            }
        }
    }
}
