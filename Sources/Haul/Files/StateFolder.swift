import Foundation
import HaulCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The state folder: the store, the lock, and the daemon's token, socket and `serve.json`. It is held open and
/// checked before anything in it is used: a real folder (not a link), owned by this process's user and writable by
/// nobody else (write bits for its group or others are taken away), so nobody else can plant a link under one of its
/// names. It is made with mode 0700 when missing. Its own files are opened through it with `O_NOFOLLOW`, created with
/// `O_EXCL`, and kept to their owner (0600).
public final class StateFolder: Sendable {
    /// The folder, held.
    public let folder: HeldFolder

    private init(_ folder: HeldFolder) {
        self.folder = folder
    }

    /// The folder's path.
    public var path: String { folder.path }

    /// Opens the state folder at `path`, making it (0700, with its missing parents) when it is missing, and checks
    /// it. Throws `untrustedFile` naming what is wrong: a link, another user's folder, a folder others may write to
    /// whose mode cannot be narrowed.
    public static func open(_ path: String) throws(DownloadError) -> StateFolder {
        var info = stat()
        if lstat(path, &info) != 0 {
            // The folders that get a new entry: the deepest one that exists, and each one made but the last.
            var changed = [PathName.absolute(path)]
            while let folder = changed.last, folder != "/", lstat(folder, &info) != 0, errno == ENOENT {
                changed.append(PathName.folder(of: folder))
            }
            changed.removeFirst()
            do {
                try FileManager.default.createDirectory(
                    atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw DownloadError(
                    .store, "cannot create the state folder \(path): \(error.localizedDescription)", underlying: error)
            }
            // Synced into their parents: a power cut must not lose the folder whose store said an add was made.
            for folder in changed {
                let descriptor = Foundation.open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                if descriptor >= 0 {
                    fsync(descriptor)
                    close(descriptor)
                }
            }
        }
        let folder: HeldFolder
        do { folder = try HeldFolder.open(path) } catch {
            throw DownloadError(error.code, "the state folder: \(error.message)", underlying: error)
        }
        if folder.owner != geteuid() {
            throw DownloadError(
                .untrustedFile,
                "the state folder \(path) belongs to another user (uid \(folder.owner)); Haul keeps its state only "
                    + "in a folder of its user's")
        }
        // A folder of the user's that others may write to (made by hand under umask 002, or by an older Haul) loses
        // those write bits: nobody else may plant a file in it.
        if folder.permissions & 0o022 != 0, fchmod(folder.descriptor, mode_t(folder.permissions & ~0o022)) != 0 {
            throw DownloadError(
                .untrustedFile,
                "the state folder \(path) can be written by other users (mode \(String(folder.permissions, radix: 8)))"
                    + " and cannot be narrowed (\(String(cString: strerror(errno)))); Haul keeps its state only where "
                    + "nobody else can plant a file: chmod 700 \(path)")
        }
        return StateFolder(folder)
    }

    /// Makes the folder its owner's alone (0700), as a folder holding a socket bound by path must be: Linux has no
    /// `bindat`, so the socket's folder is what keeps others from reaching or replacing it.
    public func restrictToOwner() throws(DownloadError) {
        guard folder.permissions & 0o077 != 0 else { return }
        guard fchmod(folder.descriptor, 0o700) == 0 else {
            throw PartFile.fileError(errno, "cannot make the state folder \(path) its owner's alone (chmod 700)")
        }
    }

    /// Flushes the folder's entries to the disk: SQLite syncs the folder when it makes a WAL, not when it makes the
    /// database file itself.
    public func sync() {
        folder.sync()
    }

    /// The path of `name` in the folder (for what can only be named by path: SQLite's database, a socket to bind).
    public func path(of name: String) -> String { folder.path(of: name) }

    /// Opens the file `name` for reading and writing, making it (0600) when missing; it must be a regular file of
    /// this user's with one link. For the lock file.
    public func openOwnFile(_ name: String) throws(DownloadError) -> Int32 {
        let descriptor = openat(folder.descriptor, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw refusal(name, errno) }
        if let problem = Self.problem(of: descriptor) {
            close(descriptor)
            throw DownloadError(.untrustedFile, "\(path(of: name)) \(problem); Haul will not use it")
        }
        return descriptor
    }

    /// The contents of the file `name`, nil when there is none. It must be a regular file of this user's with one
    /// link, and with `secret`, readable by nobody else (mode 0600 or tighter).
    public func read(_ name: String, secret: Bool = false) throws(DownloadError) -> Data? {
        let descriptor = openat(folder.descriptor, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else {
            if errno == ENOENT { return nil }
            throw refusal(name, errno)
        }
        defer { close(descriptor) }
        if let problem = Self.problem(of: descriptor, secret: secret) {
            throw DownloadError(.untrustedFile, "\(path(of: name)) \(problem); Haul will not use it")
        }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress!, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw PartFile.fileError(errno, "cannot read \(path(of: name))")
            }
            if count == 0 { break }
            data.append(contentsOf: buffer[..<count])
        }
        return data
    }

    /// Makes the file `name` (0600) holding `data`, which must not exist yet (`O_EXCL | O_NOFOLLOW`), and syncs it.
    public func create(_ name: String, _ data: Data) throws(DownloadError) {
        let descriptor = openat(
            folder.descriptor, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw refusal(name, errno) }
        defer { close(descriptor) }
        try write(data, to: descriptor, name)
    }

    /// Replaces the file `name` by one holding `data` (0600): written under a temporary name made with `O_EXCL`,
    /// synced, then renamed over `name` within the folder, so a reader finds the old file or the new one, whole.
    public func replace(_ name: String, with data: Data) throws(DownloadError) {
        let temporary = name + ".tmp"
        unlinkat(folder.descriptor, temporary, 0)
        try create(temporary, data)
        guard renameat(folder.descriptor, temporary, folder.descriptor, name) == 0 else {
            let code = errno
            unlinkat(folder.descriptor, temporary, 0)
            throw PartFile.fileError(code, "cannot rename \(path(of: temporary)) to \(name)")
        }
        folder.sync()
    }

    /// Deletes `name` when it is a regular file or a socket (a stale `serve.json`, a dead daemon's socket); never a
    /// folder, never recursive.
    public func remove(_ name: String) {
        guard let entry = try? folder.entry(name), entry.kind == .regular || entry.kind == .socket else { return }
        unlinkat(folder.descriptor, name, 0)
    }

    /// Gives the socket `name`, bound by path a moment ago, to its owner alone (0600).
    public func restrictSocket(_ name: String) {
        guard let entry = try? folder.entry(name), entry.kind == .socket else { return }
        fchmodat(folder.descriptor, name, 0o600, 0)
    }

    private func write(_ data: Data, to descriptor: Int32, _ name: String) throws(DownloadError) {
        let failure: Int32 = data.withUnsafeBytes { bytes in
            var written = 0
            while written < bytes.count {
                let count = Glibc.write(descriptor, bytes.baseAddress! + written, bytes.count - written)
                if count < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                written += count
            }
            return fsync(descriptor) == 0 ? 0 : errno
        }
        if failure != 0 { throw PartFile.fileError(failure, "cannot write \(path(of: name))") }
    }

    private func refusal(_ name: String, _ code: Int32) -> DownloadError {
        if code == ELOOP {
            return DownloadError(.untrustedFile, "\(path(of: name)) is a symbolic link; Haul will not use it")
        }
        if code == EEXIST {
            return DownloadError(.untrustedFile, "\(path(of: name)) appeared while Haul made it; Haul will not use it")
        }
        return PartFile.fileError(code, "cannot open \(path(of: name))")
    }

    /// What is wrong with the open file `descriptor` as one of the state folder's own files, nil when nothing is.
    static func problem(of descriptor: Int32, secret: Bool = false) -> String? {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return "cannot be examined" }
        let entry = FolderEntry(info)
        if let reason = entry.distrust(owner: geteuid()) { return reason }
        if secret, entry.permissions & 0o077 != 0 {
            return "can be read by other users (mode \(String(entry.permissions, radix: 8)); chmod 600 it)"
        }
        return nil
    }
}
