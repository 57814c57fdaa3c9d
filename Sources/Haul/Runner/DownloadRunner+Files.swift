import Foundation
import HaulCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The runner's file names and its end: which part file it writes (`DownloadFolder.openPart`), the name a folder
/// download claims, the finished file it recognises, and the move into place.
extension DownloadRunner {
    /// Opens the part file of a download whose name is known, when it is Haul's (`DownloadFolder.openPart`). What is
    /// not Haul's is left untouched: a download that may take another name (`takesFreeName`) starts again from 0
    /// under the next free one; any other stops here, before a byte is fetched, with the reason. The part file of a
    /// row stored before Haul recorded identities (`isEarlierRow`) is handed over as `-c` hands one over: a regular
    /// file with one link, whose bytes are compared with the server's before anything is appended.
    func openPart(in folder: DownloadFolder, isEarlierRow: Bool) async throws {
        let record = record
        guard let destination = record.destination else { return }
        let name = PathName.lastComponent(of: destination)
        if let lease = environment.lease { return try await openLeasePart(of: name, lease: lease, in: folder) }
        // The user's file under its name while the row counts it as the part file (given back when its removal or
        // cancel did not reach the store, or not moved yet when its hand-over did): handed over again, as -c hands a
        // file over (the bytes the row counted beyond what was given back are gone with the give-back).
        let givenBack =
            if record.handOver == .fromName, let recorded = record.partIdentity {
                try await Blocking.run { () throws(DownloadError) in try folder.isGivenBack(name, identity: recorded) }
            } else { false }
        let adopting = (options.continuePartial || isEarlierRow) && record.partIdentity == nil || givenBack
        let handing = adopting && (options.continuePartial || givenBack)
        // Off the cooperative pool, as every look and create in a folder other downloads change (`claimName`).
        let stored =
            handing ? try await Blocking.run { () throws(DownloadError) in try folder.fileToHandOver(name) } : nil
        var handed: (identity: FileIdentity, moved: Bool)?
        if let stored {
            try await storeHandOver(of: stored.entry, from: stored.atPartName ? .atPartName : .fromName)
            handed = try await Blocking.run { () throws(DownloadError) in try folder.handOver(name, stored) }
        }
        let opened = try await Blocking.run { [recorded = record.partIdentity] () throws(DownloadError) in
            try folder.openPart(name + ".part", recorded: recorded, adopting: adopting)
        }
        switch opened {
        case .opened(let part, let isNew):
            // A file handed over (-c, or an earlier row's): its bytes are compared with the server's before anything
            // is appended.
            let isHandedOver = try adopting && part.length() > 0
            self.part = part
            self.record.partIdentity = part.identity
            // Its identity (and, handed over, that it is the user's) is stored before a byte is written into it.
            if isNew { partMade() }
            if isHandedOver { self.record.isPartVerified = false }
            if let handed, handed.identity == part.identity {
                handedOver = (true, handed.moved ? name : nil)
                // The user's file: a cancel or a remove, even by a later process, gives it back (to the name it had).
                self.record.handOver = handed.moved ? .fromName : .atPartName
                // Its length is what it durably holds: after a crash, what Haul appended past it and had not counted
                // in a mark is cut off before the overlap is compared (`ResumePlanner`).
                self.record.durableOffset = try part.length()
                self.record.segments = nil
                // A part file made meanwhile is the one handed over (`handOver`), not the file stored: stored again.
                if stored?.entry.identity != part.identity {
                    try await save(transferReport(mark: .offset(self.record.durableOffset)), waiting: true)
                }
            } else if isNew {
                // Made now: Haul's own, whatever an earlier part file was.
                self.record.handOver = nil
            }
        case .untrusted(let error):
            guard record.takesFreeName else { throw error }
            environment.logger.notice("\(source): \(error.message); taking the next free name")
            // The machine starts from nothing.
            self.record.durableOffset = 0
            self.record.segments = nil
            self.record.isPartVerified = true
            self.record.partIdentity = nil
            self.record.handOver = nil
            try await claimName(name, in: folder, from: 1, lease: environment.lease)
        }
    }

    /// Stores that the user's file `file` is handed over (from the download's name, or at the part file's), with its
    /// length as what it durably holds, before it moves or a byte is written into it. A crash or a power cut after
    /// either then leaves a row that gives the file back whole (a cancel, `rm`) and counts its bytes (a resume
    /// compares them), never one that counts none of them; a cut before the move leaves the file under its name,
    /// handed over again by the next run (`DownloadFolder.isGivenBack`).
    func storeHandOver(of file: FolderEntry, from origin: PartHandOver) async throws {
        record.handOver = origin
        record.partIdentity = file.identity
        record.isPartVerified = false
        record.durableOffset = file.size
        record.segments = nil
        try await save(transferReport(mark: .offset(file.size)), waiting: true)
    }

    /// Makes the part file of this lease (`DownloadFolder.partName`) and, when the store trusts bytes of an earlier
    /// one, copies its checkpointed ranges out of the file the store recorded, which is never written to. That file
    /// is found here when the folder is shared with the worker that wrote it (NFS); otherwise the download starts
    /// again from the first byte. The copy is synced before the new file's identity is stored: the stored offsets
    /// then speak of bytes that are on the disk.
    fileprivate func openLeasePart(of name: String, lease: Int64, in folder: DownloadFolder) async throws {
        let own = DownloadFolder.partName(name, lease: lease)
        guard let made = try folder.makePart(own) else {
            throw DownloadError(
                .untrustedFile, "\(PathName.join(folder.path, own)) exists already; Haul will not write through it")
        }
        part = made
        let ranges =
            record.segments.map { $0.map { $0.start..<$0.offset } } ?? [0..<record.durableOffset]
        var copied = false
        if let recorded = record.partIdentity, ranges.contains(where: { !$0.isEmpty }) {
            if let earlier = folder.recordedPart(of: name, identity: recorded) {
                let earlierPath = PathName.join(folder.path, earlier.name)
                try await Blocking.run {
                    defer { close(earlier.descriptor) }
                    try made.copy(ranges, from: earlier.descriptor, named: earlierPath)
                    try made.syncData()
                    // The stored marks count these bytes once the new identity is stored: its name goes to the
                    // disk first.
                    folder.sync()
                }
                copied = true
                environment.logger.info(
                    "\(source): lease \(lease) goes on from the checkpointed bytes of \(earlier.name)")
            } else {
                environment.logger.notice(
                    "\(source): its part file is not in \(folder.path) (another worker's folder); it starts again from the first byte"
                )
                record.durableOffset = 0
                record.segments = nil
                record.isPartVerified = true
            }
        }
        record.partIdentity = made.identity
        partMade()
        isPartNameDurable = copied
    }

    /// Picks the file name for a folder download from the first answer, never over a file Haul did not create. A sort
    /// rule that matches puts it in a folder beneath the download's (made when missing, opened beneath it: a link
    /// there that leads out is refused, as in any folder Haul holds).
    func resolveDestination(response: TransportResponse) async throws {
        // A preferred name's folders (a Metalink's `docs/a.txt`), each made safe; `..` and empty ones are dropped (the
        // Metalink's plan refused a name leading out before this).
        var preferred = options.preferredName.map { $0.split(separator: "/").map(String.init) } ?? []
        let named = preferred.popLast()
        let inside = preferred.filter { $0 != "." && $0 != ".." }.map(FileNameSanitizer.sanitize)
        let name =
            named.map(FileNameSanitizer.sanitize)
            ?? FileNameSanitizer.name(
                contentDisposition: response.head.value("Content-Disposition"),
                finalURLPath: response.finalURL.decodedPath
            )
        let folder = try enterFolder(for: name, contentType: response.head.value("Content-Type"), inside: inside)
        try await claimName(name, in: folder, from: 0, lease: environment.lease)
    }

    /// The folder a folder download's file `name` goes to: the sort rule's that matches it (by `name`, `contentType`
    /// or the URL) and then `inside`, beneath the download's folder (made when missing, opened beneath it); the
    /// download's folder itself when neither applies. It becomes the download's folder.
    func enterFolder(for name: String, contentType: String?, inside: [String] = []) throws -> DownloadFolder {
        guard var folder else { throw DownloadError(.fileSystem, "download \(id) has no folder open") }
        let sorted = environment.sorting.folder(name: name, contentType: contentType, url: record.url)
        let sub = ([sorted].compactMap { $0 } + inside).joined(separator: "/")
        if !sub.isEmpty {
            folder = DownloadFolder(try folder.folder.folder(at: sub, creating: true))
            self.folder = folder
            record.folderIdentity = folder.folder.identity
            if sorted != nil { environment.logger.info("\(source): sorted into \(folder.path)") }
        }
        return folder
    }

    /// Claims the first free name of `name`, `name (1)`, … (from the `first`th) in `folder`: free means that nothing
    /// of any kind (a link included) has the name or its part file's, and that no other download of the manager
    /// claims it. The part file is made exclusively (a download of another process choosing the same name at the
    /// same moment loses), then stored as the download's with the name in one step with the manager, which refuses a
    /// name another of its downloads holds. So the part file's identity is in the store when this returns, before
    /// any byte is written. `lease`: the part file is that lease's own (`DownloadFolder.partName`), never another's.
    ///
    /// One file at the part file's name does not make a name taken: an empty one of the user's that no process holds
    /// and no download of the manager claims (`DownloadFolder.leftOverPart`), which a run killed between making it
    /// and storing it leaves. It is taken as if made now: passed over, it would send every later run to `name (1)`
    /// and stay for ever. The manager is asked before the file is locked: a paused download whose empty part file it
    /// is would otherwise find it locked by this one as it resumed.
    func claimName(_ name: String, in folder: DownloadFolder, from first: Int, lease: Int64?) async throws {
        var next = first
        while next < 1000 {
            // The look and the create wait for the folder's lock, which the creates and renames of other downloads
            // in it hold while they wait on the disk (a create may read the inode table to pick an inode): they run
            // off the cooperative pool, whose few threads would stall every task meanwhile.
            let from = next
            guard
                let free = try await Blocking.run({ () throws(DownloadError) -> FreeName? in
                    try Self.freeName(name, in: folder, from: from, lease: lease)
                })
            else { break }
            next = free.number + 1
            let partName = DownloadFolder.partName(free.name, lease: lease)
            let destination = PathName.join(folder.path, free.name)
            let made: PartFile
            let isLeftOver: Bool
            switch free.part {
            case .made(let part): (made, isLeftOver) = (part, false)
            case .leftOver(let identity):
                do { _ = try await environment.report(.takingLeftOver(destination)) } catch {
                    guard error.code == .destinationExists else { throw error }
                    continue
                }
                guard let taken = try await Blocking.run({ folder.takeLeftOverPart(partName, identity: identity) })
                else { continue }
                (made, isLeftOver) = (taken, true)
            }
            let before = (record.destination, record.partIdentity)
            part = made
            record.destination = destination
            record.partIdentity = made.identity
            partMade()
            // The file just made goes when its name is not stored as this download's: another download of the
            // manager holds the name (the next is tried), or the store could not write it (its disk full, its
            // connection lost). Left there, empty and in no row, it would be taken for a left-over by the next run,
            // which loses nothing but the `name` a later download of it would choose. Its identity is checked first;
            // were the write stored after all, the next run finds the part file gone and starts again from 0. A
            // left-over one stays as it was.
            let claimed: Bool
            do { claimed = try await storeClaim() } catch {
                drop(made, named: partName, in: folder, removing: !isLeftOver, restoring: before)
                throw error
            }
            guard claimed else {
                drop(made, named: partName, in: folder, removing: !isLeftOver, restoring: before)
                continue
            }
            isPartIdentityStored = true
            return
        }
        throw DownloadError(.destinationExists, "no free name for \(name) in \(folder.path)")
    }

    /// Lets go of the part file `made` (named `partName` in `folder`) whose claim was not stored, removing it when
    /// it was made for the claim, and gives the record back the name and identity it had `before`.
    private func drop(
        _ made: PartFile, named partName: String, in folder: DownloadFolder, removing: Bool,
        restoring before: (destination: String?, partIdentity: FileIdentity?)
    ) {
        made.unlock()
        if removing { folder.folder.removeFile(partName, identity: made.identity) }
        part = nil
        (record.destination, record.partIdentity) = before
        (isPartIdentityStored, isPartNameDurable) = (true, true)
    }

    /// A name `claimName` may take: its number among `name`, `name (1)`, …, the name, and its part file.
    private struct FreeName: Sendable {
        enum Part: Sendable {
            /// Made now, exclusively, and locked.
            case made(PartFile)
            /// Left over by a killed run (`DownloadFolder.leftOverPart`): the file's identity, not opened yet.
            case leftOver(FileIdentity)
        }
        let number: Int
        let name: String
        let part: Part
    }

    /// The first free name of `name` from the `first`th (see `claimName`), its part file made or found left over;
    /// nil when none of the names up to the 999th is free.
    private static func freeName(
        _ name: String, in folder: DownloadFolder, from first: Int, lease: Int64?
    ) throws(DownloadError) -> FreeName? {
        for number in first..<1000 {
            let candidate = number == 0 ? name : FileNameSanitizer.alternative(name, number: number)
            // The part file's own name needs no look: its exclusive create refuses anything (a link included) there.
            if folder.has(candidate) || (lease != nil && folder.has(candidate + ".part")) { continue }
            let partName = DownloadFolder.partName(candidate, lease: lease)
            if let made = try folder.makePart(partName) {
                return FreeName(number: number, name: candidate, part: .made(made))
            }
            if lease == nil, let identity = folder.leftOverPart(partName) {
                return FreeName(number: number, name: candidate, part: .leftOver(identity))
            }
        }
        return nil
    }

    /// Stores the name just chosen with the part file's identity, waited for; false when the manager refuses the
    /// name (nothing was stored).
    private func storeClaim() async throws(DownloadError) -> Bool {
        do {
            try await save(transferReport(mark: nil), waiting: true, claiming: true)
            return true
        } catch {
            guard error.code == .destinationExists else { throw error }
            return false
        }
    }

    // MARK: Finalising

    /// A run that finds no part file, and at the destination the very file its part file was (the identity the
    /// store recorded) with exactly the file's length, is looking at its own finished file: the previous process
    /// died between the rename and the completed state. Only a verified part file is ever moved there, and that
    /// length is the whole file: the record durably held it in full (several connections store it before the
    /// rename), or one stream wrote the file from its first byte (`finalize` moves it at once).
    func recognizeFinishedFile(in folder: DownloadFolder) async throws -> DownloadResult? {
        let record = record
        guard let destination = record.destination, let total = record.totalLength,
            record.durableOffset == total || record.segments == nil, record.isPartVerified
        else { return nil }
        let name = PathName.lastComponent(of: destination)
        guard !folder.has(DownloadFolder.partName(name, lease: environment.lease)),
            let descriptor = folder.finishedFile(name, identity: record.partIdentity, length: total)
        else { return nil }
        let digests = try await Blocking.run {
            [computesSHA256 = options.computesSHA256, checksum = options.checksum] in
            defer { close(descriptor) }
            var algorithms = Set<Checksum.Algorithm>()
            if let checksum { algorithms.insert(checksum.algorithm) }
            if computesSHA256 { algorithms.insert(.sha256) }
            return algorithms.isEmpty
                ? [:] : try FileDigest.hexDigests(of: descriptor, named: destination, algorithms: algorithms)
        }
        if let checksum = options.checksum, digests[checksum.algorithm] != checksum.hex { return nil }
        return DownloadResult(
            id: id, url: source, path: destination, bytes: total, sha256: digests[.sha256], seconds: 0,
            resumedFrom: total, wasAlreadyComplete: true)
    }

    /// Verifies the part file's `total` bytes and moves them to the destination; throws `checksumMismatch` when the
    /// checksum does not match, leaving the part file as it is.
    func finalize(total: Int64) async throws -> DownloadResult {
        guard let part, let folder, let destination = record.destination else {
            throw DownloadError(.fileSystem, "nothing to finalise for \(source)")
        }
        let length = try part.length()
        if length > total { try part.truncate(to: total) }
        let size = min(length, total)
        var algorithms = Set<Checksum.Algorithm>()
        if let checksum = options.checksum { algorithms.insert(checksum.algorithm) }
        if options.computesSHA256 { algorithms.insert(.sha256) }
        // One stream wrote the file from its first byte, and the row holds its length, the part file's identity and
        // that its bytes are Haul's: it is moved as soon as it is synced, and one folder sync makes both its creation
        // and its new name durable. Nothing is stored first: should the process die before the completed state is
        // stored, the next run knows the file at the destination by that identity and length
        // (`recognizeFinishedFile`). Otherwise (several connections, a length the row does not hold yet, or a file
        // handed over that the row does not count as verified) that is stored before the rename, and the part file's
        // name is made durable before that.
        let movesAtOnce = storedTotal == size && isStoredVerified && machine.isSingleStream
        let syncsName = !isPartNameDurable
        let (replacing, takesFreeName) = (record.mayReplaceDestination, record.takesFreeName)
        let deletesEarlierParts = environment.lease != nil && environment.followsEarlierLeases
        let name = PathName.lastComponent(of: destination)
        let checksum = options.checksum
        let move: @Sendable () throws -> String = {
            let taken = try Self.moveIntoPlace(
                part, in: folder, name: name, replacing: replacing, takesFreeName: takesFreeName)
            // Whoever finishes deletes what earlier leases wrote (listing the folder: one with thousands of files
            // takes milliseconds, which a first lease does not spend).
            if deletesEarlierParts { folder.deleteLeaseParts(of: name) }
            folder.sync()
            return taken
        }
        // One trip off the cooperative pool for the sync, the look at the part file, the digests and (moving at once)
        // the rename: each trip is two thread switches, which a burst of small files pays for every file.
        let checked = try await Blocking.run { [algorithms] () throws -> Finalizing in
            try part.sync()
            if let found = Self.checkTampering(of: part, with: .offset(total)) {
                // What is left is stored next: its name must be on the disk first.
                if syncsName { folder.sync() }
                return .tampered(found.0, intact: found.intact)
            }
            let digests = algorithms.isEmpty ? [:] : try part.hexDigests(algorithms: algorithms)
            if let checksum, digests[checksum.algorithm] != checksum.hex {
                return .mismatch(checksum, got: digests[checksum.algorithm] ?? "nothing")
            }
            guard movesAtOnce else {
                if syncsName { folder.sync() }
                return .verified(digests)
            }
            return .moved(try move(), digests)
        }
        let taken: String
        let digests: [Checksum.Algorithm: String]
        switch checked {
        case .tampered(let problem, let intact):
            // Every byte was written, and some are not there any more: nothing wrong goes under the final name.
            try? await storeTampered(intact)
            throw problem
        case .mismatch(let checksum, let got):
            // What becomes of the bytes (fetched whole again, or deleted) is the machine's decision (`finalized`).
            throw DownloadError(
                .checksumMismatch,
                "checksum mismatch for \(source): expected \(checksum), got \(checksum.algorithm.rawValue)=\(got); "
                    + "the file was not kept"
            )
        case .moved(let name, let found):
            isPartNameDurable = true
            (taken, digests) = (name, found)
        case .verified(let found):
            isPartNameDurable = true
            // Stored before the rename: if the process dies between the rename and the completed state, the next
            // run recognises the whole file at the destination as its own (`recognizeFinishedFile`).
            var report = transferReport(mark: .offset(size))
            report.facts?.totalLength = size
            try await save(report, waiting: true)
            (taken, digests) = (try await Blocking.run(move), found)
        }
        let target = PathName.join(folder.path, taken)
        let resumedFrom = machine.resumedFrom ?? 0
        // It is the finished file now: nothing of a stop after this may touch it as a part file.
        self.part = nil
        record.destination = target
        let elapsed = environment.idleClock.now() - startedAt
        return DownloadResult(
            id: id,
            url: source,
            path: target,
            bytes: size,
            sha256: digests[.sha256],
            seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18,
            resumedFrom: resumedFrom,
            wasAlreadyComplete: false
        )
    }

    /// What `finalize` found off the cooperative pool.
    fileprivate enum Finalizing: Sendable {
        /// Another program deleted or cut the part file; `intact` is what is left of it.
        case tampered(DownloadError, intact: TransferMachine.Checkpoint?)
        case mismatch(Checksum, got: String)
        /// Verified; the length is to be stored before the rename.
        case verified([Checksum.Algorithm: String])
        /// Verified and moved to the name it took.
        case moved(String, [Checksum.Algorithm: String])
    }

    /// Moves the verified part file to `name` in its folder and returns the name it took. A download that may take
    /// another name (`takesFreeName`) whose name was taken meanwhile takes the next free `name (n).ext`; any other
    /// stops rather than replace a file Haul did not create.
    fileprivate static func moveIntoPlace(
        _ part: PartFile, in folder: DownloadFolder, name: String, replacing: Bool, takesFreeName: Bool
    ) throws -> String {
        for number in 0..<1000 {
            let target = number == 0 ? name : FileNameSanitizer.alternative(name, number: number)
            let result = Result { () throws(DownloadError) in
                try folder.moveIntoPlace(part, to: target, replacing: replacing && number == 0)
            }
            switch result {
            case .success: return target
            case .failure(let error):
                if error.code != .destinationExists || !takesFreeName { throw error }
            }
        }
        throw DownloadError(.destinationExists, "no free name for \(name) in \(folder.path)")
    }
}

extension DownloadRunner {
    /// The largest Metalink document read from an answer.
    static let largestMetalink = 8 << 20

    /// What the body of a first answer is.
    enum AnswerBody: Equatable { case metalink, playlist, manifest, file }

    /// A Metalink document (RFC 5854's type, or Metalink 3's), which the download follows as aria2 does by default
    /// (`--follow-metalink`); an HLS playlist (its types, or a `.m3u8` served as text) or a DASH manifest
    /// (`application/dash+xml`, or a `.mpd` served as text or XML), whose stream the download fetches instead; or the
    /// file itself. The URL's path is looked at only for an answer of a text type.
    static func body(of head: ResponseHead, url: URL) -> AnswerBody {
        guard head.status == 200 else { return .file }
        let media = head.mediaType
        switch media {
        case "application/metalink4+xml", "application/metalink+xml": return .metalink
        case "application/vnd.apple.mpegurl", "application/x-mpegurl", "audio/mpegurl", "audio/x-mpegurl":
            return .playlist
        case "application/dash+xml": return .manifest
        case nil, "text/plain", "application/octet-stream", "text/xml", "application/xml":
            let path = url.decodedPath
            if path.hasSuffixIgnoringASCIICase(".mpd") { return .manifest }
            let isXML = media == "text/xml" || media == "application/xml"
            return !isXML && path.hasSuffixIgnoringASCIICase(".m3u8") ? .playlist : .file
        default: return .file
        }
    }

    /// Reads the Metalink of an answer's body, at most `largestMetalink` bytes, and parses it.
    func readMetalink(_ response: TransportResponse) async throws -> Metalink {
        var bytes: [UInt8] = []
        for try await chunk in response.body {
            bytes += chunk.readableBytesView
            guard bytes.count <= Self.largestMetalink else {
                throw DownloadError(
                    .invalidResponse,
                    "\(source) answered a Metalink larger than \(Self.largestMetalink >> 20) MiB; it is not followed")
            }
        }
        do { return try Metalink.parse(String(decoding: bytes, as: UTF8.self)) } catch {
            throw DownloadError(.invalidResponse, "\(source) answered a Metalink that cannot be read: \(error.message)")
        }
    }
}
