import Foundation
import HaulCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Everything one download does on disk goes through here. At each start its folder is opened again (beneath its
/// allowed folder when it is confined) and checked against the device and inode the store recorded when it was
/// added; from then on every name in it is looked at, opened, created, moved, synced and deleted relative to that
/// descriptor, and no path string is resolved again. Which file Haul trusts as its part file is decided here.
public final class DownloadFolder: Sendable {
    /// The folder, held.
    let folder: HeldFolder

    init(_ folder: HeldFolder) {
        self.folder = folder
    }

    /// The folder's path when it was opened.
    var path: String { folder.path }

    /// Opens the folder of `record`: beneath the allowed folder its path lies in when the download is confined
    /// (`AllowedFolders.confine`), else at its path, as the user named it; either way it must be the folder the store
    /// recorded when the download was added (a link in the path swapped since then makes it another folder, and
    /// nothing is written), or that folder made again (`isRemade`). A row written before identities were recorded has none, and the folder found
    /// now is taken (the caller stores it).
    static func open(for record: DownloadRecord, allowed: AllowedFolders) throws(DownloadError) -> DownloadFolder {
        guard let path = record.folderPath else {
            throw DownloadError(.fileSystem, "download \(record.id) has neither a destination nor a folder")
        }
        let folder = try open(path, confined: allowed.confine(record.origin), allowed: allowed)
        if let recorded = record.folderIdentity, recorded != folder.identity, !isRemade(folder, at: path) {
            throw DownloadError(
                .untrustedFile,
                "the folder \(path) is no longer the folder this download was added to (it was replaced, or a link "
                    + "in its path leads elsewhere now); Haul will not write there")
        }
        return DownloadFolder(folder)
    }

    /// The folder `path` names, opened: beneath the allowed folder it lies in when `confined`, else where the path
    /// leads now (its links are the namer's). The one way a download's folder is opened, when it is added and at
    /// every start.
    static func open(_ path: String, confined: Bool, allowed: AllowedFolders) throws(DownloadError) -> HeldFolder {
        confined ? try allowed.open(path) : try HeldFolder.open(path, followsLinks: true)
    }

    /// Whether `folder`, found at `path` where the store recorded another, is that folder made again (deleted, then
    /// created anew by the user at the same place) rather than something swapped in: it is the user's, and no link
    /// on the path leads anywhere (the path is its own real path). A link swapped in anywhere on the path, or a
    /// folder of someone else's, is not. Its part file is gone with the old folder, so nothing in it is trusted.
    private static func isRemade(_ folder: HeldFolder, at path: String) -> Bool {
        folder.owner == geteuid() && AllowedFolders.resolved(path) == PathName.normalized(path)
    }

    /// How `openPart` found the part file.
    enum Part: Sendable {
        /// Opened and locked; `isNew` when its identity is not the one recorded (made now, or adopted with `-c`).
        case opened(PartFile, isNew: Bool)
        /// Something that is not Haul's has the name; it was left untouched. The error says what and why.
        case untrusted(DownloadError)
    }

    /// Opens the part file `name`, or makes it (`O_CREAT | O_EXCL | O_NOFOLLOW`) when nothing has the name. What is
    /// there is Haul's, and written to, only when it is a regular file with one link, owned by this process's user,
    /// with the device and inode that the store recorded when Haul made it (`recorded`). Two exceptions: with
    /// `adopting` (`-c`, a file the user hands over on purpose) any regular file with one link is taken; and an empty
    /// file of the user's with nothing recorded is taken, since it holds no bytes to trust (Haul made it and stopped
    /// before its identity was stored). Anything else is `untrusted`, and never opened for writing: a link (which
    /// would send the writes elsewhere), a hard link (which would change the file it shares), a FIFO, socket or
    /// device (opened, if at all, without blocking), another user's file, or a file with another identity.
    func openPart(_ name: String, recorded: FileIdentity?, adopting: Bool) throws(DownloadError) -> Part {
        for _ in 0..<3 {
            guard let entry = try folder.entry(name) else {
                switch folder.create(name) {
                case .success(let descriptor):
                    return .opened(try PartFile(descriptor: descriptor, name: name, in: folder), isNew: true)
                case .failure(let failure) where failure.code == EEXIST:
                    // Planted between the look and the create: look again.
                    continue
                case .failure(let failure):
                    throw PartFile.fileError(failure.code, "cannot create \(folder.path(of: name))")
                }
            }
            let user = geteuid()
            if let reason = entry.distrust(owner: adopting ? nil : user) {
                return .untrusted(refusal(name, reason))
            }
            let isKnown =
                entry.identity == recorded || (recorded == nil && (adopting || entry.size == 0))
            let descriptor = try folder.open(name, as: entry, writing: true)
            // Locked first: a part file another process is writing right now is that process's, whatever the store
            // of this one knows.
            let part = try PartFile(descriptor: descriptor, name: name, in: folder)
            guard isKnown else {
                part.unlock()
                return .untrusted(
                    refusal(
                        name,
                        "was not made by this download (Haul has no record of it)",
                        hint: "continue it on purpose with -c (--continue), or delete it"))
            }
            return .opened(part, isNew: entry.identity != recorded)
        }
        throw DownloadError(
            .untrustedFile, "\(folder.path(of: name)) keeps changing while Haul opens it; it is left as it is")
    }

    /// Makes the part file `name`, which must not exist: a folder download claiming a free name. Nil when something
    /// has the name already.
    func makePart(_ name: String) throws(DownloadError) -> PartFile? {
        switch folder.create(name) {
        case .success(let descriptor):
            do { return try PartFile(descriptor: descriptor, name: name, in: folder) } catch {
                // Locked between its create and this lock: another download took it for one a killed run left
                // (`takeLeftOverPart`), and it is that download's now.
                guard error.code == .locked else { throw error }
                return nil
            }
        case .failure(let failure) where failure.code == EEXIST: return nil
        case .failure(let failure): throw PartFile.fileError(failure.code, "cannot create \(folder.path(of: name))")
        }
    }

    /// The identity of the part file `name` when it looks left over: an empty regular file of this process's user
    /// with one link, which a folder download of Haul made for its name and was killed before it stored it (it holds
    /// no bytes to trust; `openPart` takes the same for a download whose name is known). Nil for anything else.
    /// Only a look: nothing is opened.
    func leftOverPart(_ name: String) -> FileIdentity? {
        guard let entry = try? folder.entry(name), Self.looksLeftOver(entry) else { return nil }
        return entry.identity
    }

    private static func looksLeftOver(_ entry: FolderEntry) -> Bool {
        entry.size == 0 && entry.distrust(owner: geteuid()) == nil
    }

    /// The left-over part file `name` (see `leftOverPart`), opened and locked, when it is still the file of
    /// `identity`, still empty, and no process holds it. Nil otherwise, and the file is left untouched.
    func takeLeftOverPart(_ name: String, identity: FileIdentity) -> PartFile? {
        guard let entry = try? folder.entry(name), entry.identity == identity, Self.looksLeftOver(entry),
            let descriptor = try? folder.open(name, as: entry, writing: true),
            let part = try? PartFile(descriptor: descriptor, name: name, in: folder)
        else { return nil }
        // Written to between the look and the lock: someone's bytes, not a file to take.
        guard (try? part.length()) == 0 else {
            part.unlock()
            return nil
        }
        return part
    }

    /// The refusal of `name`: what it is, and that Haul will not write through it.
    private func refusal(_ name: String, _ reason: String, hint: String? = nil) -> DownloadError {
        DownloadError(
            .untrustedFile,
            "\(folder.path(of: name)) \(reason); Haul will not write through it" + (hint.map { ": \($0)" } ?? ""))
    }

    // MARK: Part files of a fleet's leases

    /// The name of the part file of `name`: `NAME.part`, or `NAME.lease<N>.part` for a worker of a fleet under lease
    /// N. Each lease writes its own file, and a takeover copies the checkpointed bytes out of the earlier one and
    /// never writes into it: a worker that was stopped still holds its file's lock, and may still have a write in
    /// flight when it wakes.
    static func partName(_ name: String, lease: Int64?) -> String {
        lease.map { "\(name).lease\($0).part" } ?? name + ".part"
    }

    /// The names of the part files of `name` here that leases made, with their lease numbers.
    func leaseParts(of name: String) -> [(name: String, lease: Int64)] {
        let prefix = name + ".lease"
        return folder.names().compactMap { candidate in
            guard candidate.hasPrefix(prefix), candidate.hasSuffix(".part") else { return nil }
            let number = candidate.dropFirst(prefix.count).dropLast(".part".count)
            guard !number.isEmpty, number.allSatisfy(\.isASCII), let lease = Int64(number) else { return nil }
            return (candidate, lease)
        }
    }

    /// Opens for reading the part file of `name` that is the file `identity` names (any lease's, or the plain one);
    /// nil when it is not here (another machine's folder).
    func recordedPart(of name: String, identity: FileIdentity) -> (name: String, descriptor: Int32)? {
        for candidate in [name + ".part"] + leaseParts(of: name).map(\.name) {
            guard let entry = try? folder.entry(candidate), entry.kind == .regular, entry.identity == identity,
                let descriptor = try? folder.open(candidate, as: entry, writing: false)
            else { continue }
            return (candidate, descriptor)
        }
        return nil
    }

    /// Deletes the part files of `name` that earlier leases made (regular files only), keeping `keeping`'s.
    func deleteLeaseParts(of name: String, keeping: String? = nil) {
        for part in leaseParts(of: name) where part.name != keeping {
            guard let entry = try? folder.entry(part.name), entry.kind == .regular else { continue }
            folder.removeFile(part.name, identity: entry.identity)
        }
    }

    /// Whether anything (a file, a link, anything) has `name`.
    func has(_ name: String) -> Bool {
        (try? folder.entry(name)) != nil
    }

    /// What `name` is, without following a link.
    func entry(_ name: String) throws(DownloadError) -> FolderEntry? {
        try folder.entry(name)
    }

    /// Opens the file `name` that `entry` describes, for reading (see `HeldFolder.open`).
    func open(_ name: String, as entry: FolderEntry) throws(DownloadError) -> Int32 {
        try folder.open(name, as: entry, writing: false)
    }

    /// The finished file `name` of a download whose part file had `identity` and `length` bytes, opened for
    /// reading; nil when what has the name is anything else (another file, a link, another length).
    func finishedFile(_ name: String, identity: FileIdentity?, length: Int64) -> Int32? {
        guard let identity, let entry = try? folder.entry(name), entry.kind == .regular, entry.identity == identity,
            entry.size == length
        else { return nil }
        return try? folder.open(name, as: entry, writing: false)
    }

    /// Moves the verified part file to `target` in the same folder (see `HeldFolder.move`); throws naming the cause,
    /// `destinationExists` when something has the name (and `replacing` does not allow replacing it).
    func moveIntoPlace(_ part: PartFile, to target: String, replacing: Bool) throws(DownloadError) {
        let code = folder.move(part.name, to: target, replacing: replacing)
        guard code != 0 else { return }
        let reason = String(cString: strerror(code))
        switch code {
        case EEXIST:
            throw DownloadError(
                .destinationExists, "\(folder.path(of: target)) appeared while downloading; not overwriting it")
        case EACCES, EPERM, EROFS:
            throw DownloadError(
                .destinationNotWritable,
                "cannot move the finished download into \(folder.path): the folder is not writable (\(reason)); "
                    + "its bytes stay in \(part.path)")
        case ENOENT where folder.isDeleted:
            throw DownloadError(
                .destinationNotWritable, "cannot move the finished download into \(folder.path): the folder is gone")
        default:
            throw PartFile.fileError(code, "cannot rename \(part.path) to \(folder.path(of: target))")
        }
    }

    /// What `-c` hands over to a download named `name`, looked at and not moved: its part file when there is one (a
    /// regular file; anything else there `openPart` refuses), else the file `name`, which passes the checks its add
    /// made (`checkContinuable`), made again since it may have changed meanwhile. Whether it has the part file's name
    /// already; nil when there is neither.
    func fileToHandOver(_ name: String) throws(DownloadError) -> (entry: FolderEntry, atPartName: Bool)? {
        if let part = try folder.entry(name + ".part") { return part.kind == .regular ? (part, true) : nil }
        guard let file = try folder.entry(name) else { return nil }
        try DownloadManager.checkContinuable(name, as: file, in: folder)
        return (file, false)
    }

    /// Hands over `file`, as `fileToHandOver(name)` found it: the file `name` is moved to the part file's name (when
    /// the download starts, not when it is added: a queued download leaves the user's file where it is). Returns the
    /// identity of the file handed over, and whether it was moved; nil when a part file made meanwhile went again.
    func handOver(_ name: String, _ file: (entry: FolderEntry, atPartName: Bool)) throws(DownloadError) -> (
        identity: FileIdentity, moved: Bool
    )? {
        if file.atPartName { return (file.entry.identity, false) }
        let partName = name + ".part"
        let code = folder.move(name, to: partName, replacing: false)
        // A part file made meanwhile is the one handed over.
        if code == EEXIST { return try folder.entry(partName).map { ($0.identity, false) } }
        guard code == 0 else {
            throw PartFile.fileError(code, "cannot rename \(folder.path(of: name)) to \(partName)")
        }
        // On the disk before a byte is written into it: a power cut then cannot leave Haul's appends, which the
        // store may not count yet, in a file under the download's name, where the next run takes its length as the
        // user's (`isGivenBack`).
        folder.sync()
        return (file.entry.identity, true)
    }

    /// Whether the user's file `identity`, handed over from `name`, is under `name` and no part file is: given back
    /// (`giveBack`), or not yet moved. A power cut after a give-back and before the store's removal or cancel of its
    /// row, or after the store recorded a hand-over and before the move, leaves a row that names such a file.
    func isGivenBack(_ name: String, identity: FileIdentity) throws(DownloadError) -> Bool {
        guard try folder.entry(name + ".part") == nil, let file = try folder.entry(name) else { return false }
        return file.kind == .regular && file.identity == identity
    }

    /// Gives the user's file back (`DownloadRecord.handOver`): when its download is cancelled or removed, or when a
    /// run ends without writing into it (`PartFate.handBack`). `partName`, when it is still the file `identity` names,
    /// is cut to `length` bytes (the store's: the user's bytes, and what Haul appended and counted in a mark; those
    /// beyond may have gaps, or be unsynced), synced, and moved back to `name` when that is free (nil leaves it at the
    /// part file's name). Never deleted. Returns the name it has now, nil when it is not there.
    @discardableResult
    func giveBack(_ partName: String, identity: FileIdentity, keeping length: Int64, to name: String?) -> String? {
        guard let entry = try? folder.entry(partName), entry.kind == .regular, entry.identity == identity,
            let opened = try? folder.open(partName, as: entry, writing: true)
        else { return nil }
        var info = stat()
        if fstat(opened, &info) == 0, Int64(info.st_size) > length { ftruncate(opened, off_t(length)) }
        fsync(opened)
        close(opened)
        guard let name, folder.move(partName, to: name, replacing: false) == 0 else { return partName }
        folder.sync()
        return name
    }

    /// Flushes the folder's entries (a rename into it) to the disk, shared with the other downloads finishing in it.
    func sync() {
        folder.syncShared()
    }

    /// Deletes the regular file `name` when it is the one Haul made (`identity`): one `unlinkat`, never recursive.
    @discardableResult
    func delete(_ name: String, identity: FileIdentity?) -> Bool {
        guard let identity else { return false }
        return folder.removeFile(name, identity: identity)
    }

    /// Whether another process holds `record`'s part file: it is downloading it now, whatever the store says (a
    /// command that found the row running elsewhere may have queued it again). A fleet's part files are each
    /// lease's own, on folders where locks may not be shared; the lease says who runs those.
    public static func isPartHeldElsewhere(_ record: DownloadRecord, allowed: AllowedFolders) -> Bool {
        guard let destination = record.destination, let identity = record.partIdentity,
            let folder = try? open(for: record, allowed: allowed)
        else { return false }
        return folder.folder.isLockedElsewhere(PathName.lastComponent(of: destination) + ".part", identity: identity)
    }

    /// Deletes what Haul made for `record` and nothing else: its part file, and with `includingFile` its completed
    /// file, each only when it is the file whose identity the store recorded, through the download's folder opened
    /// as `open(for:allowed:)` opens it. A folder that is gone or is not the one recorded deletes nothing. A part file
    /// the user handed over with `-c` is given back instead (`giveBack`), cut to the bytes held from its start, unless
    /// `includingFile` asks for the download's files to go. This is how `cancel`, `remove` and the command line's
    /// `rm --delete-file` delete.
    public static func deleteFiles(of record: DownloadRecord, includingFile: Bool, allowed: AllowedFolders) {
        guard let destination = record.destination, let folder = try? open(for: record, allowed: allowed) else {
            return
        }
        let name = PathName.lastComponent(of: destination)
        if let handOver = record.handOver, let identity = record.partIdentity, !includingFile {
            // The user's bytes: never deleted unless the user asks for the files to go.
            folder.giveBack(
                name + ".part", identity: identity, keeping: record.heldPrefix, to: handOver == .fromName ? name : nil)
        } else {
            folder.delete(name + ".part", identity: record.partIdentity)
        }
        // A fleet's part files, every lease's (a folder is listed for them only where a part file may be left: a
        // completed or cancelled download has none, and `clean` forgets thousands of those at once).
        if ![.completed, .cancelled].contains(record.state) {
            folder.deleteLeaseParts(of: name)
            folder.deleteStreamPieces(of: name)
            // A DASH stream's audio, beside it (`DownloadRunner+Stream`).
            folder.deleteStreamPieces(of: (name as NSString).deletingPathExtension + ".audio.mp4")
        }
        if includingFile, record.state == .completed { folder.delete(name, identity: record.partIdentity) }
    }

    /// Deletes a stream's piece files (`DownloadRunner+Stream`) and their folder: the regular files Haul names
    /// there, never what a link leads to.
    func deleteStreamPieces(of name: String) {
        let folderName = name + ".part-segments"
        guard (try? folder.entry(folderName))?.kind == .folder, let pieces = try? folder.folder(at: folderName) else {
            return
        }
        for piece in pieces.names() {
            guard let entry = try? pieces.entry(piece), entry.kind == .regular else { continue }
            pieces.removeFile(piece, identity: entry.identity)
        }
        _ = folder.removeFolder(folderName)
    }
}
