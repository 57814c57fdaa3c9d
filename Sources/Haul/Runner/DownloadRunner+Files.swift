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
        let adopting = (options.continuePartial || isEarlierRow) && record.partIdentity == nil
        switch try folder.openPart(name + ".part", recorded: record.partIdentity, adopting: adopting) {
        case .opened(let part, let isNew):
            // A file handed over (-c, or an earlier row's): its bytes are compared with the server's before anything
            // is appended.
            let isHandedOver = try adopting && part.length() > 0
            self.part = part
            self.record.partIdentity = part.identity
            if isNew { isPartIdentityStored = false }
            if isHandedOver { self.record.isPartVerified = false }
        case .untrusted(let error):
            guard record.takesFreeName else { throw error }
            environment.logger.notice("\(source): \(error.message); taking the next free name")
            // The machine starts from nothing.
            self.record.durableOffset = 0
            self.record.segments = nil
            self.record.isPartVerified = true
            self.record.partIdentity = nil
            try await claimName(name, in: folder, from: 1)
        }
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
        if let recorded = record.partIdentity, ranges.contains(where: { !$0.isEmpty }) {
            if let earlier = folder.recordedPart(of: name, identity: recorded) {
                let earlierPath = PathName.join(folder.path, earlier.name)
                try await Blocking.run {
                    defer { close(earlier.descriptor) }
                    try made.copy(ranges, from: earlier.descriptor, named: earlierPath)
                    try made.syncData()
                }
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
        isPartIdentityStored = false
    }

    /// Picks the file name for a folder download from the first answer, never over a file Haul did not create. A sort
    /// rule that matches puts it in a folder beneath the download's (made when missing, opened beneath it: a link
    /// there that leads out is refused, as in any folder Haul holds).
    func resolveDestination(response: TransportResponse) async throws {
        guard var folder else {
            throw DownloadError(.fileSystem, "download \(id) has no folder open")
        }
        let name =
            options.preferredName.map(FileNameSanitizer.sanitize)
            ?? FileNameSanitizer.name(
                contentDisposition: response.head.value("Content-Disposition"),
                finalURLPath: response.finalURL.path
            )
        if let sub = environment.sorting.folder(
            name: name, contentType: response.head.value("Content-Type"), url: record.url)
        {
            folder = DownloadFolder(try folder.folder.folder(at: sub, creating: true))
            self.folder = folder
            record.folderIdentity = folder.folder.identity
            environment.logger.info("\(source): sorted into \(folder.path)")
        }
        try await claimName(name, in: folder, from: 0)
    }

    /// Claims the first free name of `name`, `name (1)`, … (from the `first`th) in the download's folder by making
    /// its part file there exclusively. Free means that nothing of any kind (a link included) has the name or its
    /// `.part`, and that no other download of the manager claims it.
    fileprivate func claimName(_ name: String, in folder: DownloadFolder, from first: Int) async throws {
        for number in first..<1000 {
            let candidate = number == 0 ? name : FileNameSanitizer.alternative(name, number: number)
            let partName = DownloadFolder.partName(candidate, lease: environment.lease)
            if folder.has(candidate) || folder.has(candidate + ".part") || folder.has(partName) { continue }
            let path = PathName.join(folder.path, candidate)
            if await environment.isDestinationClaimed(path) { continue }
            // Made exclusively: a download of another process choosing the same name at the same moment loses.
            guard let part = try folder.makePart(partName) else { continue }
            self.part = part
            record.destination = path
            record.partIdentity = part.identity
            isPartIdentityStored = false
            return
        }
        throw DownloadError(.destinationExists, "no free name for \(name) in \(folder.path)")
    }

    // MARK: Finalising

    /// A run that finds no part file, and at the destination the very file its part file was (the identity the
    /// store recorded) with exactly the length its record durably held in full, is looking at its own finished file:
    /// the previous process died between the rename and the completed state.
    func recognizeFinishedFile(in folder: DownloadFolder) async throws -> DownloadResult? {
        let record = record
        guard let destination = record.destination, let total = record.totalLength, record.durableOffset == total,
            record.isPartVerified
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
        // One trip off the cooperative pool for the sync, the look at the part file and the digests: each trip is
        // two thread switches, which a burst of small files pays for every file.
        let (tampered, digests) = try await Blocking.run {
            [algorithms] () throws -> (
                (DownloadError, intact: TransferMachine.Checkpoint?)?, [Checksum.Algorithm: String]
            ) in
            try part.sync()
            if let found = Self.checkTampering(of: part, with: .offset(total)) { return (found, [:]) }
            return (nil, algorithms.isEmpty ? [:] : try part.hexDigests(algorithms: algorithms))
        }
        if let (problem, intact) = tampered {
            // Every byte was written, and some are not there any more: nothing wrong goes under the final name.
            try? await storeTampered(intact)
            throw problem
        }
        if let checksum = options.checksum, digests[checksum.algorithm] != checksum.hex {
            let got = digests[checksum.algorithm] ?? "nothing"
            // What becomes of the bytes (fetched whole again, or deleted) is the machine's decision (`finalized`).
            throw DownloadError(
                .checksumMismatch,
                "checksum mismatch for \(source): expected \(checksum), got \(checksum.algorithm.rawValue)=\(got); "
                    + "the file was not kept"
            )
        }
        // Stored before the rename: if the process dies between the rename and the completed state, the next run
        // recognises the whole file at the destination as its own (`recognizeFinishedFile`).
        var report = transferReport(mark: .offset(size))
        report.facts?.totalLength = size
        try await save(report, waiting: true)
        let (replacing, takesFreeName) = (record.mayReplaceDestination, record.takesFreeName)
        let deletesEarlierParts = environment.lease != nil && environment.followsEarlierLeases
        let name = try await Blocking.run {
            let name = try Self.moveIntoPlace(
                part, in: folder, name: PathName.lastComponent(of: destination), replacing: replacing,
                takesFreeName: takesFreeName)
            // Whoever finishes deletes what earlier leases wrote (listing the folder: one with thousands of files
            // takes milliseconds, which a first lease does not spend).
            if deletesEarlierParts { folder.deleteLeaseParts(of: PathName.lastComponent(of: destination)) }
            folder.sync()
            return name
        }
        let target = PathName.join(folder.path, name)
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

    /// Whether an answer is a Metalink document (RFC 5854's type, or Metalink 3's), which the download follows as
    /// aria2 does by default (`--follow-metalink`).
    static func isMetalink(_ head: ResponseHead) -> Bool {
        guard head.status == 200, let type = head.value("Content-Type") else { return false }
        let media = type.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        return media == "application/metalink4+xml" || media == "application/metalink+xml"
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
