import Foundation
import HaulCore
import Logging
import Synchronization

extension DownloadManager {
    // MARK: Adding

    /// Adds a download and returns its id. The same URL to the same destination that is already queued, running or
    /// paused returns the existing id (a paused one is resumed); one that completed and whose file is still there
    /// returns its id with the result ready and fetches nothing.
    public func add(
        _ url: URL,
        to destination: Destination,
        options: DownloadOptions = DownloadOptions(),
        priority: DownloadPriority = .normal,
        after prerequisites: [DownloadID] = []
    ) throws(DownloadError) -> DownloadID {
        let request = DownloadRequest(
            url: url, destination: destination, options: options, priority: priority, after: prerequisites,
            origin: configuration.origin)
        do {
            return try add([request])[0].id
        } catch {
            throw error.error
        }
    }

    /// Adds several downloads in one transaction: either every one is added (or found, as the single `add` finds
    /// one) or, when one cannot be, none is and the error names its index. Costs O(log n) per download in the
    /// manager, whatever it holds.
    public func add(_ requests: [DownloadRequest]) throws(BatchError) -> [Added] {
        try add(requests, deferringCommit: false).added
    }

    /// Adds as `add(_:)` does but returns before the store has committed the new downloads: the manager's view,
    /// the events and the schedule already have them, and `committed(_:rollingBack:)` with the commit waits until
    /// the store has them too (and undoes the add when the store refused them). The daemon answers an add only then;
    /// meanwhile the manager takes further adds, and the store commits those that come together in one transaction.
    public func addDeferringCommit(_ requests: [DownloadRequest]) throws(BatchError) -> (
        added: [Added], commit: DownloadStore.Commit
    ) {
        let result = try add(requests, deferringCommit: true)
        guard let commit = result.commit else {
            throw BatchError(index: 0, error: DownloadError(.store, "the add was not queued for the store"))
        }
        return (result.added, commit)
    }

    /// `addDeferringCommit` for one download, with the download as it is now.
    public func addOneDeferringCommit(_ request: DownloadRequest) throws(DownloadError) -> (
        added: Added, download: Snapshot, commit: DownloadStore.Commit
    ) {
        let result: (added: [Added], commit: DownloadStore.Commit)
        do { result = try addDeferringCommit([request]) } catch { throw error.error }
        return (result.added[0], try snapshot(result.added[0].id), result.commit)
    }

    /// Waits until the store has committed an add made with `addDeferringCommit`. When it could not (the disk failed
    /// under it), the downloads it added are forgotten again (subscribers get `removed`) and the store's error is
    /// thrown.
    public nonisolated func committed(_ commit: DownloadStore.Commit, rollingBack added: [Added])
        async throws(DownloadError)
    {
        do { try await store.committed(commit) } catch {
            await rollBack(added.filter(\.isNew).map(\.id))
            throw error
        }
    }

    func rollBack(_ ids: [DownloadID]) async {
        for id in ids {
            if let task = tasks[id.rawValue] {
                stopReasons[id.rawValue] = .cancel
                task.cancel()
                await task.value
            }
            guard let record = known(id.rawValue) else { continue }
            forget(record)
            sessionIDs.remove(id.rawValue)
            results[id.rawValue] = nil
            errors[id.rawValue] = nil
            hub.emit(.removed(id))
        }
    }

    func add(_ requests: [DownloadRequest], deferringCommit: Bool) throws(BatchError) -> (
        added: [Added], commit: DownloadStore.Commit?
    ) {
        if isShutDown {
            throw BatchError(index: 0, error: DownloadError(.illegalTransition, "the manager has shut down"))
        }
        var added: [Added] = []
        added.reserveCapacity(requests.count)
        var fresh: [DownloadRecord] = []
        fresh.reserveCapacity(requests.count)
        var reused: [String: DownloadRecord] = [:]
        // Those another process runs: queued here to wait for it, their rows left as that process writes them.
        var othersToStore: Set<String> = []
        /// The downloads found again, as they were before this add changed them.
        var found: [String: DownloadRecord] = [:]
        var inBatch: [Catalog.Target: String] = [:]
        if requests.count > 1 { inBatch.reserveCapacity(requests.count) }
        var folders = FolderMemo(recent: recentlyWritable, allowed: allowedFolders)
        let lastPosition: Double
        do { lastPosition = try lastQueuePosition() } catch { throw BatchError(index: 0, error: error) }
        for (index, request) in requests.enumerated() {
            do {
                let (key, record, folder) = try prepare(request, folders: &folders)
                if let id = inBatch[key] {
                    added.append(Added(id: DownloadID(id), isNew: false))
                } else if let existing = try newest(at: key) {
                    found[existing.id] = existing
                    var record = existing
                    if try reuse(&record, options: request.options, staysPaused: request.isPaused) {
                        othersToStore.insert(record.id)
                    }
                    reused[record.id] = record
                    inBatch[key] = record.id
                    added.append(Added(id: DownloadID(record.id), isNew: false))
                } else if let stale = replaceable(by: key) {
                    found[stale.id] = stale
                    var record = stale
                    if try reuse(&record, options: request.options, staysPaused: request.isPaused) {
                        othersToStore.insert(record.id)
                    }
                    replaceLink(of: &record, with: key.url)
                    reused[record.id] = record
                    inBatch[key] = record.id
                    added.append(Added(id: DownloadID(record.id), isNew: false))
                } else {
                    var record = record
                    record.queuePosition = lastPosition + Double(fresh.count + 1)
                    try claimDestination(record: &record, in: folder, options: request.options)
                    fresh.append(record)
                    inBatch[key] = record.id
                    added.append(Added(id: DownloadID(record.id), isNew: true))
                }
            } catch {
                throw BatchError(index: index, error: error)
            }
        }
        recentlyWritable = folders.recent
        let changed = reused.values.filter { found[$0.id] != $0 }
        let saved = changed.filter { !othersToStore.contains($0.id) }
        var commit: DownloadStore.Commit?
        if deferringCommit {
            commit = store.submitInsert(fresh, saving: saved)
        } else {
            do { try store.insert(fresh, saving: saved) } catch { throw BatchError(index: 0, error: error) }
        }
        if leasing != nil {
            for record in fresh { fleetCounts[record.state, default: 0] += 1 }
        } else if fresh.count > 1 {
            catalog.reserve(adding: fresh.count)
        }
        // The events tell the records as kept: their options and folder names shared with the others'.
        for record in fresh {
            keep(record)
            emitAdded(catalog[record.id] ?? record)
        }
        for record in changed {
            errors[record.id] = nil
            if record.state != .completed { results[record.id] = nil }
            keep(record)
            emitChanged(catalog[record.id] ?? record)
        }
        // Only a manager that leaves stored downloads alone needs to know which ones this process added.
        if !configuration.startsStoredDownloads {
            for item in added { sessionIDs.insert(item.id.rawValue) }
        }
        try? schedule()
        return (added, commit)
    }

    /// Checks one request and makes its record (not yet stored); returns the key that finds the same URL and
    /// destination.
    func prepare(_ request: DownloadRequest, folders: inout FolderMemo) throws(DownloadError)
        -> (Catalog.Target, DownloadRecord, HeldFolder)
    {
        try Self.validate(request.url)
        try Self.validate(request.options)
        if request.options.continuePartial, leasing != nil {
            // -c takes over a file where the add was made; a fleet's download runs on whichever worker claims it,
            // in a part file of that lease's own.
            throw DownloadError(
                .invalidArgument,
                "-c (continuePartial) continues a file on one machine's disk; the downloads of a shared store run on "
                    + "whichever worker claims them, so it is not taken there")
        }
        for prerequisite in request.after where known(prerequisite.rawValue) == nil {
            throw DownloadError(.notFound, "no download with id \(prerequisite) to wait for")
        }
        try Self.checkRate(request.rateLimit)
        let urlText = request.url.absoluteString
        var options = request.options
        if !options.mirrors.isEmpty { options.mirrors = DownloadRules.distinctMirrors(options.mirrors, of: urlText) }
        var record = DownloadRecord(
            id: ids.make().rawValue, url: urlText, finalURL: nil, directory: nil, destination: nil,
            state: request.isPaused ? .paused : .queued, totalLength: nil, durableOffset: 0, etag: nil,
            lastModified: nil, isLastModifiedStrong: false, isResumable: nil, isPartVerified: true,
            mayReplaceDestination: request.options.overwrite, attempts: 0, lastError: nil, options: options,
            priority: request.priority.rawValue, queuePosition: 0, prerequisites: request.after.map(\.rawValue),
            rateLimit: request.rateLimit, segments: nil, activeConnections: 0, createdAt: Date(), updatedAt: Date(),
            errorCode: nil, errorStatus: nil, origin: request.origin, completedAt: nil
        )
        let confined = allowedFolders.confine(request.origin)
        let folder: HeldFolder
        switch request.destination {
        case .file(let rawPath):
            if rawPath.hasSuffix("/") {
                throw DownloadError(
                    .invalidArgument,
                    "\(rawPath) names a folder; to download into it, give it as the folder (-d, the API's directory)")
            }
            let path = Self.absolute(rawPath)
            folder = try folders.open(PathName.folder(of: path), confined: confined)
            let name = PathName.lastComponent(of: path)
            if (try folder.entry(name))?.kind == .folder {
                throw DownloadError(
                    .destinationExists,
                    "\(path) is a folder; to download into it, give it as the folder (-d, the API's directory)")
            }
            record.destination = PathName.join(folder.path, name)
            record.folderIdentity = folder.identity
        case .directory(let rawPath):
            folder = try folders.open(folders.absolute(rawPath), confined: confined)
            record.directory = folder.path
            record.folderIdentity = folder.identity
        }
        return (Catalog.target(of: record), record, folder)
    }

}
