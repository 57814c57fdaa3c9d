import Foundation
import HaulCore
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A folder held open as a descriptor. Every name in it is looked at, opened, created, moved and deleted relative to
/// that descriptor (`fstatat`, `openat`, `renameat2`, `unlinkat`), never through a path string resolved again, so a
/// folder renamed or replaced by a link meanwhile changes nothing of where Haul writes. The model is systemd's
/// `chase()` and cap-std's capabilities. The descriptor closes with the object.
public final class HeldFolder: Sendable {
    /// Where the folder was when it was opened: for messages and for the store, never opened again by Haul.
    public let path: String
    /// The open folder (`O_DIRECTORY`).
    let descriptor: Int32
    /// The folder's device and inode.
    public let identity: FileIdentity
    /// Its owner's user id when it was opened.
    let owner: UInt32
    /// Its permission bits when it was opened.
    let permissions: UInt32

    private init(adopting descriptor: Int32, path: String) throws(DownloadError) {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let code = errno
            close(descriptor)
            throw PartFile.fileError(code, "cannot read the folder \(path)")
        }
        self.descriptor = descriptor
        self.path = path
        identity = FileIdentity(info)
        owner = UInt32(info.st_uid)
        permissions = UInt32(info.st_mode) & 0o7777
    }

    deinit { close(descriptor) }

    /// Opens the folder at `path` as its namer meant it: links on the way are followed (they are the namer's); the
    /// folder itself must not be a link unless `followsLinks` (`O_DIRECTORY | O_NOFOLLOW`). Callers that follow
    /// check the identity of what opened against the one they recorded.
    public static func open(_ path: String, followsLinks: Bool = false) throws(DownloadError) -> HeldFolder {
        let descriptor = Foundation.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (followsLinks ? 0 : O_NOFOLLOW))
        guard descriptor >= 0 else {
            var code = errno
            // A link to a folder fails with ENOTDIR under O_DIRECTORY: say what it is.
            var info = stat()
            if code == ENOTDIR, lstat(path, &info) == 0, UInt32(info.st_mode) & UInt32(S_IFMT) == UInt32(S_IFLNK) {
                code = ELOOP
            }
            throw FolderWalk.error(code, path, beneath: nil)
        }
        return try HeldFolder(adopting: descriptor, path: path)
    }

    /// The folder at `path`, made when missing with its missing parents, as `mkdir -p` makes them (0755), but each
    /// beneath the deepest folder of the path that exists: that one is opened as its namer meant it, and what is
    /// missing is made and opened beneath it (`folder(at:creating:)`), so a link planted on the way meanwhile cannot
    /// send the new folders elsewhere.
    public static func make(_ path: String) throws(DownloadError) -> HeldFolder {
        var existing = PathName.absolute(path)
        var missing: [String] = []
        var info = stat()
        while lstat(existing, &info) != 0, errno == ENOENT, existing != "/" {
            missing.insert(PathName.lastComponent(of: existing), at: 0)
            existing = PathName.folder(of: existing)
        }
        let descriptor = Foundation.open(existing, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else {
            let code = errno
            // A file on the way (`-d notes.txt/x`): named, rather than the whole path said not to be a folder.
            if code == ENOTDIR, let file = firstFile(on: existing), file != existing {
                throw DownloadError(
                    .destinationNotWritable,
                    "\(file) is a file, not a folder, so \(PathName.absolute(path)) cannot be one")
            }
            throw FolderWalk.error(code, existing, beneath: nil)
        }
        let base = try HeldFolder(adopting: descriptor, path: existing)
        return missing.isEmpty ? base : try base.folder(at: missing.joined(separator: "/"), creating: true)
    }

    /// The first of the folders on the way to `path` (absolute) that is something else, following links.
    private static func firstFile(on path: String) -> String? {
        var walked = ""
        for component in path.split(separator: "/") {
            walked += "/" + component
            var info = stat()
            guard stat(walked, &info) == 0 else { return nil }
            if info.st_mode & S_IFMT != S_IFDIR { return walked }
        }
        return nil
    }

    /// The folder `relative` names beneath this one. `..` and links are followed while they stay inside it; a link
    /// that leads out, a link with an absolute target, or a `..` above this folder fails with `untrustedFile`
    /// (`FolderWalk`). With `creating`, missing folders on the way are made beneath it (`mkdirat`, 0755).
    public func folder(at relative: String, creating: Bool = false) throws(DownloadError) -> HeldFolder {
        let shown = relative.isEmpty || relative == "." ? path : PathName.join(path, relative)
        switch FolderWalk.open(relative, beneath: descriptor, creating: creating) {
        case .success(let opened): return try HeldFolder(adopting: opened, path: shown)
        case .failure(let failure):
            throw FolderWalk.error(failure.code, shown, beneath: path, creating: failure.creating)
        }
    }

    /// The path of `name` in this folder, for messages.
    func path(of name: String) -> String { PathName.join(path, name) }

    /// What `name` is, without following a link; nil when nothing has that name.
    func entry(_ name: String) throws(DownloadError) -> FolderEntry? {
        var info = stat()
        guard fstatat(descriptor, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
            if errno == ENOENT { return nil }
            throw PartFile.fileError(errno, "cannot look at \(path(of: name))")
        }
        return FolderEntry(info)
    }

    /// Whether the folder has been deleted since it was opened (its last name is gone).
    var isDeleted: Bool {
        var info = stat()
        return fstat(descriptor, &info) == 0 && info.st_nlink == 0
    }

    /// Whether this process may create and delete names in the folder.
    var isWritable: Bool { faccessat(descriptor, ".", W_OK | X_OK, 0) == 0 }

    /// Opens the existing file `name` that `entry` describes, without following a link, blocking on a FIFO or taking
    /// a terminal (`O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`); checks that what opened is still that entry, so nothing
    /// swapped in between the look and the open is used.
    func open(_ name: String, as entry: FolderEntry, writing: Bool) throws(DownloadError) -> Int32 {
        let flags = (writing ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC
        let opened = openat(descriptor, name, flags)
        guard opened >= 0 else {
            if errno == ELOOP {
                throw DownloadError(.untrustedFile, "\(path(of: name)) is a symbolic link; Haul will not open it")
            }
            throw PartFile.fileError(errno, "cannot open \(path(of: name))")
        }
        var info = stat()
        guard fstat(opened, &info) == 0, FileIdentity(info) == entry.identity else {
            close(opened)
            throw DownloadError(
                .untrustedFile, "\(path(of: name)) was replaced while Haul opened it; it is left as it is")
        }
        return opened
    }

    /// Creates `name`, which must not exist yet (`O_CREAT | O_EXCL | O_NOFOLLOW`): whatever is planted under that
    /// name, a link included, makes this fail with `EEXIST` instead of being opened. Returns the descriptor or errno.
    func create(_ name: String, mode: mode_t = 0o644) -> Result<Int32, FileSystemErrno> {
        let created = changing {
            openat(descriptor, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode)
        }
        return created >= 0 ? .success(created) : .failure(FileSystemErrno(errno))
    }

    /// Removes the empty folder `name` in this folder; returns errno, 0 when removed.
    func removeFolder(_ name: String) -> Int32 {
        changing { unlinkat(descriptor, name, AT_REMOVEDIR) } == 0 ? 0 : errno
    }

    /// Makes the folder `name` in this folder (`mkdirat`); returns errno, 0 when made.
    func makeFolder(_ name: String, mode: mode_t = 0o755) -> Int32 {
        mkdirat(descriptor, name, mode) == 0 ? 0 : errno
    }

    /// Moves `source` to `target`, both names in this folder. Without `replacing` it never replaces anything:
    /// `renameat2(RENAME_NOREPLACE)`, or where the file system lacks that, `linkat` + `unlinkat` (atomic no-replace
    /// on every POSIX file system with hard links); EEXIST when `target` exists. With `replacing`, only a regular
    /// file at `target` is replaced (EEXIST for anything else: a link planted there is neither followed nor
    /// replaced). Returns errno, 0 when moved.
    func move(_ source: String, to target: String, replacing: Bool) -> Int32 {
        changing {
            if replacing {
                if let existing = try? entry(target), existing.kind != .regular { return EEXIST }
                return renameat(descriptor, source, descriptor, target) == 0 ? 0 : errno
            }
            if let renameat2 = Self.renameat2 {
                if renameat2(descriptor, source, descriptor, target, Self.renameNoReplace) == 0 { return 0 }
                // EINVAL: this file system cannot promise no-replace; anything else is the answer.
                if errno != EINVAL && errno != ENOSYS { return errno }
            }
            if linkat(descriptor, source, descriptor, target, 0) == 0 {
                unlinkat(descriptor, source, 0)
                return 0
            }
            let code = errno
            if code == EEXIST { return EEXIST }
            // File systems without hard links: look, then rename (a small race, never over a name seen taken).
            if (try? entry(target)) != nil { return EEXIST }
            return renameat(descriptor, source, descriptor, target) == 0 ? 0 : errno
        }
    }

    /// Whether another open of the regular file `name`, with `identity`, holds its lock (`PartFile`'s `flock`): a
    /// live process writes it. Found by asking for the lock without waiting, and giving it back at once.
    func isLockedElsewhere(_ name: String, identity: FileIdentity) -> Bool {
        let opened = openat(descriptor, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard opened >= 0 else { return false }
        defer { close(opened) }
        var info = stat()
        guard fstat(opened, &info) == 0, info.st_mode & S_IFMT == S_IFREG, FileIdentity(info) == identity else {
            return false
        }
        guard flock(opened, LOCK_SH | LOCK_NB) == 0 else { return errno == EWOULDBLOCK }
        flock(opened, LOCK_UN)
        return false
    }

    /// Deletes `name` when it is the regular file `identity` names: one `unlinkat`, never recursive, never of a
    /// link, a folder or a file Haul did not make. Returns whether it deleted.
    @discardableResult
    func removeFile(_ name: String, identity: FileIdentity) -> Bool {
        guard let found = try? entry(name), found.kind == .regular, found.identity == identity else { return false }
        return changing { unlinkat(descriptor, name, 0) == 0 }
    }

    /// The names in the folder, read through its descriptor (never through its path).
    func names() -> [String] {
        let copy = openat(descriptor, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard copy >= 0, let listing = fdopendir(copy) else {
            if copy >= 0 { close(copy) }
            return []
        }
        defer { closedir(listing) }
        var names: [String] = []
        while let entry = readdir(listing) {
            // Read through a pointer up to its NUL, never copied as the declared 256 bytes: a record in the listing's
            // buffer is only as long as its name, so a copy of the whole field reads past the last record, and
            // crashes when that is the end of a mapping.
            let name = String(
                cString: UnsafeRawPointer(entry).advanced(by: Self.nameOffset).assumingMemoryBound(to: CChar.self))
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Where a `dirent`'s name begins.
    private static let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!

    /// Flushes the folder's entries (a create, a rename) to the disk now.
    func sync() {
        fsync(descriptor)
    }

    /// Flushes the folder's entries to the disk, shared with every other caller syncing the same folder: returns
    /// once a sync that started after this call has finished (`FolderSyncs`).
    func syncShared() {
        FolderSyncs.shared.sync(self)
    }

    /// Runs `change` (a create, a rename or a delete of a name in this folder) while no other thread of the process
    /// changes it. The kernel lets one change into a folder at a time anyway; without this lock, the threads that
    /// wait spin on the folder's lock instead of sleeping (`rwsem_spin_on_owner`, on two cores with many small files
    /// finishing at once). One lock per folder, as the kernel's: changes in different folders never wait for each
    /// other.
    func changing<T>(_ change: () -> T) -> T {
        let key = identity
        let lock = Self.locks.withLock { locks in
            let entry = locks[key] ?? (NSLock(), 0)
            locks[key] = (entry.lock, entry.users + 1)
            return entry.lock
        }
        lock.lock()
        defer {
            lock.unlock()
            Self.locks.withLock { locks in
                guard let entry = locks[key] else { return }
                locks[key] = entry.users > 1 ? (entry.lock, entry.users - 1) : nil
            }
        }
        return change()
    }

    /// The lock of each folder being changed, and how many threads use it (removed when none does).
    private static let locks = Mutex<[FileIdentity: (lock: NSLock, users: Int)]>([:])

    /// `renameat2`, which Swift's Glibc module does not import (it needs `_GNU_SOURCE`); nil where the C library
    /// lacks it (glibc before 2.28).
    private static let renameat2:
        (@convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32)? = {
            guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "renameat2") else { return nil }
            return unsafeBitCast(
                symbol,
                to: (@convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32).self)
        }()
    private static let renameNoReplace: UInt32 = 1
}

/// An `errno` value as an error.
struct FileSystemErrno: Error, Equatable {
    let code: Int32
    /// Whether making a missing folder failed, rather than opening one.
    var creating = false
    init(_ code: Int32, creating: Bool = false) {
        self.code = code
        self.creating = creating
    }
}
