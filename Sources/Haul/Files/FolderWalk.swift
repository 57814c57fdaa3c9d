import CHaulSystem
import HaulCore
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Opening a folder beneath a held one, so that nothing on the way leads out of it.
enum FolderWalk {
    /// `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` (linux/openat2.h).
    private static let resolveBeneath: UInt64 = 0x08 | 0x02
    /// Set once the kernel answered ENOSYS (or EPERM, as some seccomp filters do) to `openat2`.
    private static let lacksOpenat2 = Atomic<Bool>(false)

    /// The folder `relative` names beneath the folder `root`, opened: `openat2` with `RESOLVE_BENEATH |
    /// RESOLVE_NO_MAGICLINKS` where the kernel has it (Linux 5.6 and later), `walk` where it does not or a seccomp
    /// filter refuses it. With `creating`, what is missing is made by `walk`.
    static func open(_ relative: String, beneath root: Int32, creating: Bool) -> Result<Int32, FileSystemErrno> {
        if !lacksOpenat2.load(ordering: .relaxed) {
            let flags = UInt64(O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            for _ in 0..<8 {
                let opened = haul_openat2(root, relative.isEmpty ? "." : relative, flags, 0, resolveBeneath)
                if opened >= 0 { return .success(opened) }
                let code = errno
                // EAGAIN: a rename elsewhere raced the kernel's check of a `..`; asking again is the documented cure.
                if code == EAGAIN { continue }
                if code == ENOSYS || code == EPERM {
                    lacksOpenat2.store(true, ordering: .relaxed)
                    break
                }
                if code == ENOENT && creating { break }
                return .failure(FileSystemErrno(code))
            }
        }
        return walk(relative, beneath: root, creating: creating)
    }

    /// Whether the kernel resolves beneath a folder itself (`openat2`): false before Linux 5.6, or under a seccomp
    /// filter that refuses it, where `walk` does the work instead. Asked once.
    static var kernelResolvesBeneath: Bool {
        if lacksOpenat2.load(ordering: .relaxed) { return false }
        let probe = haul_openat2(AT_FDCWD, ".", UInt64(O_RDONLY | O_DIRECTORY | O_CLOEXEC), 0, resolveBeneath)
        if probe >= 0 {
            close(probe)
            return true
        }
        if errno == ENOSYS || errno == EPERM {
            lacksOpenat2.store(true, ordering: .relaxed)
            return false
        }
        return true
    }

    /// The most links one walk follows before it gives up with ELOOP, as the kernel's own limit.
    static let linkLimit = 40

    /// The folder `relative` names beneath `root`, walked one component at a time with `openat(O_NOFOLLOW)` as
    /// systemd's `chase()` walks: a symbolic link is read (`readlinkat`) and its target walked in its place, `..`
    /// goes back up the folders walked so far. What `RESOLVE_BENEATH` refuses, this refuses with the same EXDEV: a
    /// link with an absolute target, a `..` above `root`. More than `linkLimit` links give ELOOP. With `creating`, a
    /// missing folder is made (`mkdirat`, 0755) beneath the one walked so far.
    static func walk(_ relative: String, beneath root: Int32, creating: Bool) -> Result<Int32, FileSystemErrno> {
        // The folders entered so far, each opened by the walk; the last is where the walk stands.
        var entered: [Int32] = []
        defer { for folder in entered { close(folder) } }
        var pending = Array(components(of: relative).reversed())
        var links = 0
        var made = 0
        while let name = pending.popLast() {
            if name == "." { continue }
            if name == ".." {
                guard let left = entered.popLast() else { return .failure(FileSystemErrno(EXDEV)) }
                close(left)
                continue
            }
            let current = entered.last ?? root
            let opened = openat(current, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if opened >= 0 {
                entered.append(opened)
                continue
            }
            let code = errno
            var info = stat()
            if fstatat(current, name, &info, AT_SYMLINK_NOFOLLOW) == 0,
                UInt32(info.st_mode) & UInt32(S_IFMT) == UInt32(S_IFLNK)
            {
                links += 1
                guard links <= linkLimit else { return .failure(FileSystemErrno(ELOOP)) }
                guard let target = readLink(name, in: current) else { return .failure(FileSystemErrno(errno)) }
                // Bytes, as the kernel reads the target: "/" and a combining mark are one Character.
                if target.utf8.first == UInt8(ascii: "/") { return .failure(FileSystemErrno(EXDEV)) }
                pending.append(contentsOf: components(of: target).reversed())
                continue
            }
            if code == ENOENT, creating, made < 256 {
                made += 1
                // EEXIST: made meanwhile by someone else, or a link left dangling: the next look decides. A folder
                // made is synced into its parent at once: a power cut must not lose the folder of a part file or of
                // the store whose rows say it is there.
                if mkdirat(current, name, 0o755) == 0 {
                    fsync(current)
                    pending.append(name)
                    continue
                }
                if errno == EEXIST {
                    pending.append(name)
                    continue
                }
                return .failure(FileSystemErrno(errno, creating: true))
            }
            return .failure(FileSystemErrno(code))
        }
        if let last = entered.popLast() { return .success(last) }
        let itself = openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        return itself >= 0 ? .success(itself) : .failure(FileSystemErrno(errno))
    }

    /// The names of a relative path, in order (empty ones dropped: `a//b` is `a/b`).
    private static func components(of path: String) -> [String] {
        path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
    }

    /// The target of the link `name` in the folder `folder`, nil with errno set when it cannot be read.
    private static func readLink(_ name: String, in folder: Int32) -> String? {
        var buffer = [CChar](repeating: 0, count: 4097)
        let count = readlinkat(folder, name, &buffer, buffer.count - 1)
        guard count >= 0 else { return nil }
        return String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The error for a folder that cannot be opened, or made (`creating`): `shown` is its path, `root` the folder it
    /// must lie beneath.
    static func error(_ code: Int32, _ shown: String, beneath root: String?, creating: Bool = false) -> DownloadError {
        let reason = String(cString: strerror(code))
        if creating {
            return code == ENOSPC
                ? DownloadError(.diskFull, "cannot create the folder \(shown): the disk is full (\(reason))")
                : DownloadError(.destinationNotWritable, "cannot create the folder \(shown) (\(reason))")
        }
        switch code {
        case EXDEV:
            return DownloadError(
                .untrustedFile,
                "\(shown) leads outside \(root ?? "its folder") (through a symbolic link or ..); Haul writes only "
                    + "beneath it")
        case ELOOP:
            return DownloadError(
                .untrustedFile,
                root == nil
                    ? "\(shown) is a symbolic link; Haul holds only a real folder there"
                    : "\(shown) goes through too many symbolic links")
        case ENOENT:
            return DownloadError(.destinationNotWritable, "destination folder \(shown) does not exist")
        case ENOTDIR:
            return DownloadError(.destinationNotWritable, "\(shown) is not a folder")
        case EACCES, EPERM:
            return DownloadError(.destinationNotWritable, "destination folder \(shown) cannot be opened (\(reason))")
        default:
            return PartFile.fileError(code, "cannot open the folder \(shown)")
        }
    }
}
