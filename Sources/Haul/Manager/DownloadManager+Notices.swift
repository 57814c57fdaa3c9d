import Foundation
import HaulCore
import Logging

/// One delivery under way: a download's notice to one sink.
struct NoticeKey: Hashable {
    var download: String
    var sink: String
}

extension DownloadManager {
    /// Gives `record` a notice of its end when a hook or webhook listens for `event`; it is stored with the end.
    func attachNotice(to record: inout DownloadRecord, _ event: PendingNotice.Event) {
        let sinks = notices.sinks(for: event)
        guard !sinks.isEmpty else { return }
        record.notice = PendingNotice(
            id: UUID().uuidString.lowercased(), event: event, at: Date(), pending: sinks, worker: workerName)
    }

    /// Replaces the hooks and webhooks (the daemon's config file, read again): ends from now on are told to these, and
    /// so are the stored notices still pending for a hook or webhook these have.
    public func setNotices(_ notices: Notices) {
        self.notices = notices
        deliverStoredNotices()
    }

    /// Delivers the notices an earlier process stored and did not deliver everywhere.
    func deliverStoredNotices() {
        if let leasing {
            // A fleet's worker holds only what it runs: the store has its pending notices.
            do {
                for record in try leasing.pendingNotices() { deliverNotice(of: record, after: nil) }
            } catch {
                configuration.logger.error("cannot read the notices pending in the store: \(error.message)")
            }
            return
        }
        for record in catalog.all where record.notice != nil { deliverNotice(of: record, after: nil) }
    }

    /// Starts delivering `record`'s notice to each sink it is pending for, once `commit` (the write that stored it)
    /// is in the store: a notice is never heard before the end it tells of is stored. Sinks this manager has no hook
    /// or webhook for stay pending, for a manager that has.
    func deliverNotice(of record: DownloadRecord, after commit: StoreCommit?) {
        guard let notice = record.notice, !isShutDown else { return }
        let configured = Set(notices.sinks(for: notice.event))
        for sink in notice.pending where configured.contains(sink) {
            let key = NoticeKey(download: record.id, sink: sink)
            guard noticeTasks[key] == nil else { continue }
            noticeTasks[key] = Task { [weak self] in
                if let commit, let self {
                    do throws(DownloadError) { try await store.committed(commit) } catch {
                        configuration.logger.error(
                            "\(record.url): its end could not be stored (\(error.message)); telling of it all the same")
                    }
                }
                await self?.deliver(notice.id, of: record.id, to: sink)
                await self?.delivered(key)
            }
        }
    }

    private func delivered(_ key: NoticeKey) { noticeTasks[key] = nil }

    /// Delivers notice `noticeID` of download `id` to `sink` until it is heard, given up, or the manager shuts down
    /// (it stays pending in the store then).
    private func deliver(_ noticeID: String, of id: String, to sink: String) async {
        let notices = self.notices
        let logger = configuration.logger
        while true {
            guard let record = try? current(id), let notice = record.notice, notice.id == noticeID,
                notice.pending.contains(sink)
            else { return }
            let download = snapshot(of: record)
            let body = NoticeDelivery.body(of: notice, download: notices.downloadJSON(download))
            if sink == PendingNotice.hookSink {
                let context = NoticeDelivery.HookContext(eventID: notice.id, download: download, event: notice.event)
                for hook in notice.event == .completed ? notices.onComplete : notices.onError {
                    do {
                        let status = try await NoticeDelivery.run(
                            hook, body: body, context: context, timeout: notices.hookTimeout, logger: logger)
                        if status != 0 { logger.warning("\(record.url): the hook '\(hook)' exited with \(status)") }
                    } catch {
                        logger.error("\(record.url): \(error.message)")
                    }
                }
                await heard(noticeID, of: id, by: sink)
                return
            }
            guard let webhook = notices.webhooks.first(where: { PendingNotice.webhookSink($0.url) == sink }) else {
                return
            }
            do {
                try await NoticeDelivery.post(body, to: webhook, id: notice.id, timeout: notices.webhookTimeout)
                await heard(noticeID, of: id, by: sink)
                return
            } catch {
                let attempts = notice.attempts[sink, default: 0] + 1
                if attempts >= notices.webhookAttempts {
                    logger.error("\(record.url): \(error.message); giving up after \(attempts) attempts")
                    await heard(noticeID, of: id, by: sink)
                    return
                }
                let backoff = notices.webhookBackoff
                let delay = backoff.isEmpty ? .seconds(60) : backoff[min(attempts, backoff.count) - 1]
                logger.warning("\(record.url): \(error.message); trying again in \(delay.spoken)")
                await failedAttempt(noticeID, of: id, by: sink, attempts: attempts)
                do { try await configuration.clock.sleep(for: delay) } catch { return }
            }
        }
    }

    /// Stores that `sink` heard the notice (or was given up): the notice is forgotten once nothing is pending.
    private func heard(_ noticeID: String, of id: String, by sink: String) async {
        await changeNotice(noticeID, of: id) { notice in
            notice.pending.removeAll { $0 == sink }
            notice.attempts[sink] = nil
        }
    }

    private func failedAttempt(_ noticeID: String, of id: String, by sink: String, attempts: Int) async {
        await changeNotice(noticeID, of: id) { notice in notice.attempts[sink] = attempts }
    }

    /// Changes the pending notice `noticeID` and waits until the change is stored.
    private func changeNotice(_ noticeID: String, of id: String, _ change: (inout PendingNotice) -> Void) async {
        guard var record = try? current(id), var notice = record.notice, notice.id == noticeID else { return }
        change(&notice)
        record.notice = notice.pending.isEmpty ? nil : notice
        if catalog[id] != nil { catalog.keep(record) }
        do {
            let commit = store.submit(try .notice(record), awaited: true)
            try await store.committed(commit)
        } catch {
            configuration.logger.error("\(record.url): cannot store its notice's delivery: \(error.message)")
        }
    }

    /// How many downloads' ends are stored and not yet told to one of this manager's hooks and webhooks (a webhook
    /// that did not answer, a manager shut down while a delivery waited to try again): the next manager on this store
    /// with that hook or webhook tells them.
    public var undeliveredNotices: Int {
        let records = leasing.map { (try? $0.pendingNotices()) ?? [] } ?? catalog.all.filter { $0.notice != nil }
        return records.reduce(0) { count, record in
            guard let notice = record.notice else { return count }
            let configured = Set(notices.sinks(for: notice.event))
            return count + (notice.pending.contains(where: configured.contains) ? 1 : 0)
        }
    }

    /// Lets every delivery under way end its attempt (a hook runs to its end or timeout), and ends those waiting to
    /// try again: what they did not deliver stays pending in the store.
    func endNoticeDeliveries() async {
        while !noticeTasks.isEmpty {
            let running = Array(noticeTasks.values)
            for task in running { task.cancel() }
            for task in running { await task.value }
        }
    }
}
