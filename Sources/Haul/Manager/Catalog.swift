import Foundation
import HaulCore
import Logging
import NIOCore
import Synchronization

/// The records in memory with the indexes the manager keeps beside them. A class: the manager reads it many times
/// for each download, and a struct of eight collections was copied (each collection retained and released) by reads
/// the compiler could not prove left it unchanged.
final class Catalog {
    /// A download's URL and destination (a file, or a folder for a name the server chooses); its strings are the
    /// record's own, not copies. Its hash is computed once: an add looks a target up four times (in its batch and
    /// in the catalog, then stores it in both), and hashing the two strings each time was a tenth of a batch's time.
    struct Target: Hashable {
        let url: String
        let isFolder: Bool
        let place: String
        private let digest: Int

        init(url: String, isFolder: Bool, place: String) {
            self.url = url
            self.isFolder = isFolder
            self.place = place
            var hasher = Hasher()
            hasher.combine(url)
            hasher.combine(isFolder)
            hasher.combine(place)
            digest = hasher.finalize()
        }

        func hash(into hasher: inout Hasher) { hasher.combine(digest) }

        static func == (left: Target, right: Target) -> Bool {
            left.digest == right.digest && left.isFolder == right.isFolder && left.url == right.url
                && left.place == right.place
        }
    }

    /// Each record by its id (a record is one reference to its fields: the dictionary's buckets stay small).
    private var records: [String: DownloadRecord] = [:]
    /// The records in state `queued`, in queue order (higher priority first, then lower position). A ring: the
    /// download that starts is nearly always the first, and an array shifted every other entry each time (with
    /// 10,000 queued, gigabytes moved over a batch).
    private(set) var queue = CircularBuffer<DownloadManager.QueueCursor>()
    /// The newest record of each URL and destination: how `add` finds a download it already has without looking at
    /// every record. The older ones of a target (rare: a target added again after it was cancelled) wait in
    /// `olderByTarget`, oldest first.
    private var byTarget: [Target: String] = [:]
    /// The ids of the downloads (not cancelled) that have each destination: a folder download choosing its name asks
    /// here instead of the store (a query for every small file).
    private var destinations: [String: Set<String>] = [:]
    private var olderByTarget: [Target: [String]] = [:]
    /// How many records are in each state, at the state's index (`place(of:)`): counted at every keep, and an array
    /// indexed by the state does not hash the state's name as a dictionary keyed by it would.
    private var countsByState = [Int](repeating: 0, count: DownloadState.allCases.count)
    /// How many records are in each state (every state, 0 for none).
    var counts: [DownloadState: Int] {
        Dictionary(uniqueKeysWithValues: DownloadState.allCases.map { ($0, count(of: $0)) })
    }

    /// How many records are in `state`.
    func count(of state: DownloadState) -> Int { countsByState[Self.place(of: state)] }

    private static func place(of state: DownloadState) -> Int {
        switch state {
        case .queued: 0
        case .running: 1
        case .paused: 2
        case .waitingForNetwork: 3
        case .completed: 4
        case .failed: 5
        case .cancelled: 6
        }
    }

    private func count(_ state: DownloadState, _ change: Int) { countsByState[Self.place(of: state)] += change }
    /// The highest queue position given so far: a new download goes after it.
    var lastPosition: Double = 0
    /// One copy of each folder name: thousands of downloads into one folder share it.
    private var folders: Set<String> = []
    /// The folder name shared last (most adds go to the folder of the one before).
    private var lastFolder: String?
    /// The options of the record kept last: the next one with equal options shares their storage.
    private var lastOptions: DownloadOptions?

    subscript(id: String) -> DownloadRecord? { records[id] }

    /// The prerequisites of download `id` (`nil` for an unknown id).
    func prerequisites(of id: String) -> [String]? { records[id]?.prerequisites }

    /// The URL of download `id`.
    func url(of id: String) -> String? { records[id]?.url }

    /// The id of the newest record of `target`.
    func newest(at target: Target) -> String? { byTarget[target] }

    /// Every record, in no order.
    var all: some Collection<DownloadRecord> { records.values }

    var count: Int { records.count }

    static func target(of record: DownloadRecord) -> Target {
        target(url: record.url, directory: record.directory, destination: record.destination)
    }

    static func target(url: String, directory: String?, destination: String?) -> Target {
        if let directory { return Target(url: url, isFolder: true, place: directory) }
        return Target(url: url, isFolder: false, place: destination ?? "")
    }

    /// Room for `count` more records, made once before a list is kept: growing one record at a time moves every
    /// entry of the indexes again at each doubling.
    func reserve(adding count: Int) {
        records.reserveCapacity(records.count + count)
        byTarget.reserveCapacity(byTarget.count + count)
    }

    /// Keeps `record`, with its place in the queue when it is queued, its target and its state's count; its folder
    /// name and options are shared with the records before it that have equal ones. Consumed: it moves into the
    /// catalog.
    func keep(_ record: consuming DownloadRecord) {
        var record = record
        // Looked up once: the new version takes the old one's place at the end.
        let slot = records.index(forKey: record.id)
        let known = slot.map { records.values[$0] }
        // Shared when new to the catalog or changed: a record kept again as it runs has them shared already, and
        // setting a field of a record that shares its fields copies them.
        if let shared = lastOptions, !(known?.options.sharesStorage(with: record.options) ?? false),
            record.options == shared, !record.options.sharesStorage(with: shared)
        {
            record.options = shared
        }
        lastOptions = record.options
        if let directory = record.directory, known?.directory != directory {
            if let lastFolder, lastFolder == directory {
                record.directory = lastFolder
            } else if let shared = folders.firstIndex(of: directory) {
                record.directory = folders[shared]
            } else {
                folders.insert(directory)
            }
            lastFolder = record.directory
        }
        // Whether the claims of destinations change: most keeps of a running download change neither its
        // destination nor whether it is cancelled, and each claim and unclaim hashes the path and the id.
        let claimsChange =
            known.map {
                $0.destination != record.destination || ($0.state == .cancelled) != (record.state == .cancelled)
            }
            ?? true
        if let old = known {
            if claimsChange { unclaim(old.destination, of: record.id) }
            if old.url != record.url {
                // A replaced link: an add of the new URL to the same place finds the download.
                let before = Self.target(url: old.url, directory: old.directory, destination: old.destination)
                let after = Self.target(of: record)
                if byTarget[before] == record.id { byTarget[before] = nil }
                byTarget[after] = record.id
            }
            if old.state != record.state {
                count(old.state, -1)
                count(record.state, 1)
            }
            if old.state == .queued {
                dequeue(DownloadManager.QueueCursor(old))
            }
        } else {
            let target = Self.target(of: record)
            if let previous = byTarget.updateValue(record.id, forKey: target) {
                olderByTarget[target, default: []].append(previous)
            }
            count(record.state, 1)
        }
        if record.state == .queued {
            let key = DownloadManager.QueueCursor(record)
            let offset = place(of: key)
            // Nearly always at the end: a new download goes after every other of its priority.
            if offset == queue.count {
                queue.append(key)
            } else {
                queue.insert(key, at: queue.index(queue.startIndex, offsetBy: offset))
            }
        }
        if claimsChange, let destination = record.destination, record.state != .cancelled {
            destinations[destination, default: []].insert(record.id)
        }
        lastPosition = max(lastPosition, record.queuePosition)
        // Last, so the record moves in.
        if let slot { records.values[slot] = record } else { records[record.id] = record }
    }

    /// The downloads that are not cancelled and have `destination`.
    func claimants(of destination: String) -> Set<String> { destinations[destination] ?? [] }

    /// Whether a download other than `id` that is not cancelled has `destination`.
    func isClaimed(_ destination: String, excluding id: String) -> Bool {
        guard let ids = destinations[destination] else { return false }
        return ids.contains { $0 != id }
    }

    private func unclaim(_ destination: String?, of id: String) {
        guard let destination else { return }
        destinations[destination]?.remove(id)
        if destinations[destination]?.isEmpty == true { destinations[destination] = nil }
    }

    /// Where `key` is or belongs in `queue` (binary search).
    private func place(of key: DownloadManager.QueueCursor) -> Int {
        var low = 0
        var high = queue.count
        while low < high {
            let middle = (low + high) / 2
            if queue[queue.index(queue.startIndex, offsetBy: middle)].precedes(key) {
                low = middle + 1
            } else {
                high = middle
            }
        }
        return low
    }

    private func dequeue(_ key: DownloadManager.QueueCursor) {
        let offset = place(of: key)
        guard offset < queue.count else { return }
        let index = queue.index(queue.startIndex, offsetBy: offset)
        guard queue[index] == key else { return }
        if offset == 0 { queue.removeFirst() } else { queue.remove(at: index) }
    }

    func forget(_ record: DownloadRecord) {
        guard let old = records.removeValue(forKey: record.id) else { return }
        unclaim(old.destination, of: old.id)
        count(old.state, -1)
        if old.state == .queued { dequeue(DownloadManager.QueueCursor(old)) }
        let key = Self.target(of: old)
        if byTarget[key] == record.id {
            byTarget[key] = olderByTarget[key]?.popLast()
            if olderByTarget[key]?.isEmpty == true { olderByTarget[key] = nil }
        } else {
            olderByTarget[key]?.removeAll { $0 == record.id }
            if olderByTarget[key]?.isEmpty == true { olderByTarget[key] = nil }
        }
    }
}
