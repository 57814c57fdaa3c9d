import Foundation
import HaulCore
import Logging

extension DownloadManager {
    /// Replaces the URL of `id`, keeping the bytes it holds when the new link serves the same file: an expired signed
    /// link given again, a file that moved. The new link's first answer must show the same length and the stored
    /// strong validator, or the held bytes before each offset are compared first (`TransferMachine+Checks`); another
    /// file starts again from 0, and the event says so. Two files are never mixed.
    ///
    /// A running download goes on at once from the new link; a failed or cancelled one is queued again (the failure
    /// was the link's); a paused or queued one keeps its state. A completed download has nothing left to fetch and is
    /// refused. The mirrors stay, unless `mirrors` replaces them too.
    public func replaceURL(_ url: URL, mirrors: [String]? = nil, for id: DownloadID) async throws(DownloadError) {
        try Self.validate(url)
        if let mirrors {
            do { try DownloadRules.checkMirrors(mirrors) } catch { throw DownloadError(error, subject: "mirrors") }
        }
        var record = try require(id)
        guard record.state != .completed else {
            throw DownloadError(.illegalTransition, "\(id.rawValue) is completed: it has no bytes left to fetch")
        }
        var resumes = false
        if let holder = heldElsewhere(id.rawValue) {
            // Another worker runs it: paused there first, then queued again with the new link.
            try await forward(.pause, for: id.rawValue, to: holder) { !Self.holdsWork($0.state) }
            record = try require(id)
            resumes = record.state == .paused
        }
        replaceLink(of: &record, with: url.absoluteString)
        if let mirrors { record.options.mirrors = mirrors }
        if tasks[id.rawValue] != nil {
            // The catalog's record is what the run's end stores: it ends as queued, and starts again on the new link.
            try persist(record)
            _ = await stopRunning(id, because: .exit)
            return
        }
        if resumes || record.state == .failed || record.state == .cancelled {
            try record.apply(resumes ? .resumeRequested : .retryRequested)
            return try requeue(&record)
        }
        try persist(record)
        emitChanged(record)
        if record.state == .queued {
            // A manager that runs only what its process added (`haul retry --url` without a daemon) runs this too.
            sessionIDs.insert(record.id)
            try schedule()
        }
    }

    /// Changes the mirrors of `id`, from its next run on (a running download keeps the servers it has).
    public func setMirrors(_ mirrors: [String], for id: DownloadID) throws(DownloadError) {
        do { try DownloadRules.checkMirrors(mirrors) } catch { throw DownloadError(error, subject: "mirrors") }
        var record = try require(id)
        record.options.mirrors = mirrors
        try persist(record)
        emitChanged(record)
    }

    /// Gives `record` the link `url`, whose first answer is checked against the bytes held.
    func replaceLink(of record: inout DownloadRecord, with url: String) {
        record.url = url
        record.finalURL = nil
        record.options.linkReplaced = true
        record.error = nil
        let held = record.durableOffset
        let kept = held > 0 ? "; the \(held) bytes held are kept if the new link serves the same file" : ""
        configuration.logger.notice("\(record.id): link replaced\(kept)")
    }

    /// Whether `record`, whose run just failed, gets a new link from the refresh command: its link expired, a command
    /// is set, and the link it gave last time brought bytes (one that expired before any byte came would only loop).
    func refreshesLink(of record: DownloadRecord) -> Bool {
        guard notices.refreshLink != nil, record.error?.code == .linkExpired, !isShutDown else { return false }
        if let before = refreshedAt[record.id], record.durableOffset <= before {
            configuration.logger.error(
                "\(record.id): the link the refresh command gave expired before any byte came from it; not again")
            return false
        }
        return true
    }

    /// Runs the refresh command for `record`'s expired link, once: the last line of its output that is a URL
    /// replaces the link, and the download goes on keeping its bytes. When the command fails or prints no URL, the
    /// download is told as failed, as it would have been without one.
    func refreshLink(of record: DownloadRecord) {
        guard let hook = notices.refreshLink else { return }
        refreshedAt[record.id] = record.durableOffset
        let download = snapshot(of: record)
        let body = notices.downloadJSON(download)
        let (timeout, logger, id) = (notices.hookTimeout, configuration.logger, record.id)
        let context = NoticeDelivery.HookContext(
            eventID: UUID().uuidString.lowercased(), download: download, event: .failed)
        refreshTasks[id] = Task { [weak self] in
            do {
                let (status, lines) = try await NoticeDelivery.execute(
                    hook, body: body, context: context, timeout: timeout, logger: logger)
                guard status == 0 else {
                    throw DownloadError(.invalidArgument, "the refresh command '\(hook)' exited with \(status)")
                }
                let urls = lines.compactMap { line -> URL? in
                    let text = line.trimmingCharacters(in: .whitespaces)
                    guard (try? DownloadRules.checkURL(text)) != nil else { return nil }
                    return URL(string: text)
                }
                guard let url = urls.last else {
                    throw DownloadError(.invalidArgument, "the refresh command '\(hook)' printed no URL")
                }
                logger.notice("\(id): the refresh command gave a new link")
                try await self?.replaceURL(url, for: DownloadID(id))
                await self?.refreshEnded(id, failure: nil)
            } catch {
                await self?.refreshEnded(id, failure: error as? DownloadError)
            }
        }
    }

    /// A refresh ended: when it gave no new link, the download is told as failed with its expiry.
    private func refreshEnded(_ id: String, failure: DownloadError?) {
        refreshTasks[id] = nil
        guard let failure else { return }
        configuration.logger.error("\(catalog[id]?.url ?? id): \(failure.message)")
        guard var record = catalog[id], let error = record.error else { return }
        attachNotice(to: &record, .failed)
        try? persist(record)
        emitChanged(record)
        if record.notice != nil { deliverNotice(of: record, after: nil) }
        finish(id, with: .failure(error))
    }

    /// The unfinished download at the file `key` names under another URL, on one machine: an add of the new URL to
    /// the same path (`haul get NEW -o PATH`) is that download with its link replaced, not a second download of the
    /// same file. A running one is not taken over (its run holds the part file).
    func replaceable(by key: Catalog.Target) -> DownloadRecord? {
        guard leasing == nil, !key.isFolder, !key.place.isEmpty else { return nil }
        for id in catalog.claimants(of: key.place).sorted() {
            guard let record = catalog[id], record.url != key.url, tasks[id] == nil,
                [.queued, .paused, .failed].contains(record.state)
            else { continue }
            return record
        }
        return nil
    }
}
