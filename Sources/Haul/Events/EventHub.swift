import Foundation
import HaulCore
import NIOCore
import Synchronization

/// Numbers events, keeps a replay window of the newest, and fans them out to subscribers, each with its own bounded
/// queue and optional filter; callable from any task.
///
/// Events are delivered to every subscriber inside one lock, so each subscriber sees them in the order of their ids.
/// A subscriber that reconnects with the id of the last event it saw gets exactly the events it missed, as long as
/// they are still in the replay window and were emitted in this run of the store; otherwise it starts from a
/// snapshot.
///
/// A worker of a fleet numbers nothing itself: the changes of downloads come from the store's event log with ids that
/// are the same on every worker (`emitLogged`), and what the worker tells besides (its own changes at once, progress,
/// stats, settings) carries the id of the last logged event, as an event without an id of its own. A client that
/// reconnects to any worker with the last id it saw is replayed every change after it; one that comes from a worker
/// ahead of this one is given only the changes past its id.
final class EventHub: Sendable {
    /// How many of the newest events are kept for replay; 0 keeps none (a process no client reconnects to).
    let replayCapacity: Int
    /// Pending events beyond which a subscriber's queued progress (per download) and stats collapse into the newest.
    let collapseThreshold: Int
    /// Pending events beyond which a bounded subscriber is closed (it reconnects with its last id).
    let subscriberLimit: Int

    private struct State {
        var run: Int64
        var next: UInt64 = 1
        var replay: CircularBuffer<SequencedEvent>
        var subscribers: [UInt64: EventSubscriber] = [:]
        var nextSubscriber: UInt64 = 0
        var isFinished = false
        /// Where each download's newest event left it, for the downloads it left busy or ended (one table, so an
        /// event looks its download up once).
        var phases: [DownloadID: Phase] = [:]
        /// How many of `phases` are busy: while any is, more events are on their way.
        var busyCount = 0
        /// A fleet's worker: ids come from the store's event log (the newest is `next - 1`'s place: `lastLogged`).
        var isFleet = false
        var lastLogged = EventID(run: 0, sequence: 0)
        /// A fleet's worker: the replay window holds every logged event after this id.
        var covered = EventID(run: 0, sequence: 0)

        /// Sets where `id`'s newest event left it; nil for neither busy nor ended (paused, waiting for the network).
        mutating func set(_ id: DownloadID, _ phase: Phase?) {
            let old: Phase?
            if let phase { old = phases.updateValue(phase, forKey: id) } else { old = phases.removeValue(forKey: id) }
            busyCount += (phase == .busy ? 1 : 0) - (old == .busy ? 1 : 0)
        }
    }

    private enum Phase {
        /// Queued or running.
        case busy
        /// Completed, failed, cancelled or removed, and not started again.
        case ended
    }

    private let state: Mutex<State>
    /// The newest progress of each running download, in a lock of its own: a snapshot built while `state` is
    /// locked reads it. Always taken after `state` when both are.
    private let progress = Mutex<[DownloadID: DownloadProgress]>([:])

    init(run: Int64, replayCapacity: Int = 10_240, collapseThreshold: Int = 256, subscriberLimit: Int = 4_096) {
        self.replayCapacity = max(0, replayCapacity)
        self.collapseThreshold = collapseThreshold
        self.subscriberLimit = subscriberLimit
        state = Mutex(State(run: run, replay: CircularBuffer(initialCapacity: max(1, min(replayCapacity, 1024)))))
    }

    /// A fleet's worker's hub, whose ids come from the store's event log, beginning after `position`.
    convenience init(fleetAt position: EventID, replayCapacity: Int = 10_240) {
        self.init(run: position.run, replayCapacity: replayCapacity)
        state.withLock { state in
            state.isFleet = true
            state.lastLogged = position
            state.covered = position
        }
    }

    /// A fleet's worker: the replay window holds every logged event after this id.
    var covered: EventID { state.withLock { $0.covered } }

    /// The id of the newest event (sequence 0 before any).
    var lastID: EventID {
        state.withLock { $0.isFleet ? $0.lastLogged : EventID(run: $0.run, sequence: $0.next - 1) }
    }

    /// Stamps `event` with the next id (a fleet's worker: with the last logged one's), keeps it for replay, and
    /// delivers it to every subscriber it concerns.
    func emit(_ event: DownloadEvent) {
        emit(event.kind, of: event.downloadID) { event }
    }

    /// `emit(_:)` of the event `make` makes, of kind `kind` about download `downloadID`: made only when the replay
    /// keeps it or a subscriber wants it (a snapshot of a download costs more than telling it to nobody). `make`
    /// runs inside the hub's lock.
    func emit(_ kind: DownloadEvent.Kind, of downloadID: DownloadID?, _ make: () -> DownloadEvent) {
        state.withLock { state in
            guard !state.isFinished else { return }
            let id: EventID
            if state.isFleet {
                id = state.lastLogged
            } else {
                id = EventID(run: state.run, sequence: state.next)
                state.next += 1
            }
            Self.publish(id, kind, downloadID, make, isLogged: false, in: &state, hub: self)
        }
    }

    /// A fleet's worker: tells a change read from the store's event log, under its id; nothing when that id is not
    /// past the last one told.
    func emitLogged(_ event: DownloadEvent, id: EventID) {
        state.withLock { state in
            guard !state.isFinished, state.isFleet, id > state.lastLogged else { return }
            state.lastLogged = id
            Self.publish(id, event.kind, event.downloadID, { event }, isLogged: true, in: &state, hub: self)
        }
    }

    private static func publish(
        _ id: EventID, _ kind: DownloadEvent.Kind, _ downloadID: DownloadID?, _ make: () -> DownloadEvent,
        isLogged: Bool, in state: inout State, hub: EventHub
    ) {
        var stamped: SequencedEvent?
        func made() -> SequencedEvent {
            if let stamped { return stamped }
            let event = SequencedEvent(id: id, event: make())
            stamped = event
            return event
        }
        if hub.replayCapacity == 0 {
            // Kept and dropped at once: the window covers everything told.
            state.covered = max(state.covered, id)
        } else {
            if state.replay.count >= hub.replayCapacity, let dropped = state.replay.popFirst() {
                state.covered = max(state.covered, dropped.id)
            }
            state.replay.append(made())
        }
        // Whether the event ends its download (true), starts it again (false), or neither (nil).
        var ends: Bool?
        switch kind.name {
        case .added, .changed:
            let phase: Phase?
            switch kind.state {
            case .completed, .failed, .cancelled: phase = .ended
            case .queued, .running: phase = .busy
            default: phase = nil
            }
            ends = phase == .ended
            if let downloadID { state.set(downloadID, phase) }
        case .removed:
            ends = true
            if let downloadID { state.set(downloadID, .ended) }
        case .progress:
            if case .progress(let latest) = made().event { hub.progress.withLock { $0[latest.id] = latest } }
        default: break
        }
        var closed: [UInt64] = []
        for (key, subscriber) in state.subscribers where subscriber.filter == nil || subscriber.filter == downloadID {
            // A subscriber that came from a worker ahead of this one has seen the changes up to its id.
            if isLogged, let seen = subscriber.skipsThrough, id <= seen { continue }
            if subscriber.wants(kind), !subscriber.deliver(made()) {
                closed.append(key)
            } else if ends == true, subscriber.endsWithDownload {
                // Its download ended: the stream ends after this event.
                subscriber.finish()
                closed.append(key)
            }
        }
        for key in closed { state.subscribers[key] = nil }
    }

    /// Whether the newest events left some download queued or running, so that more events are coming soon. A
    /// download loaded from the store that has sent no event yet is not counted until it does.
    var isBusy: Bool {
        state.withLock { $0.busyCount > 0 }
    }

    /// Marks downloads that ended before this run (a subscription to one of them ends at once).
    func markEnded(_ ids: some Sequence<DownloadID>) {
        state.withLock { state in
            for id in ids { state.set(id, .ended) }
        }
    }

    /// The newest progress of a download that is running, nil when none was reported since it started.
    func progress(of id: DownloadID) -> DownloadProgress? {
        progress.withLock { $0[id] }
    }

    /// The newest progress of every download that has reported one since it started.
    func allProgress() -> [DownloadID: DownloadProgress] {
        progress.withLock { $0 }
    }

    /// Forgets a download's live progress (it stopped running).
    func clearProgress(of id: DownloadID) {
        _ = progress.withLock { $0.removeValue(forKey: id) }
    }

    /// A subscription to the events of every download, or of `filter` only. With `after`, it begins with the events
    /// that followed that id when they can be replayed; otherwise (or without `after`) with `snapshot()` stamped with
    /// the newest id. `bounded` subscribers are closed when they fall `subscriberLimit` events behind; unbounded ones
    /// (the library's `events(for:)`) never are. An unbounded subscription to one download ends with it: after the
    /// event that completes, fails, cancels or removes it, or at once when it has already ended.
    ///
    /// A fleet's worker replays the logged events after `after` from its window, or, when `after` is older than the
    /// window, from `earlier` (read from the store's log) when those reach the window.
    ///
    /// `wanted`, when given, picks the events queued for the subscriber (the replay and the snapshot are not
    /// filtered by it): a reader that needs a few kinds does not hold the rest while it catches up.
    func subscribe(
        filter: DownloadID?, after: EventID?, earlier: [SequencedEvent] = [], bounded: Bool,
        wanted: (@Sendable (DownloadEvent.Kind) -> Bool)? = nil, snapshot: (() -> DownloadEvent)?
    ) -> EventSubscription {
        state.withLock { state in
            let subscriber = EventSubscriber(
                filter: filter, limit: bounded ? subscriberLimit : nil, collapseThreshold: collapseThreshold,
                endsWithDownload: filter != nil && !bounded, wanted: wanted)
            var replayed: [SequencedEvent]?
            if state.isFleet {
                var from = after
                var read: [SequencedEvent] = []
                if let after, after < state.covered, let last = earlier.last, last.id >= state.covered {
                    read = earlier.filter { $0.id > after && (filter == nil || $0.event.downloadID == filter) }
                    from = last.id
                }
                if let from, from >= state.covered {
                    replayed =
                        read + state.replay.filter { $0.id > from && (filter == nil || $0.event.downloadID == filter) }
                    if from > state.lastLogged { subscriber.skipsThrough = from }
                }
            } else if let after, after.run == state.run, after.sequence < state.next {
                let oldest = state.replay.first?.id.sequence ?? state.next
                if after.sequence + 1 >= oldest {
                    replayed = state.replay.filter {
                        $0.id.sequence > after.sequence && (filter == nil || $0.event.downloadID == filter)
                    }
                }
            }
            if let replayed {
                subscriber.prefill(replayed)
            } else if let snapshot {
                let id = state.isFleet ? state.lastLogged : EventID(run: state.run, sequence: state.next - 1)
                subscriber.prefill([SequencedEvent(id: id, event: snapshot())])
            }
            if state.isFinished || (subscriber.endsWithDownload && filter.map { state.phases[$0] == .ended } == true) {
                subscriber.finish()
            } else {
                state.subscribers[state.nextSubscriber] = subscriber
                state.nextSubscriber += 1
            }
            return EventSubscription(subscriber: subscriber, hub: self)
        }
    }

    /// Ends every subscription and accepts no more events.
    func finishAll() {
        let all = state.withLock { state in
            state.isFinished = true
            defer { state.subscribers.removeAll() }
            return Array(state.subscribers.values)
        }
        for subscriber in all { subscriber.finish() }
    }

    /// Wakes every bounded subscriber's reader with a heartbeat (no event, no id), so a stream with nothing to say
    /// can still tell its client it is alive; drops subscribers whose readers have gone away.
    func heartbeat() {
        let all = state.withLock { state in
            state.subscribers = state.subscribers.filter { !$0.value.isFinished }
            return Array(state.subscribers.values)
        }
        for subscriber in all { subscriber.heartbeat() }
    }
}

/// What a subscriber's reader gets next.
public enum EventDelivery: Sendable, Equatable {
    /// An event.
    case event(SequencedEvent)
    /// Nothing happened for a while; the stream is alive.
    case heartbeat
}

/// The queue of one subscriber: bounded, collapsing progress when it falls behind, closed when it falls too far.
final class EventSubscriber: Sendable {
    let filter: DownloadID?
    private let limit: Int?
    private let collapseThreshold: Int
    /// It follows one download and ends when that download does.
    let endsWithDownload: Bool
    /// A fleet's worker: the logged events up to this id are not delivered (the subscriber saw them on a worker
    /// ahead of this one). Set once, before any delivery.
    var skipsThrough: EventID? {
        get { skipped.withLock { $0 } }
        set { skipped.withLock { $0 = newValue } }
    }
    private let skipped = Mutex<EventID?>(nil)

    private struct State {
        var pending = CircularBuffer<SequencedEvent>()
        var waiter: CheckedContinuation<EventDelivery?, Never>?
        var isFinished = false
        var isHeartbeatPending = false
        /// Events it was given at the start (replay), allowed on top of the limit.
        var allowance = 0
    }

    private let state = Mutex(State())

    /// The events it is given; all when nil.
    private let wanted: (@Sendable (DownloadEvent.Kind) -> Bool)?

    init(
        filter: DownloadID?, limit: Int?, collapseThreshold: Int, endsWithDownload: Bool = false,
        wanted: (@Sendable (DownloadEvent.Kind) -> Bool)? = nil
    ) {
        self.filter = filter
        self.limit = limit
        self.collapseThreshold = collapseThreshold
        self.endsWithDownload = endsWithDownload
        self.wanted = wanted
    }

    /// Whether an event of `kind` is queued for it. One it does not want still ends the subscription to a download
    /// it ends.
    func wants(_ kind: DownloadEvent.Kind) -> Bool { wanted?(kind) ?? true }

    var isFinished: Bool { state.withLock { $0.isFinished } }

    func prefill(_ events: [SequencedEvent]) {
        state.withLock { state in
            state.pending.append(contentsOf: events)
            state.allowance = events.count
        }
    }

    /// Queues `event` or hands it to a waiting reader; false when the subscriber is closed.
    func deliver(_ event: SequencedEvent) -> Bool {
        let waiter: CheckedContinuation<EventDelivery?, Never>? = state.withLock { state in
            guard !state.isFinished else { return nil }
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            if state.pending.count >= collapseThreshold + state.allowance {
                Self.collapse(&state.pending, for: event.event)
            }
            state.pending.append(event)
            if let limit, state.pending.count > limit + state.allowance {
                // Too far behind: close; the reader reconnects with the last id it saw and is replayed or snapshotted.
                state.isFinished = true
                state.pending.removeAll()
            }
            return nil
        }
        waiter?.resume(returning: .event(event))
        return !isFinished
    }

    /// Hands a waiting reader a heartbeat, or leaves one for the next read when nothing else is queued.
    func heartbeat() {
        let waiter: CheckedContinuation<EventDelivery?, Never>? = state.withLock { state in
            guard !state.isFinished else { return nil }
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.isHeartbeatPending = true
            return nil
        }
        waiter?.resume(returning: .heartbeat)
    }

    /// Removes the queued event that `event` replaces: the same download's progress, or the previous stats.
    private static func collapse(_ pending: inout CircularBuffer<SequencedEvent>, for event: DownloadEvent) {
        let index: CircularBuffer<SequencedEvent>.Index?
        switch event {
        case .progress(let progress):
            index = pending.lastIndex {
                if case .progress(let old) = $0.event { old.id == progress.id } else { false }
            }
        case .stats:
            index = pending.lastIndex { if case .stats = $0.event { true } else { false } }
        default:
            index = nil
        }
        if let index { pending.remove(at: index) }
    }

    /// The next event or heartbeat, waiting for one; nil once finished and drained.
    func next() async -> EventDelivery? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<EventDelivery?, Never>) in
                let ready: (EventDelivery?, Bool) = state.withLock { state in
                    if let event = state.pending.popFirst() {
                        if state.allowance > 0 { state.allowance -= 1 }
                        return (.event(event), true)
                    }
                    if state.isFinished || Task.isCancelled { return (nil, true) }
                    if state.isHeartbeatPending {
                        state.isHeartbeatPending = false
                        return (.heartbeat, true)
                    }
                    state.waiter = continuation
                    return (nil, false)
                }
                if ready.1 { continuation.resume(returning: ready.0) }
            }
        } onCancel: {
            finish()
        }
    }

    /// Takes up to `limit` events already queued, without waiting (a reader that writes what is ready together).
    func takeQueued(upTo limit: Int) -> [SequencedEvent] {
        state.withLock { state in
            var taken: [SequencedEvent] = []
            while taken.count < limit, let event = state.pending.popFirst() {
                if state.allowance > 0 { state.allowance -= 1 }
                taken.append(event)
            }
            return taken
        }
    }

    /// Ends the subscription: a waiting reader gets nil; what is queued is still read.
    func finish() {
        let waiter = state.withLock { state in
            state.isFinished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }
}

/// The events of one subscriber, in the order of their ids, until the manager shuts down, the reader falls too far
/// behind, or the task reading it is cancelled.
public struct EventSubscription: AsyncSequence, Sendable {
    public typealias Element = SequencedEvent
    fileprivate let subscriber: EventSubscriber
    fileprivate let hub: EventHub

    /// Ends the subscription from outside the reading task.
    public func cancel() { subscriber.finish() }

    /// Whether some download is queued or running (as the events so far tell), so that more events are coming soon:
    /// a writer may wait a moment to send them together. When none is, the event just read is the last for now
    /// (typically the one that completes the last download) and is best sent at once.
    public var isBusy: Bool { hub.isBusy }

    public struct AsyncIterator: AsyncIteratorProtocol {
        fileprivate let subscriber: EventSubscriber

        public mutating func next() async -> SequencedEvent? {
            while let delivery = await subscriber.next() {
                if case .event(let event) = delivery { return event }
            }
            return nil
        }

        /// The next event or heartbeat (sent by `DownloadManager.run`); nil when the subscription has ended.
        public mutating func nextDelivery() async -> EventDelivery? {
            await subscriber.next()
        }

        /// Up to `limit` events that are queued now, in order, without waiting: a reader that got one with
        /// `nextDelivery` writes what followed it together.
        public mutating func queued(upTo limit: Int) -> [SequencedEvent] {
            subscriber.takeQueued(upTo: limit)
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(subscriber: subscriber) }
}
