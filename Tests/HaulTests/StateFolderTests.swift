import Foundation
import HaulCore
import Testing

@testable import Haul

#if canImport(Glibc)
    import Glibc
#endif

/// The state folder and the daemon's files in it: nobody else's link, folder or file is ever used.
@Suite("The state folder")
struct StateFolderTests {
    let base = NSTemporaryDirectory() + "haul-state-" + UUID().uuidString

    init() throws {
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
    }

    func mode(_ path: String) -> UInt32 {
        var info = stat()
        return lstat(path, &info) == 0 ? UInt32(info.st_mode) & 0o7777 : 0
    }

    @Test("made 0700 with its parents; others' write bits taken away; a link or another user's folder refused")
    func folder() throws {
        defer { try? FileManager.default.removeItem(atPath: base) }
        let made = try StateFolder.open(base + "/a/b/state")
        #expect(mode(made.path) == 0o700)

        let shared = base + "/shared"
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true)
        chmod(shared, 0o777)
        _ = try StateFolder.open(shared)
        #expect(mode(shared) == 0o755)

        #expect(symlink(made.path, base + "/link") == 0)
        #expect(throws: DownloadError.self) { try StateFolder.open(base + "/link") }
        do { _ = try StateFolder.open(base + "/link") } catch {
            #expect(error.code == .untrustedFile)
            #expect(error.message.contains("is a symbolic link"), "\(error.message)")
        }

        let foreign = base + "/foreign"
        try FileManager.default.createDirectory(atPath: foreign, withIntermediateDirectories: true)
        #expect(chown(foreign, 65534, 65534) == 0, "chown needs root (CI runs as root)")
        do {
            _ = try StateFolder.open(foreign)
            Issue.record("another user's folder was taken")
        } catch {
            #expect(error.message.contains("belongs to another user (uid 65534)"), "\(error.message)")
        }
    }

    @Test("its files: made O_EXCL 0600, replaced whole, never read or written through a link, a secret kept secret")
    func files() throws {
        defer { try? FileManager.default.removeItem(atPath: base) }
        let state = try StateFolder.open(base + "/state")
        let victim = base + "/victim"
        #expect(FileManager.default.createFile(atPath: victim, contents: Data("victim".utf8)))

        try state.create("token", Data("secret".utf8))
        #expect(mode(state.path(of: "token")) == 0o600)
        #expect(try state.read("token", secret: true) == Data("secret".utf8))
        #expect(throws: DownloadError.self) { try state.create("token", Data("again".utf8)) }
        chmod(state.path(of: "token"), 0o644)
        #expect(throws: DownloadError.self) { try state.read("token", secret: true) }

        try state.replace("serve.json", with: Data("{}".utf8))
        try state.replace("serve.json", with: Data("{\"a\":1}".utf8))
        #expect(try state.read("serve.json") == Data("{\"a\":1}".utf8))
        #expect(mode(state.path(of: "serve.json")) == 0o600)
        #expect(!FileManager.default.fileExists(atPath: state.path(of: "serve.json.tmp")))

        for name in ["linked", "serve.lock"] {
            #expect(symlink(victim, state.path(of: name)) == 0)
        }
        #expect(throws: DownloadError.self) { try state.read("linked") }
        #expect(throws: DownloadError.self) { try state.openOwnFile("serve.lock") }
        #expect(throws: DownloadError.self) { try state.create("linked", Data("x".utf8)) }
        state.remove("linked")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: state.path(of: "linked"))) == victim)
        #expect(FileManager.default.contents(atPath: victim) == Data("victim".utf8))
    }
}
