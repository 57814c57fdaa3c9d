import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Which process runs a download, among the processes that run downloads on one state folder's store (`haul get`
/// and `haul retry` without a daemon, `StateLock.joinRunners`). Each holds, for every download it runs, a lock on one
/// byte of the folder's `run.lock`, at an offset the download's id gives, and a shared lock on its first byte for as
/// long as it runs, which tells the others that it is there. The locks are those of an open file description
/// (`F_OFD_SETLK`): the kernel lets them go when the process ends, however it ends, and they do not conflict within
/// one description, so one manager's downloads never wait for each other. A download whose byte another process
/// holds is that process's: a folder download's name is not known before its first answer, so until then the part
/// file's lock cannot say so.
///
/// A process that starts while others run makes the file one byte longer: the length tells a process that started
/// alone whether another has come since (and may have run, or ended, downloads it read as queued), even one that has
/// ended again.
final class RunLocks: Sendable {
    private let descriptor: Int32
    /// Whether other processes ran downloads on the store when this one started.
    private let startedAmongOthers: Bool
    /// The file's length once this process started.
    private let lengthAtStart: off_t

    /// The locks of the state folder `state`, this process's presence taken; nil when its `run.lock` cannot be
    /// opened (each process then runs what it is asked, as if alone).
    init?(state: String) {
        guard let descriptor = try? StateFolder.open(state).openOwnFile("run.lock") else { return nil }
        self.descriptor = descriptor
        // Taken before the look for others: of two processes starting at once, the second to look sees the first.
        _ = Self.lock(descriptor, at: 0, type: F_RDLCK)
        var range = Self.range(at: 0, type: F_WRLCK)
        startedAmongOthers = fcntl(descriptor, Self.getLock, &range) != 0 || range.l_type != Int16(F_UNLCK)
        if startedAmongOthers {
            var byte: UInt8 = 0
            _ = pwrite(descriptor, &byte, 1, Self.length(of: descriptor))
        }
        lengthAtStart = Self.length(of: descriptor)
    }

    deinit { close(descriptor) }

    /// Takes the lock of `id`; false when another process holds it (taken already here, it is taken again). A file
    /// system that cannot lock (an error other than the lock being held) says nothing of other processes: the
    /// download runs here, as it would without these locks, rather than wait for ever.
    func hold(_ id: String) -> Bool {
        if Self.lock(descriptor, at: Self.offset(of: id), type: F_WRLCK) { return true }
        return errno != EAGAIN && errno != EACCES
    }

    /// Whether another process holds the lock of `id` (without taking it); false when the kernel cannot say.
    func isHeldElsewhere(_ id: String) -> Bool {
        var range = Self.range(at: Self.offset(of: id), type: F_WRLCK)
        return fcntl(descriptor, Self.getLock, &range) == 0 && range.l_type != Int16(F_UNLCK)
    }

    /// Lets the lock of `id` go.
    func release(_ id: String) { _ = Self.lock(descriptor, at: Self.offset(of: id), type: F_UNLCK) }

    /// Whether another process may have run downloads on the store since this one read its rows: one was there when
    /// this one started, or one has started since.
    var othersMayHaveRun: Bool { startedAmongOthers || Self.length(of: descriptor) != lengthAtStart }

    private static func length(of descriptor: Int32) -> off_t {
        var info = stat()
        return fstat(descriptor, &info) == 0 ? info.st_size : -1
    }

    private static func lock(_ descriptor: Int32, at offset: off_t, type: Int32) -> Bool {
        var range = range(at: offset, type: type)
        return fcntl(descriptor, setLock, &range) == 0
    }

    private static func range(at offset: off_t, type: Int32) -> Glibc.flock {
        var range = Glibc.flock()
        range.l_type = Int16(type)
        range.l_whence = Int16(SEEK_SET)
        range.l_start = offset
        range.l_len = 1
        return range
    }

    /// `F_OFD_GETLK` and `F_OFD_SETLK` of Linux's `fcntl.h` (since 3.15), which Glibc's module does not export
    /// without `_GNU_SOURCE`.
    private static let getLock: Int32 = 36
    private static let setLock: Int32 = 37

    /// The byte of `id`: FNV-1a of its text, from 1 to 2^62 (a lock may lie anywhere, whatever the file's length;
    /// the first byte is the processes').
    /// Read through `withUTF8`: iterating `utf8` goes through the string's index checks for every byte.
    static func offset(of id: String) -> off_t {
        var text = id
        let hash = text.withUTF8 { bytes in
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
            return hash
        }
        return off_t(hash >> 2) | 1
    }
}
