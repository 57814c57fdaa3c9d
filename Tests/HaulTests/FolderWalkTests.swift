import Foundation
import HaulCore
import Testing

@testable import Haul

#if canImport(Glibc)
    import Glibc
#endif

/// Opening folders beneath a held one: `openat2(RESOLVE_BENEATH)` and the walk that replaces it where the kernel has
/// none must agree on every path, and neither may leave the folder.
@Suite("Folders opened beneath a held one")
struct FolderWalkTests {
    /// A tree under a fresh folder: `root/inside/deep`, `root/outside`, and links of every kind in `root/inside`.
    struct Tree {
        let base: String
        var root: String { base + "/root" }

        init() throws {
            base = NSTemporaryDirectory() + "haul-walk-" + UUID().uuidString
            let manager = FileManager.default
            try manager.createDirectory(atPath: base + "/root/inside/deep", withIntermediateDirectories: true)
            try manager.createDirectory(atPath: base + "/outside", withIntermediateDirectories: true)
            #expect(FileManager.default.createFile(atPath: base + "/root/file", contents: Data("x".utf8)))
            for (name, target) in [
                ("inside/to-deep", "deep"), ("inside/to-sibling", "../inside/deep"), ("inside/to-root", ".."),
                ("inside/out", "../../outside"), ("inside/absolute", base + "/root/inside"), ("inside/loop", "loop"),
                ("inside/chain", "to-deep"), ("inside/dangling", "missing"), ("inside/to-file", "../file"),
            ] {
                #expect(symlink(target, base + "/root/" + name) == 0)
            }
        }

        func remove() { try? FileManager.default.removeItem(atPath: base) }

        func identity(_ path: String) -> FileIdentity? {
            var info = stat()
            return stat(path, &info) == 0 ? FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino)) : nil
        }
    }

    /// Each path, and what it must give: the folder it reaches (relative to root), or the errno.
    static let cases: [(path: String, result: Result<String, FileSystemErrno>)] = [
        ("", .success("")),
        (".", .success("")),
        ("inside", .success("inside")),
        ("inside/deep", .success("inside/deep")),
        ("inside//deep/", .success("inside/deep")),
        ("inside/to-deep", .success("inside/deep")),
        ("inside/chain", .success("inside/deep")),
        ("inside/to-sibling", .success("inside/deep")),
        ("inside/to-root", .success("")),
        ("inside/../inside/deep", .success("inside/deep")),
        ("inside/to-deep/..", .success("inside")),
        ("..", .failure(FileSystemErrno(EXDEV))),
        ("inside/../..", .failure(FileSystemErrno(EXDEV))),
        ("inside/out", .failure(FileSystemErrno(EXDEV))),
        ("inside/to-root/../outside", .failure(FileSystemErrno(EXDEV))),
        ("inside/absolute", .failure(FileSystemErrno(EXDEV))),
        ("inside/loop", .failure(FileSystemErrno(ELOOP))),
        ("inside/dangling", .failure(FileSystemErrno(ENOENT))),
        ("missing", .failure(FileSystemErrno(ENOENT))),
        ("file", .failure(FileSystemErrno(ENOTDIR))),
        ("inside/to-file", .failure(FileSystemErrno(ENOTDIR))),
    ]

    @Test("openat2 and the walk reach the same folder, or refuse with the same errno, for every path", arguments: cases)
    func agree(_ path: String, _ expected: Result<String, FileSystemErrno>) throws {
        let tree = try Tree()
        defer { tree.remove() }
        let root = open(tree.root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { close(root) }
        #expect(FolderWalk.kernelResolvesBeneath, "this kernel has openat2, so both ways are compared here")
        for (way, result) in [
            ("openat2", FolderWalk.open(path, beneath: root, creating: false)),
            ("walk", FolderWalk.walk(path, beneath: root, creating: false)),
        ] {
            switch (result, expected) {
            case (.success(let opened), .success(let folder)):
                var info = stat()
                #expect(fstat(opened, &info) == 0)
                let reached = FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
                #expect(reached == tree.identity(tree.root + "/" + folder), "\(way): \(path)")
                close(opened)
            case (.failure(let code), .failure(let wanted)):
                #expect(code == wanted, "\(way): \(path) gave \(String(cString: strerror(code.code)))")
            case (.success(let opened), _):
                close(opened)
                Issue.record("\(way): \(path) opened, expected \(expected)")
            case (.failure(let code), _):
                Issue.record("\(way): \(path) failed with \(String(cString: strerror(code.code)))")
            }
        }
    }

    @Test("creating makes what is missing beneath the folder, never through a link that leads out")
    func creating() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let held = try HeldFolder.open(tree.root)
        let made = try held.folder(at: "inside/to-deep/new/newer", creating: true)
        #expect(made.identity == tree.identity(tree.root + "/inside/deep/new/newer"))
        #expect(made.path == tree.root + "/inside/to-deep/new/newer")
        #expect(throws: DownloadError.self) { try held.folder(at: "inside/out/new", creating: true) }
        do { _ = try held.folder(at: "inside/out/new", creating: true) } catch {
            #expect(error.code == .untrustedFile)
            #expect(error.message.contains("leads outside \(tree.root)"), "\(error.message)")
        }
        #expect((try? FileManager.default.contentsOfDirectory(atPath: tree.base + "/outside")) == [])
        // A link left dangling inside is followed to where it points, made there, inside.
        let dangling = try held.folder(at: "inside/dangling", creating: true)
        #expect(dangling.identity == tree.identity(tree.root + "/inside/missing"))
    }

    @Test("a folder's names, read through its descriptor: every one, of every length up to 255 bytes, in UTF-8")
    func names() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let folder = tree.root + "/inside/deep"
        // Names of every length, many of them: the listing takes several reads, and its records are of every size.
        var made = Set(["é-ü-名前.part"])
        for index in 0..<2000 {
            let length = 1 + index % 255
            let name = String(String(index).padding(toLength: length, withPad: "n", startingAt: 0).prefix(length))
            made.insert(name)
        }
        for name in made { #expect(FileManager.default.createFile(atPath: folder + "/" + name, contents: nil)) }
        let held = try HeldFolder.open(folder)
        #expect(Set(held.names()) == made)
        #expect(held.names().count == made.count, "each name once, without . and ..")
    }

    @Test("allowed folders are found by their text, the deepest first, as given or with links resolved")
    func locate() throws {
        let tree = try Tree()
        defer { tree.remove() }
        #expect(symlink(tree.root, tree.base + "/alias") == 0)
        let allowed = try AllowedFolders([tree.base + "/alias", tree.root + "/inside"])
        #expect(allowed.roots.count == 2)
        #expect(allowed.locate(tree.root + "/inside/deep")?.relative == "deep")
        #expect(allowed.locate(tree.base + "/alias/file")?.relative == "file")
        #expect(allowed.locate(tree.root)?.relative == "")
        #expect(allowed.locate(tree.root + "side") == nil)
        #expect(allowed.locate(tree.base + "/outside") == nil)
        #expect(allowed.confine(.api))
        #expect(!allowed.confine(.socket))
        #expect(!AllowedFolders.none.confine(.api))
    }
}

extension FileSystemErrno: CustomStringConvertible {
    public var description: String { String(cString: strerror(code)) }
}
