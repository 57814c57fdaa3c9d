import Foundation
import HaulCore

/// Where the manager's questions about its downloads are answered. On one machine the catalog holds every download,
/// and answers from memory. A worker of a fleet holds only what it runs (its memory does not grow with the queue):
/// its catalog has the downloads it runs, and everything else is a query of the shared store, one indexed statement
/// each (`LeasingStore`).
extension DownloadManager {
    /// How many downloads a fleet's worker reads from the store at once when it walks through many (pause all,
    /// clean).
    static let walkPage = 500

    /// The download as this manager knows it now (nil when there is none): in a fleet, the store's row unless it runs
    /// here.
    func known(_ id: String) -> DownloadRecord? {
        leasing == nil ? catalog[id] : try? current(id)
    }

    /// The download whose brief id (`DownloadID.brief`, aria2's gid) is `brief`, nil when none is: one indexed query
    /// in a fleet; on one machine a pass over the catalog.
    public func download(brief: String) throws(DownloadError) -> DownloadID? {
        if let leasing {
            return try leasing.record(brief: brief).map { DownloadID($0.id) }
        }
        return catalog.all.lazy.map { DownloadID($0.id) }.first { $0.brief == brief }
    }

    /// Those of `ids` that exist, by id (one query in a fleet).
    func known(_ ids: [String]) throws(DownloadError) -> [String: DownloadRecord] {
        var found: [String: DownloadRecord] = [:]
        var asked: [String] = []
        for id in ids {
            if let record = catalog[id], leasing == nil || tasks[id] != nil {
                found[id] = record
            } else if leasing != nil {
                asked.append(id)
            }
        }
        if let leasing, !asked.isEmpty {
            for record in try leasing.records(ids: asked) { found[record.id] = record }
        }
        return found
    }

    /// The downloads in `states` (all when nil) after `cursor` in queue order, at most `limit` (all when nil). A
    /// download that runs here is as this manager has it (newer than its row).
    func queuePage(in states: Set<DownloadState>?, after cursor: QueueCursor?, limit: Int?) throws(DownloadError)
        -> [DownloadRecord]
    {
        guard let leasing else {
            return heldPlaces(in: states, after: cursor, limit: limit).compactMap { catalog[$0.id] }
        }
        var page: [DownloadRecord] = []
        var after = cursor
        // Without a limit, page after page (a caller asked for all of them).
        repeat {
            let room = min(limit.map { $0 - page.count } ?? Self.walkPage, Self.walkPage)
            guard room > 0 else { break }
            let more = try leasing.page(in: states, after: after, limit: room)
            page += more.map { record in tasks[record.id] != nil ? catalog[record.id] ?? record : record }
            guard more.count == room, let last = more.last else { break }
            after = QueueCursor(last)
        } while true
        return page
    }

    /// The places in queue order of the downloads this manager holds in `states` (all when nil) after `cursor`, at most
    /// `limit` (all when nil). Places are sorted, not records: a list of 20,000 sorted as records held two copies of
    /// every record and a sort's buffer of half as many at once.
    func heldPlaces(in states: Set<DownloadState>?, after cursor: QueueCursor?, limit: Int?) -> [QueueCursor] {
        var chosen: [QueueCursor] = []
        for record in catalog.all where states?.contains(record.state) ?? true {
            let place = QueueCursor(record)
            if cursor.map({ $0.precedes(place) }) ?? true { chosen.append(place) }
        }
        chosen.sort { $0.precedes($1) }
        if let limit, chosen.count > limit { chosen.removeLast(chosen.count - max(0, limit)) }
        return chosen
    }

    /// Calls `body` with each download in `states`, in queue order: those of the catalog found in one walk of it, each
    /// as it is when its turn comes (skipped when it left `states` meanwhile); a fleet's worker, which never holds
    /// them all, reads the store's a page at a time.
    func forEachDownload(
        in states: Set<DownloadState>, _ body: (DownloadRecord) async throws(DownloadError) -> Void
    ) async throws(DownloadError) {
        guard leasing != nil else {
            // Not page by page: each page walks and sorts every download after the cursor, which makes a walk of a
            // long queue quadratic.
            for place in heldPlaces(in: states, after: nil, limit: nil) {
                guard let record = catalog[place.id], states.contains(record.state) else { continue }
                try await body(record)
            }
            return
        }
        var cursor: QueueCursor?
        repeat {
            let page = try queuePage(in: states, after: cursor, limit: Self.walkPage)
            for record in page { try await body(record) }
            guard page.count == Self.walkPage, let last = page.last else { return }
            cursor = QueueCursor(last)
        } while true
    }

    /// How many downloads are in each state. A fleet's worker counts what the store had at its last count (every
    /// second, or less often when counting a large queue takes long: `followFleet`), with the downloads it added
    /// since.
    var stateCounts: [DownloadState: Int] {
        leasing == nil ? catalog.counts : fleetCounts
    }

    /// How many downloads are in `state`, counted as `stateCounts` counts them.
    func stateCount(_ state: DownloadState) -> Int {
        leasing == nil ? catalog.count(of: state) : fleetCounts[state, default: 0]
    }

    /// The newest download of `target`: the one an add of the same URL and destination finds again.
    func newest(at target: Catalog.Target) throws(DownloadError) -> DownloadRecord? {
        guard let leasing else { return catalog.newest(at: target).flatMap { catalog[$0] } }
        return try leasing.newest(
            url: target.url, directory: target.isFolder ? target.place : nil,
            destination: target.isFolder || target.place.isEmpty ? nil : target.place)
    }

    /// The highest queue position given so far: new downloads go after it.
    func lastQueuePosition() throws(DownloadError) -> Double {
        guard let leasing else { return catalog.lastPosition }
        return try leasing.lastPosition()
    }

    /// The positions a move needs among the downloads of `priority` other than `id`.
    func positions(priority: Int, excluding id: String, before cursor: QueueCursor?) throws(DownloadError)
        -> QueuePositions
    {
        if let leasing { return try leasing.positions(priority: priority, excluding: id, before: cursor) }
        let others = queueOrder(catalog.all.filter { $0.priority == priority && $0.id != id })
        let index = cursor.flatMap { cursor in others.firstIndex { $0.id == cursor.id } }
        return QueuePositions(
            lowest: others.first?.queuePosition, highest: others.last?.queuePosition,
            before: index.flatMap { $0 > 0 ? others[$0 - 1].queuePosition : nil })
    }

    /// Whether a download other than `id` has `path` as its destination (a folder download choosing its name).
    func isDestinationClaimed(_ path: String, excluding id: String) -> Bool {
        guard let leasing else { return catalog.isClaimed(path, excluding: id) }
        // Unanswered, the name counts as taken: the download picks another rather than risk sharing one.
        return (try? leasing.isDestinationClaimed(path, excluding: id)) ?? true
    }

    /// How many downloads the manager holds in memory: all of them on one machine, those it runs in a fleet.
    public var heldDownloads: Int { catalog.count }
}
