import Foundation
import HaulCore

/// What a manager keeps its downloads in: the SQLite store of one machine (`DownloadStore`, the default) or the
/// PostgreSQL store several workers share (`HaulPostgres`). Writes go in the order they are asked for and commit in
/// groups; a write someone waits for is durable when the wait returns, and a write no one waits for is stored within
/// moments (a power cut may lose it, which only lowers stored offsets and states).
public protocol DownloadStoring: Sendable {
    /// Inserts or replaces a record, stamping `updatedAt`; returns once it is committed.
    func save(_ record: DownloadRecord) throws(DownloadError)
    /// Inserts or replaces many records in one transaction.
    func save(_ records: [DownloadRecord]) throws(DownloadError)
    /// Inserts new records and saves changed ones in one transaction: all or none.
    func insert(_ records: [DownloadRecord], saving changed: [DownloadRecord]) throws(DownloadError)
    /// Queues what `insert(_:saving:)` writes and returns at once; `committed(_:)` waits for it.
    func submitInsert(_ records: [DownloadRecord], saving changed: [DownloadRecord]) -> StoreCommit
    /// Queues `update` and returns at once; with `awaited`, its caller will wait for it (`committed(_:)`).
    func submit(_ update: DownloadStore.RowUpdate, awaited: Bool) -> StoreCommit
    /// Waits until `commit` is in the store; throws when its write failed (nothing of it was stored).
    func committed(_ commit: StoreCommit) async throws(DownloadError)
    /// Has `handler` told of each queued write that no one waited for and that failed.
    func onLostWrite(_ handler: @escaping @Sendable (DownloadError) -> Void)
    /// Waits until every write queued so far is committed.
    func flush()
    /// Records a new run of a manager on this store and returns its number (always growing).
    func beginRun() throws(DownloadError) -> Int64
    /// The stored settings, nil when none were stored.
    func settings() throws(DownloadError) -> ManagerSettings?
    /// Stores the settings.
    func saveSettings(_ settings: ManagerSettings) throws(DownloadError)
    /// Every record, oldest first.
    func allRecords() throws(DownloadError) -> [DownloadRecord]
    /// The record with `id` as the store has it now, nil when there is none.
    func record(id: String) throws(DownloadError) -> DownloadRecord?
    /// Whether the store was made when it was opened and nothing was written through it since: a manager starting
    /// on it has nothing to read back (a SQLite store's first read opens a connection of its own, a twentieth of a
    /// one-file `haul get`). What another process adds meanwhile is known as what it adds after the start is.
    var startedEmpty: Bool { get }
    /// The store as one several workers share, nil for a store of one machine. Asked of the store, not found by a cast:
    /// a cast that fails looks through every conformance the program has.
    var leasing: (any LeasingStore)? { get }
    /// Forgets a record.
    func delete(id: String) throws(DownloadError)
    /// Forgets records: in one transaction where the store can (a clean of thousands commits once).
    func delete(ids: [String]) throws(DownloadError)
}

extension DownloadStoring {
    /// One record after another.
    public func delete(ids: [String]) throws(DownloadError) {
        for id in ids { try delete(id: id) }
    }
}

/// A store several workers share (`PostgresStore`): a worker runs only the downloads it claimed, each under a lease
/// it renews (its heartbeat). The store fences every write of a claimed download by its lease, and refuses a write of
/// a download another worker holds: two workers never both advance one download. When a write or a renewal finds a
/// lease gone (the download was taken over while this worker was stopped, cut off or too slow), the store tells
/// `onLostLease`, and the worker stops that download at once.
public protocol LeasingStore: DownloadStoring {
    /// The name of the worker this store claims for.
    var worker: String { get }
    /// How long a lease lasts unless renewed; renewals come every third of it.
    var leaseDuration: Duration { get }
    /// Claims up to `limit` downloads for this worker, in queue order: queued ones, and those whose holder's lease
    /// expired, whose prerequisites completed, and (for those confined to allowed folders) that lie in one of
    /// `folders`, this worker's allowed folders. Their later writes are fenced by their leases. The fleet's leases
    /// together stay within `fleetTotal` (a schedule's `jobs=` in force), else within the stored fleet limit.
    func claim(limit: Int, within folders: [String], fleetTotal: Int?) throws(DownloadError) -> [DownloadRecord]
    /// Renews every lease this worker holds; returns the downloads whose lease it no longer holds. Throws `locked`
    /// when another process took this worker's name (as `pulse` does): the worker stops.
    func renewLeases() throws(DownloadError) -> Set<String>
    /// Gives up the lease of `id` once the writes queued before it are committed (queued, in order; a download
    /// released as queued is claimable at once by any worker). Until its run ends (and this is called), a download
    /// whose lease was lost stays fenced by that lease: nothing its run still writes is stored.
    func release(_ id: String)
    /// Where the fleet's events stand now: those after it are yet to come.
    func eventPosition() throws(DownloadError) -> EventID
    /// The fleet's events after `position` (at most `limit`), in the one order every worker reads them, each with its
    /// download as it is now: how a worker learns what the others did, and the ids of the event stream.
    func events(after position: EventID, limit: Int) throws(DownloadError) -> [FleetEvent]
    /// Forgets the events older than `age`.
    func pruneEvents(olderThan age: Duration) throws(DownloadError)
    /// The download as the store has it now.
    func record(id: String) throws(DownloadError) -> DownloadRecord?
    /// Whether this worker holds the lease of `id`.
    func holds(_ id: String) -> Bool
    /// The number of this worker's lease of `id`, if it holds one.
    func lease(of id: String) -> Int64?
    /// Whether this worker's lease of `id` follows earlier ones, which may have left part files of their own.
    func followsEarlierLeases(_ id: String) -> Bool
    /// The downloads whose end this worker stored a notice of that some hook or webhook has yet to hear: a worker
    /// delivers what it left pending when it starts again.
    func pendingNotices() throws(DownloadError) -> [DownloadRecord]
    /// Has `handler` told of each download whose lease this worker lost, once.
    func onLostLease(_ handler: @escaping @Sendable (String) -> Void)
    /// The worker that holds a live lease of `id`, if any.
    func holder(of id: String) throws(DownloadError) -> String?
    /// Tells the worker that runs `id` to do `command` (every worker hears it; the one that runs it acts).
    func send(_ command: FleetCommand, for id: String) throws(DownloadError)
    /// Has `handler` told of each command sent to the fleet, with its download.
    func onCommand(_ handler: @escaping @Sendable (String, FleetCommand) -> Void)
    /// Every worker that has used the store, by name, with its last heartbeat and what it holds now.
    func workers() throws(DownloadError) -> [WorkerStatus]

    // A worker holds what it runs, not every download: what it answers about the others, it asks the store.

    /// The downloads in `states` (all when nil) after `cursor` in queue order, at most `limit`.
    func page(in states: Set<DownloadState>?, after cursor: DownloadManager.QueueCursor?, limit: Int)
        throws(DownloadError) -> [DownloadRecord]
    /// Those of `ids` that the store has, in no order.
    func records(ids: [String]) throws(DownloadError) -> [DownloadRecord]
    /// How many downloads are in each state.
    func counts() throws(DownloadError) -> [DownloadState: Int]
    /// The newest download of `url` into the folder `directory` (a name the server chooses) or, without one, to the
    /// file `destination`: the one an add of the same request finds again.
    func newest(url: String, directory: String?, destination: String?) throws(DownloadError) -> DownloadRecord?
    /// Whether a download other than `id` that is not cancelled has `destination`.
    func isDestinationClaimed(_ destination: String, excluding id: String) throws(DownloadError) -> Bool
    /// The highest queue position (0 without downloads): a new download goes after it.
    func lastPosition() throws(DownloadError) -> Double
    /// The positions a move to the top, the bottom, or before `cursor` needs, among the downloads of `priority`
    /// other than `id`.
    func positions(priority: Int, excluding id: String, before cursor: DownloadManager.QueueCursor?)
        throws(DownloadError) -> QueuePositions
    /// The download whose brief id (`DownloadID.brief`) is `brief`.
    func record(brief: String) throws(DownloadError) -> DownloadRecord?
    /// The queued downloads that wait for any of `ids`.
    func dependents(of ids: [String]) throws(DownloadError) -> [DownloadRecord]
    /// Tells the fleet how many downloads this worker transfers now (with its heartbeat), and reads what the fleet's
    /// limits need: how many other workers transfer, and the settings as the store has them. Throws `locked` when
    /// another process runs under this worker's name now (one that started while this one did not run for longer
    /// than a lease): the worker stops.
    func pulse(transferring: Int) throws(DownloadError) -> FleetPulse
    /// Asks for this worker's slots of connections to each host in `demands` (and gives up those of every other
    /// host), the fleet's workers together holding at most `limit` per host; renews them for a lease's length.
    func hostSlots(_ demands: [String: HostDemand], limit: Int) throws(DownloadError) -> HostGrants
}

/// What a worker learns at each pulse.
/// One change of a download in a fleet's store: its id (the same on every worker), what changed, and the download as
/// the store has it now (nil once it is removed).
public struct FleetEvent: Sendable {
    public enum Kind: String, Sendable {
        case added, changed, removed
    }

    public var id: EventID
    public var kind: Kind
    public var download: String
    public var record: DownloadRecord?

    public init(id: EventID, kind: Kind, download: String, record: DownloadRecord?) {
        self.id = id
        self.kind = kind
        self.download = download
        self.record = record
    }
}

/// What a worker of a fleet asks of one host's connection slots: to keep those in use, and how many it wants (in use
/// and waiting).
public struct HostDemand: Sendable, Equatable {
    public var inUse: Int
    public var wanted: Int

    public init(inUse: Int, wanted: Int) {
        self.inUse = inUse
        self.wanted = wanted
    }
}

/// The store's answer to a worker's `HostDemand`s: the slots it holds now for each host, and the hosts where another
/// worker waits for slots (this one gives back what it does not use as soon as it can).
public struct HostGrants: Sendable, Equatable {
    public var slots: [String: Int]
    public var contested: Set<String>

    public init(slots: [String: Int], contested: Set<String>) {
        self.slots = slots
        self.contested = contested
    }
}

public struct FleetPulse: Sendable, Equatable {
    /// The other workers with a live heartbeat that transfer at least one download.
    public var otherWorkersTransferring: Int
    /// The settings in the store (the last any worker stored).
    public var settings: ManagerSettings?

    public init(otherWorkersTransferring: Int, settings: ManagerSettings?) {
        self.otherWorkersTransferring = otherWorkersTransferring
        self.settings = settings
    }
}

/// Queue positions among the downloads of one priority.
public struct QueuePositions: Sendable, Equatable {
    /// The first one's and the last one's.
    public var lowest: Double?
    public var highest: Double?
    /// The position of the download just before a given one.
    public var before: Double?

    public init(lowest: Double?, highest: Double?, before: Double?) {
        self.lowest = lowest
        self.highest = highest
        self.before = before
    }
}

/// One worker of a fleet as the store knows it.
public struct WorkerStatus: Sendable, Equatable {
    /// Whether a worker runs, as its row in the store tells.
    public enum State: String, Sendable, Equatable {
        /// It beat within a lease.
        case running
        /// It stopped and gave its name up (SIGTERM, `aria2.shutdown`).
        case stopped
        /// It has not beaten for longer than a lease without giving its name up: killed, cut off from the store, or
        /// suspended. Its downloads go to other workers as their leases run out.
        case unresponsive
    }

    public var name: String
    public var state: State
    /// When it last renewed its leases (its heartbeat, every third of a lease).
    public var heartbeatAt: Date
    /// The downloads it holds a live lease of, by id.
    public var downloads: [String]

    public init(name: String, state: State = .running, heartbeatAt: Date, downloads: [String]) {
        self.name = name
        self.state = state
        self.heartbeatAt = heartbeatAt
        self.downloads = downloads
    }
}

/// What one worker asks of the worker that runs a download.
public enum FleetCommand: Codable, Sendable, Equatable {
    case pause
    case cancel
    /// The download's own rate limit (nil: none).
    case rateLimit(Int64?)
}

extension DownloadStoring {
    /// A store that does not tell is read.
    public var startedEmpty: Bool { false }

    /// A store of one machine.
    public var leasing: (any LeasingStore)? { nil }

    /// Queues `update`; no one waits for it.
    @discardableResult
    public func submit(_ update: DownloadStore.RowUpdate) -> StoreCommit { submit(update, awaited: false) }
}

extension LeasingStore {
    /// A store several workers share.
    public var leasing: (any LeasingStore)? { self }
}

/// A commit to wait for: `committed(_:)` returns when the writes before it are in the store.
public struct StoreCommit: Sendable, Hashable {
    package var ticket: UInt64
    package init(ticket: UInt64) { self.ticket = ticket }
}

extension ManagerSettings {
    /// The settings as every store keeps them: JSON text in the `setting` table, under the name `manager`.
    package func storedText() throws(DownloadError) -> String {
        do { return String(decoding: try JSONEncoder().encode(self), as: UTF8.self) } catch {
            throw DownloadError(.store, "cannot encode the settings: \(error)", underlying: error)
        }
    }

    /// Settings a store kept; nil for text this version cannot read (the configured settings apply then).
    package init?(storedText text: String) {
        guard let settings = try? JSONDecoder().decode(ManagerSettings.self, from: Data(text.utf8)) else { return nil }
        self = settings
    }
}
