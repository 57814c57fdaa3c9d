import CHaulSystem
import Foundation
import HaulCore
import NIOCore
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The `NAME.part` file of one download: opened once through its download's held folder (`DownloadFolder`), locked
/// with `flock` so no other process writes it, written with positional writes of the received buffers.
public final class PartFile: @unchecked Sendable {
    /// The file's path when it was opened (for messages: Haul never opens it by path).
    public let path: String
    /// The folder it is in, and its name there: every later look at it goes through the folder.
    let folder: HeldFolder
    let name: String
    /// Its device and inode, which the store records as the download's own part file.
    public let identity: FileIdentity
    private let descriptor: Int32

    /// Takes `descriptor`, open on `name` in `folder`, and locks it; throws `locked` when another process holds it
    /// (the descriptor is closed then).
    init(descriptor: Int32, name: String, in folder: HeldFolder) throws(DownloadError) {
        let path = folder.path(of: name)
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let code = errno
            close(descriptor)
            throw Self.fileError(code, "cannot stat \(path)")
        }
        if flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            close(descriptor)
            if code == EWOULDBLOCK {
                throw DownloadError(.locked, "another process is downloading to \(path)")
            }
            throw Self.fileError(code, "cannot lock \(path)")
        }
        self.path = path
        self.folder = folder
        self.name = name
        identity = FileIdentity(info)
        self.descriptor = descriptor
    }

    deinit { close(descriptor) }

    /// Gives up the lock while the descriptor stays open: called when the writer is done, so the next run (in this
    /// process, right after a pause) can take it even if something still holds this object for a moment.
    public func unlock() {
        flock(descriptor, LOCK_UN)
    }

    /// Takes the lock again after `unlock()` (a run that goes on writing, as a stream's assembly does); throws
    /// `locked` when another process took it meanwhile.
    public func relock() throws(DownloadError) {
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            throw DownloadError(.locked, "another process is downloading to \(path)")
        }
    }

    /// The raw descriptor, for a stream's assembly (positional writes of decrypted segments).
    var fileDescriptor: Int32 { descriptor }

    /// The length of the file on disk.
    public func length() throws(DownloadError) -> Int64 {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw Self.fileError(errno, "cannot stat \(path)") }
        return Int64(info.st_size)
    }

    /// Writes the readable bytes of `buffer` at `offset`, without copying them.
    public func write(_ buffer: ByteBuffer, at offset: Int64) throws(DownloadError) {
        let result: Int32 = buffer.withUnsafeReadableBytes { bytes in
            var written = 0
            while written < bytes.count {
                let count = pwrite(
                    descriptor, bytes.baseAddress! + written, bytes.count - written, off_t(offset) + off_t(written))
                if count < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                written += count
            }
            return 0
        }
        if result != 0 { throw Self.fileError(result, "cannot write \(path)") }
    }

    /// Reads `count` bytes at `offset` (fewer at the end of the file).
    public func read(count: Int, at offset: Int64) throws(DownloadError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var total = 0
        while total < count {
            let got = bytes.withUnsafeMutableBytes {
                pread(descriptor, $0.baseAddress! + total, count - total, off_t(offset) + off_t(total))
            }
            if got < 0 {
                if errno == EINTR { continue }
                throw Self.fileError(errno, "cannot read \(path)")
            }
            if got == 0 { break }
            total += got
        }
        return Array(bytes.prefix(total))
    }

    /// Copies the bytes of `ranges` from `source` (a part file of an earlier lease, open for reading) to the same
    /// offsets here: in the kernel where it can (`copy_file_range`, a reflink on file systems that share blocks),
    /// else by reading and writing. A range that ends past the end of `source` stops there.
    public func copy(_ ranges: [Range<Int64>], from source: Int32, named sourcePath: String) throws(DownloadError) {
        for range in ranges where !range.isEmpty {
            var offset = range.lowerBound
            var inKernel = true
            while offset < range.upperBound {
                let left = range.upperBound - offset
                if inKernel {
                    let copied = haul_copy_file_range(source, offset, descriptor, offset, UInt64(left))
                    if copied > 0 {
                        offset += copied
                        continue
                    }
                    if copied == 0 { break }
                    if errno == EINTR { continue }
                    guard [EXDEV, ENOSYS, EINVAL, EOPNOTSUPP].contains(errno) else {
                        throw Self.fileError(errno, "cannot copy \(sourcePath) to \(path)")
                    }
                    inKernel = false
                }
                var buffer = [UInt8](repeating: 0, count: Int(min(left, 1 << 20)))
                let got = buffer.withUnsafeMutableBytes { pread(source, $0.baseAddress!, $0.count, off_t(offset)) }
                if got < 0 {
                    if errno == EINTR { continue }
                    throw Self.fileError(errno, "cannot read \(sourcePath)")
                }
                if got == 0 { break }
                buffer.removeLast(buffer.count - got)
                try write(ByteBuffer(bytes: buffer), at: offset)
                offset += Int64(got)
            }
        }
    }

    /// Cuts the file to `length` bytes.
    public func truncate(to length: Int64) throws(DownloadError) {
        if try self.length() == length { return }
        guard ftruncate(descriptor, off_t(length)) == 0 else { throw Self.fileError(errno, "cannot truncate \(path)") }
    }

    /// Asks the kernel to start writing `count` bytes at `offset` to the disk now, without waiting for it
    /// (`sync_file_range` with `SYNC_FILE_RANGE_WRITE`). Only a head start: it proves nothing durable, and a failure
    /// is left to the next `syncData`, which reports it. Without it, the kernel would hold the bytes back for up to
    /// 30 s and the next checkpoint, or the final sync before the rename, would wait for all of them at once.
    /// Returns whether the kernel took the request.
    @discardableResult
    public func startWriteback(from offset: Int64, count: Int64) -> Bool {
        Self.syncFileRange?(descriptor, offset, count, Self.syncFileRangeWrite) == 0
    }

    /// `sync_file_range`, which Swift's Glibc module does not import (it needs `_GNU_SOURCE`); nil where the C
    /// library lacks it, and then `startWriteback` does nothing.
    private static let syncFileRange: (@convention(c) (Int32, Int64, Int64, UInt32) -> Int32)? = {
        // RTLD_DEFAULT: the symbol from any library already loaded.
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "sync_file_range") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32, Int64, Int64, UInt32) -> Int32).self)
    }()
    private static let syncFileRangeWrite: UInt32 = 2

    /// Whether `startWriteback` can do anything here.
    static var canStartWriteback: Bool { syncFileRange != nil }

    /// Flushes the file's data and length to the disk, not its timestamps (`fdatasync`): enough for the bytes to
    /// be there after a crash, and cheaper than `fsync`.
    public func syncData() throws(DownloadError) {
        guard fdatasync(descriptor) == 0 else { throw Self.fileError(errno, "cannot sync \(path)") }
    }

    /// Flushes the file's data and metadata to the disk.
    public func sync() throws(DownloadError) {
        guard fsync(descriptor) == 0 else { throw Self.fileError(errno, "cannot sync \(path)") }
    }

    /// Whether the file is still in its folder under its name: false when another program deleted it (or its
    /// folder), or put another file in its place.
    public func isStillInFolder() -> Bool { statusInFolder() != nil }

    /// The open file's status when it is still in its folder under its name (`isStillInFolder`), nil otherwise: one
    /// look serves the checks after it (`firstMissingByte(from:to:status:)`).
    func statusInFolder() -> stat? {
        var open = stat()
        guard fstat(descriptor, &open) == 0, open.st_nlink > 0, let entry = try? folder.entry(name),
            entry.identity == identity
        else { return nil }
        return open
    }

    /// Hex digests of the file, read through its descriptor.
    func hexDigests(algorithms: Set<Checksum.Algorithm>, range: Range<Int64>? = nil) throws(DownloadError)
        -> [Checksum.Algorithm: String]
    {
        try FileDigest.hexDigests(of: descriptor, named: path, algorithms: algorithms, range: range)
    }

    /// Where the intact bytes of `start..<end` end, nil when every one is there: the file's end when someone cut it
    /// there, or, when a later write made it long again, a mebibyte before the hole the cut left, where the file
    /// system reports holes only where nothing was written (a hole starts at a block boundary, and the cut may lie
    /// anywhere in the block before it, which reads as zeros). Haul wrote every byte of the ranges it asks about,
    /// so a missing one means another program changed the file.
    public func firstMissingByte(from start: Int64, to end: Int64) -> Int64? {
        guard start < end else { return nil }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return start }
        return firstMissingByte(from: start, to: end, status: info)
    }

    /// `firstMissingByte(from:to:)` with the file's status just looked at.
    func firstMissingByte(from start: Int64, to end: Int64, status info: stat) -> Int64? {
        guard start < end else { return nil }
        let length = Int64(info.st_size)
        var missing = length < end ? max(start, length) : nil
        if start < length, Self.holesAreTrustworthy(descriptor, device: info.st_dev) {
            // SEEK_HOLE: the next hole at or after `start` (the end of the file counts as one).
            let hole = Int64(lseek(descriptor, off_t(start), 4))
            if hole >= 0, hole < min(end, length) {
                let margin = max(Int64(info.st_blksize), 1 << 20)
                let intact = max(start, (hole - margin) / margin * margin)
                missing = min(missing ?? intact, intact)
            }
        }
        return missing
    }

    /// The first hole of the file open at `descriptor` (a range never written), before its end; nil when it has
    /// none, or when the file system cannot show holes (FUSE, NFS, and the others `holesAreTrustworthy` leaves out:
    /// there no answer is given, rather than a wrong one).
    static func firstHole(in descriptor: Int32) -> Int64? {
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_size > 0, holesAreTrustworthy(descriptor, device: info.st_dev)
        else { return nil }
        let hole = Int64(lseek(descriptor, 0, 4))  // SEEK_HOLE
        return hole >= 0 && hole < Int64(info.st_size) ? hole : nil
    }

    /// Whether the file system keeps written bytes as data even when they are zeros, so a hole means nothing was
    /// written there: ext4, XFS, Btrfs, tmpfs, F2FS. Not ZFS, which stores blocks of zeros as holes when it
    /// compresses; there only the length is checked.
    ///
    /// A yes is kept for the device (`device`, the file's `st_dev`): a download of many small files would otherwise
    /// ask for each file the same answer about the same file system. Should the device number come back for another
    /// file system after an unmount, that yes is at worst wrong for ZFS, where a hole then looks like bytes cut away:
    /// the download stops and stores less than it holds, and loses nothing (elsewhere a file system that shows no
    /// holes reports none). A no is not kept: it would hide real cuts on a file system mounted later.
    private static func holesAreTrustworthy(_ descriptor: Int32, device: dev_t) -> Bool {
        if trustedHoles.withLock({ $0.contains(device) }) { return true }
        // `struct statfs` starts with `f_type` (a long); the buffer is larger than the whole struct.
        guard let fstatfs else { return false }
        var buffer = [Int](repeating: 0, count: 32)
        guard buffer.withUnsafeMutableBytes({ fstatfs(descriptor, $0.baseAddress!) }) == 0 else { return false }
        let trusted: Set<Int> = [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994, 0xF2F5_2010]
        guard trusted.contains(buffer[0]) else { return false }
        trustedHoles.withLock { _ = $0.insert(device) }
        return true
    }

    /// The devices whose file systems `holesAreTrustworthy` said yes to.
    private static let trustedHoles = Mutex<Set<dev_t>>([])

    /// `fstatfs`, which Swift's Glibc module does not import (`sys/vfs.h`).
    private static let fstatfs: (@convention(c) (Int32, UnsafeMutableRawPointer) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "fstatfs") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32, UnsafeMutableRawPointer) -> Int32).self)
    }()

    /// A file-system error naming the cause; ENOSPC becomes `diskFull`.
    static func fileError(_ code: Int32, _ what: String) -> DownloadError {
        let reason = String(cString: strerror(code))
        if code == ENOSPC || code == EDQUOT {
            return DownloadError(.diskFull, "\(what): the disk is full (\(reason))")
        }
        return DownloadError(.fileSystem, "\(what): \(reason)")
    }
}

/// Starts the kernel's writeback behind one stream of contiguous writes, every `chunk` bytes, so the disk works while
/// the network does and a checkpoint's sync finds little left to write.
struct WritebackStarter {
    /// How many written bytes make one writeback request.
    static let chunk: Int64 = 8 << 20
    private let start: (_ offset: Int64, _ count: Int64) -> Void
    private var from: Int64

    /// A starter for writes to `part` from `offset` on.
    init(part: PartFile, from offset: Int64) {
        self.init(from: offset) { part.startWriteback(from: $0, count: $1) }
    }

    /// A starter for writes from `offset` on that calls `start` with each range to write back.
    init(from offset: Int64, start: @escaping (_ offset: Int64, _ count: Int64) -> Void) {
        self.start = start
        from = offset
    }

    /// Bytes before `position` are written.
    mutating func wrote(upTo position: Int64) {
        guard position - from >= Self.chunk else { return }
        start(from, position - from)
        from = position
    }
}
