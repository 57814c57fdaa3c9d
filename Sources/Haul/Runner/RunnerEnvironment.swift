import Foundation
import HaulCore
import Logging

/// Everything a runner needs from its manager. A class: the runner, its connections and its helper tasks each hold
/// it, and each would copy a struct of this size, retaining every field.
final class RunnerEnvironment: Sendable {
    let transport: any HTTPTransport
    /// The clock backoffs sleep on.
    let clock: EngineClock
    /// The clock of the transfer's own time: idle timeouts, the ramp, checkpoints and progress by time.
    let idleClock: EngineClock
    /// The manager's shared timer on `idleClock`: the machine's ticks.
    let metronome: Metronome
    let events: EventHub
    let settings: DownloadManager.Configuration.Engine
    let logger: Logger
    /// The limits this download's bytes count against (all downloads', its own).
    let limiters: [RateLimiter]
    /// The connections to each host across all downloads: each connection holds a slot while it is open.
    let hostConnections: HostConnections
    /// Tells the manager what the runner learned or did, in order. The manager is the only writer of a download's
    /// record and its row in the store. Progress goes to `events` directly. The manager queues what it stores; the commit it returns says when
    /// it is in the store.
    let report: @Sendable (RunnerReport) async throws(DownloadError) -> DownloadStore.Commit?
    /// Waits until a commit is in the store.
    let committed: @Sendable (DownloadStore.Commit) async throws(DownloadError) -> Void
    /// The folders confined downloads are opened beneath.
    let allowedFolders: AllowedFolders
    /// The rules that sort a folder download into a folder beneath its own when it takes its name.
    let sorting: SortRules
    /// The lease a worker of a fleet runs this download under: its part file is the lease's own
    /// (`DownloadFolder.partName`). Nil outside a fleet.
    let lease: Int64?
    /// Whether the lease follows earlier ones of the download, whose part files it deletes when it finishes (a first
    /// lease has none to look for).
    let followsEarlierLeases: Bool

    init(
        transport: any HTTPTransport, clock: EngineClock, idleClock: EngineClock, metronome: Metronome,
        events: EventHub, settings: DownloadManager.Configuration.Engine, logger: Logger, limiters: [RateLimiter],
        hostConnections: HostConnections,
        report: @escaping @Sendable (RunnerReport) async throws(DownloadError) -> DownloadStore.Commit?,
        committed: @escaping @Sendable (DownloadStore.Commit) async throws(DownloadError) -> Void,
        allowedFolders: AllowedFolders, sorting: SortRules = SortRules(), lease: Int64? = nil,
        followsEarlierLeases: Bool = false
    ) {
        self.transport = transport
        self.clock = clock
        self.idleClock = idleClock
        self.metronome = metronome
        self.events = events
        self.settings = settings
        self.logger = logger
        self.limiters = limiters
        self.hostConnections = hostConnections
        self.report = report
        self.committed = committed
        self.allowedFolders = allowedFolders
        self.sorting = sorting
        self.lease = lease
        self.followsEarlierLeases = followsEarlierLeases
    }
}
