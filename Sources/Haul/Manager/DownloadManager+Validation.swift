import Foundation
import HaulCore
import Logging
import Synchronization

extension DownloadManager {
    // MARK: Helpers

    func require(_ id: DownloadID) throws(DownloadError) -> DownloadRecord {
        guard let record = try current(id.rawValue) else {
            throw DownloadError(.notFound, "no download with id \(id)")
        }
        return record
    }

    /// Re-adding a known download: resume what can be resumed, restart what was lost. Returns whether the download
    /// is another process's now (it holds its lock, `RunLocks`): queued here to wait for it, its row is not written.
    @discardableResult
    func reuse(_ record: inout DownloadRecord, options: DownloadOptions, staysPaused: Bool)
        throws(DownloadError) -> Bool
    {
        // Each pattern of a case needs its own `where`: one after the last binds only that one.
        let isRunElsewhere = tasks[record.id] == nil && leasing == nil && !configuration.recoversInterruptedDownloads
        switch record.state {
        case .running where isRunElsewhere, .waitingForNetwork where isRunElsewhere:
            // Held as running by the store, and not running here: another process's, or one that ended without
            // stopping it while others ran (nothing queued it again). Asked for, it runs here once no live process
            // runs it: one that holds its lock (`RunLocks`) is waited for, and its row is not written meanwhile
            // (`isHeldElsewhere`); one that holds only its part file (a Haul without those locks) refuses it.
            if let runLocks, runLocks.isHeldElsewhere(record.id) {
                try record.apply(.interruptedByExit)
                record.activeConnections = 0
                return true
            }
            if DownloadFolder.isPartHeldElsewhere(record, allowed: allowedFolders) {
                throw DownloadError(.locked, "another process is downloading to \(record.destination ?? record.url)")
            }
            try record.apply(.interruptedByExit)
            record.activeConnections = 0
            return false
        case .queued, .running, .waitingForNetwork:
            return false
        case .paused where staysPaused:
            return false
        case .completed:
            if try alreadyComplete(record) != nil { return false }
            // The file is gone, or is not the one Haul finished any more (edited, or another put in its place): it
            // is fetched again, and a file at its name now is replaced only when asked, as any file Haul did not
            // make (a download into a folder takes the next free name instead).
            record.mayReplaceDestination = options.overwrite
            if !options.overwrite, let path = record.destination,
                let folder = try? DownloadFolder.open(for: record, allowed: allowedFolders),
                (try? folder.entry(PathName.lastComponent(of: path))) ?? nil != nil
            {
                let changed = "\(path) is not the file Haul finished any more (changed or replaced since)"
                guard record.takesFreeName else {
                    throw DownloadError(
                        .destinationExists,
                        "\(changed); it is replaced only when asked (--overwrite, the API's overwrite, aria2's "
                            + "allow-overwrite)")
                }
                // Said here: the name the download then takes is not the one its add announced.
                configuration.logger.warning(
                    "\(changed); it is left as it is, and fetched again under the next free name")
            }
            record.durableOffset = 0
            record.segments = nil
            record.remoteFacts = nil
            record.completedAt = nil
        case .paused, .failed, .cancelled:
            break
        }
        record.options = options
        record.mayReplaceDestination = record.mayReplaceDestination || options.overwrite
        try record.apply(staysPaused ? .addedAgainPaused : .addedAgain)
        record.attempts = 0
        record.error = nil
        return false
    }

    /// The result for a completed record whose file is still in place, nil when the file is gone, changed size or
    /// is another file now. The disk is looked at every time, before the result kept from the run: a file deleted
    /// since (by its user, while a daemon runs on) is fetched again by the next add, not reported complete; and a
    /// file another download put under the name (another URL with `--overwrite`) is not this download's, whatever
    /// its length. A fleet looks at the length alone: each lease writes a part file of its own, and the record a
    /// worker holds may name its own lease's while another worker's became the file.
    func alreadyComplete(_ record: DownloadRecord) throws(DownloadError) -> DownloadResult? {
        guard record.state == .completed, let path = record.destination, let total = record.totalLength,
            let folder = try? DownloadFolder.open(for: record, allowed: allowedFolders),
            let file = try? folder.entry(PathName.lastComponent(of: path)), file.kind == .regular, file.size == total
        else { return nil }
        if leasing == nil, let made = record.partIdentity, file.identity != made { return nil }
        if let result = results[record.id] { return result }
        var digest: String?
        if record.options.computesSHA256 {
            let descriptor = try folder.open(PathName.lastComponent(of: path), as: file)
            defer { close(descriptor) }
            digest = try FileDigest.hexDigests(of: descriptor, named: path, algorithms: [.sha256])[.sha256]
        }
        let result = DownloadResult(
            id: DownloadID(record.id), url: record.url, path: path, bytes: total, sha256: digest, seconds: 0,
            resumedFrom: total, wasAlreadyComplete: true
        )
        results[record.id] = result
        return result
    }

    /// A file at the destination that Haul did not create is never overwritten unless asked, and never one that is
    /// not a regular file. `continuePartial` hands Haul a file on purpose: the part file when there is one, else the
    /// file at the destination (a regular file with one link, whoever made it, written from its start), checked
    /// here and moved to the part's name when the download starts (`DownloadFolder.handOver`); the runner takes it
    /// over and compares its bytes with the server's before anything is appended.
    func claimDestination(record: inout DownloadRecord, in folder: HeldFolder, options: DownloadOptions)
        throws(DownloadError)
    {
        guard let destination = record.destination else { return }
        let name = PathName.lastComponent(of: destination)
        if options.continuePartial, let part = try folder.entry(name + ".part") {
            if part.kind == .regular { try Self.refuseHoles(name + ".part", as: part, in: folder) }
            return
        }
        guard let existing = try folder.entry(name) else { return }
        if options.continuePartial { return try Self.checkContinuable(name, as: existing, in: folder) }
        // Whatever is asked: a link, a FIFO or a device is never followed nor replaced, and saying so first spares
        // a user the --overwrite that would be refused next.
        if existing.kind != .regular {
            throw DownloadError(
                .untrustedFile, "\(destination) is \(existing.kindInWords); Haul neither follows nor replaces it")
        }
        guard options.overwrite else {
            // A file an earlier download finished is said to be so (another URL to the same -o), not a stranger's.
            let earlier =
                leasing == nil
                ? catalog.claimants(of: destination).lazy.compactMap { self.known($0) }.first {
                    $0.id != record.id && $0.state == .completed && $0.totalLength == existing.size
                } : nil
            let what =
                earlier.map { "\(destination) holds an earlier download, of \($0.url)" }
                ?? "\(destination) already exists and Haul did not create it"
            throw DownloadError(
                .destinationExists,
                "\(what); it is replaced only when asked (--overwrite, the API's overwrite, aria2's allow-overwrite), "
                    + "or continued with -c (the API's continuePartial)")
        }
        record.mayReplaceDestination = true
    }

    /// What `-c` asks of the file at a download's name, when it is added and again when it is handed over: a regular
    /// file with one link, whoever made it, written from its start.
    static func checkContinuable(_ name: String, as entry: FolderEntry, in folder: HeldFolder) throws(DownloadError) {
        if let reason = entry.distrust(owner: nil) {
            throw DownloadError(.untrustedFile, "\(folder.path(of: name)) \(reason); Haul will not continue it")
        }
        try refuseHoles(name, as: entry, in: folder)
    }

    /// `-c` continues a file written from its start. A file with a hole (bytes never written) is not one: it is
    /// what a download made with several connections leaves when its record is gone. Where the file system shows
    /// holes (`PartFile.firstHole`), such a file is refused and left as it is; where it cannot (FUSE, NFS), `-c`
    /// has its overlap check alone, as `curl -C -` and `wget -c` have. Haul's own part files never need this: their
    /// row, with the segment map, is durable before they exist.
    static func refuseHoles(_ name: String, as entry: FolderEntry, in folder: HeldFolder)
        throws(DownloadError)
    {
        let descriptor = try folder.open(name, as: entry, writing: false)
        defer { close(descriptor) }
        if let hole = PartFile.firstHole(in: descriptor) {
            throw DownloadError(
                .untrustedFile,
                "\(folder.path(of: name)) has a hole at byte \(hole) (a range never written): it was not written from "
                    + "its start, as the part file of a download made with several connections is; -c continues only a "
                    + "file written from its start, so it is left as it is")
        }
    }

    /// The options of a request, by `DownloadRules`: the engine takes exactly what the API documents.
    static func validate(_ options: DownloadOptions) throws(DownloadError) {
        do {
            try DownloadRules.checkConnections(options.maxConnectionsPerDownload)
            try DownloadRules.checkMinimumSplitSize(options.minimumSplitSize)
            try DownloadRules.checkTimeout(options.idleTimeoutSeconds)
            try DownloadRules.checkRetries(options.maximumAttemptsWithoutProgress)
            try DownloadRules.checkMirrors(options.mirrors)
            if let pieces = options.pieces { try DownloadRules.checkPieces(pieces) }
            for header in options.headers { try DownloadRules.checkHeader(header) }
        } catch {
            throw DownloadError(error, subject: subject(of: error.rule))
        }
    }

    /// How the engine's messages name what a rule is about.
    static func subject(of rule: DownloadRules.RuleViolation.Rule) -> String {
        switch rule {
        case .url: "the URL"
        case .connections: "connections"
        case .minimumSplitSize: "the minimum split size"
        case .concurrentDownloads: "the number of downloads at once"
        case .connectionsPerHost: "the connections to one host"
        case .downloadsPerHost: "the downloads of one host"
        case .rate: "a rate limit"
        case .timeout: "the idle timeout"
        case .retries: "the attempts without progress"
        case .pageSize: "a page"
        case .nameLength: "a name"
        case .fileName: "a file name"
        case .mirrors: "the mirrors"
        case .pieces: "the piece hashes"
        case .header: "a header"
        }
    }

    static func validate(_ url: URL) throws(DownloadError) {
        do { try DownloadRules.checkURL(url) } catch {
            throw DownloadError(.invalidURL, "'\(url.absoluteString)' \(error.problem)")
        }
    }

    static func absolute(_ path: String) -> String {
        PathName.absolute(path)
    }

    /// What one add learns about folders, once for a list: each folder's absolute form as the request named it (a
    /// list of ten thousand into one folder normalises it once), and each folder opened and found writable.
    struct FolderMemo {
        /// A folder opened for a path a request named, and when.
        struct Recent {
            let named: String
            let isConfined: Bool
            let folder: HeldFolder
            let at: ContinuousClock.Instant
        }

        /// Each folder opened in this batch, by the path named and whether it is confined.
        private var opened: [String: HeldFolder] = [:]
        private var lastNamed: (String, String)?
        /// The folder opened last, across adds (see `recentlyWritable`).
        private(set) var recent: Recent?
        private let allowed: AllowedFolders

        init(recent: Recent?, allowed: AllowedFolders) {
            self.recent = recent
            self.allowed = allowed
        }

        /// The folder `path` names, opened and checked writable, once per batch (and once a second across adds).
        /// A confined request's folder is opened beneath the allowed folder it lies in; any other where its path
        /// leads now (its links are the namer's). Its identity is recorded: every later start must find that folder.
        mutating func open(_ path: String, confined: Bool) throws(DownloadError) -> HeldFolder {
            let now = ContinuousClock.now
            if let recent, recent.named == path, recent.isConfined == confined, now - recent.at < .seconds(1) {
                return recent.folder
            }
            let key = (confined ? "confined:" : "named:") + path
            let folder: HeldFolder
            if let known = opened[key] {
                folder = known
            } else {
                folder = try DownloadManager.openFolder(path, confined: confined, allowed: allowed)
                opened[key] = folder
            }
            recent = Recent(named: path, isConfined: confined, folder: folder, at: now)
            return folder
        }

        mutating func absolute(_ named: String) -> String {
            if let lastNamed, lastNamed.0 == named { return lastNamed.1 }
            let path = PathName.absolute(named)
            lastNamed = (named, path)
            return path
        }
    }

    /// Opens the folder `path` for a download and checks it is writable: beneath its allowed folder when `confined`,
    /// else where its path leads now.
    static func openFolder(_ path: String, confined: Bool, allowed: AllowedFolders)
        throws(DownloadError) -> HeldFolder
    {
        let folder = try DownloadFolder.open(path, confined: confined, allowed: allowed)
        guard folder.isWritable else {
            throw DownloadError(.destinationNotWritable, "destination folder \(path) is not a writable folder")
        }
        return folder
    }
}
