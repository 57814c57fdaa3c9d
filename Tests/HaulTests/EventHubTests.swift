import Foundation
import HaulCore
import Synchronization
import Testing

@testable import Haul

@Suite("Event hub")
struct EventHubTests {
    static func progress(_ id: String, _ bytes: Int64) -> DownloadEvent {
        .progress(DownloadProgress(id: DownloadID(id), receivedBytes: bytes, totalBytes: 100, bytesPerSecond: 1))
    }

    /// Reads what a subscription holds now, without waiting for more (the hub is finished first).
    static func drain(_ subscription: EventSubscription) async -> [SequencedEvent] {
        var all: [SequencedEvent] = []
        for await event in subscription { all.append(event) }
        return all
    }

    static func download(_ id: String, _ state: DownloadState) -> DownloadSnapshot {
        DownloadSnapshot(
            id: DownloadID(id), url: "http://h/\(id)", path: "/d/\(id)", directory: "/d", state: state,
            priority: .normal, position: 1, receivedBytes: 0, totalBytes: nil, bytesPerSecond: 0,
            secondsRemaining: nil, connections: 0, segments: nil, after: [], error: nil, isResumable: nil,
            createdAt: Date(timeIntervalSince1970: 0), completedAt: nil, options: DownloadOptions(), rateLimit: nil,
            origin: .api)
    }

    @Test("busy while some download's newest event leaves it queued or running; the event that ends the last is not")
    func busy() {
        let hub = EventHub(run: 1)
        let subscription = hub.subscribe(filter: nil, after: nil, bounded: true) { .removed(DownloadID("x")) }
        #expect(!subscription.isBusy)
        hub.emit(.added(Self.download("a", .queued)))
        hub.emit(.added(Self.download("b", .paused)))
        #expect(subscription.isBusy)
        hub.emit(.changed(Self.download("a", .running)))
        hub.emit(Self.progress("a", 50))
        hub.emit(.changed(Self.download("b", .queued)))
        hub.emit(.changed(Self.download("a", .completed)))
        #expect(subscription.isBusy)
        hub.emit(.changed(Self.download("b", .running)))
        hub.emit(.changed(Self.download("b", .paused)))
        #expect(!subscription.isBusy)
        hub.emit(.changed(Self.download("b", .queued)))
        #expect(subscription.isBusy)
        hub.emit(.removed(DownloadID("b")))
        #expect(!subscription.isBusy)
        hub.emit(.added(Self.download("c", .running)))
        hub.emit(.changed(Self.download("c", .failed)))
        #expect(!subscription.isBusy)
    }

    @Test("ids count up from 1 within a run; lastID names the newest")
    func numbering() {
        let hub = EventHub(run: 7)
        #expect(hub.lastID == EventID(run: 7, sequence: 0))
        hub.emit(Self.progress("a", 1))
        hub.emit(.removed(DownloadID("a")))
        #expect(hub.lastID == EventID(run: 7, sequence: 2))
        #expect(EventID("7-2") == hub.lastID)
        #expect(EventID("7-x") == nil && EventID("7") == nil && EventID("-1-2") == nil)
    }

    @Test("a subscriber that reconnects after an id gets exactly the events that followed, in order")
    func replay() async {
        let hub = EventHub(run: 1, replayCapacity: 100)
        for index in 1...10 { hub.emit(Self.progress("a", Int64(index))) }
        let subscription = hub.subscribe(filter: nil, after: EventID(run: 1, sequence: 4), bounded: true) {
            Issue.record("no snapshot expected")
            return .removed(DownloadID("x"))
        }
        hub.emit(.removed(DownloadID("a")))
        hub.finishAll()
        let events = await Self.drain(subscription)
        #expect(events.map(\.id.sequence) == Array(5...11))
        #expect(events.last?.event == .removed(DownloadID("a")))
    }

    @Test("what is queued behind an event is taken at once, in order, up to the limit asked, and only once")
    func queuedTogether() async {
        let hub = EventHub(run: 1, replayCapacity: 100)
        let subscription = hub.subscribe(filter: nil, after: EventID(run: 1, sequence: 0), bounded: true) {
            .removed(DownloadID("x"))
        }
        for index in 1...6 { hub.emit(Self.progress(String(index), Int64(index))) }
        var iterator = subscription.makeAsyncIterator()
        guard case .event(let first) = await iterator.nextDelivery() else {
            Issue.record("no event")
            return
        }
        #expect(first.id.sequence == 1)
        #expect(iterator.queued(upTo: 3).map(\.id.sequence) == [2, 3, 4])
        #expect(iterator.queued(upTo: 63).map(\.id.sequence) == [5, 6])
        #expect(iterator.queued(upTo: 63).isEmpty)
        hub.emit(.removed(DownloadID("a")))
        guard case .event(let next) = await iterator.nextDelivery() else {
            Issue.record("no event")
            return
        }
        #expect(next.id.sequence == 7)
    }

    @Test("an id older than the replay window, from another run, or from the future gets a snapshot")
    func snapshotWhenReplayIsImpossible() async {
        let hub = EventHub(run: 3, replayCapacity: 5)
        for index in 1...10 { hub.emit(Self.progress("a", Int64(index))) }
        for after in [EventID(run: 3, sequence: 2), EventID(run: 2, sequence: 9), EventID(run: 3, sequence: 99), nil] {
            let subscription = hub.subscribe(filter: nil, after: after, bounded: true) {
                .stats(DownloadStats(bytesPerSecond: 0, counts: [:]))
            }
            subscription.cancel()
            let events = await Self.drain(subscription)
            #expect(events.count == 1, "after \(String(describing: after))")
            #expect(events.first?.id == EventID(run: 3, sequence: 10), "the snapshot carries the newest id")
            #expect(events.first?.event == .stats(DownloadStats(bytesPerSecond: 0, counts: [:])))
        }
        // The oldest id that can still be replayed: the window holds 6...10, so after 5 works.
        let subscription = hub.subscribe(filter: nil, after: EventID(run: 3, sequence: 5), bounded: true) {
            .removed(DownloadID("snapshot"))
        }
        subscription.cancel()
        #expect(await Self.drain(subscription).map(\.id.sequence) == [6, 7, 8, 9, 10])
    }

    @Test("a hub that keeps no replay gives a reconnecting subscriber a snapshot, or nothing when it saw the newest")
    func noReplay() async {
        let hub = EventHub(run: 2, replayCapacity: 0)
        for index in 1...4 { hub.emit(Self.progress("a", Int64(index))) }
        let behind = hub.subscribe(filter: nil, after: EventID(run: 2, sequence: 3), bounded: true) {
            .removed(DownloadID("snapshot"))
        }
        behind.cancel()
        let caughtUp = hub.subscribe(filter: nil, after: EventID(run: 2, sequence: 4), bounded: true) {
            .removed(DownloadID("snapshot"))
        }
        hub.emit(.removed(DownloadID("a")))
        hub.finishAll()
        let missed = await Self.drain(behind)
        #expect(missed.map(\.id.sequence) == [4])
        #expect(missed.first?.event == .removed(DownloadID("snapshot")))
        // Nothing was missed: no snapshot, and the next event follows.
        #expect(await Self.drain(caughtUp).map(\.id.sequence) == [5])
    }

    @Test("without replay, a change no subscriber wants is never made; one that is wanted is made once for all")
    func lazyEvents() async {
        let hub = EventHub(run: 1, replayCapacity: 0)
        let removals = hub.subscribe(
            filter: nil, after: nil, bounded: false, wanted: { $0.name == .removed }, snapshot: nil)
        let made = Mutex(0)
        hub.emit(.init(.changed, state: .running), of: DownloadID("a")) {
            made.withLock { $0 += 1 }
            return .changed(Self.download("a", .running))
        }
        #expect(made.withLock { $0 } == 0)
        // Told all the same: the download counts as busy until a change ends it.
        #expect(hub.isBusy)
        let changes = hub.subscribe(
            filter: nil, after: nil, bounded: false, wanted: { $0.name == .changed }, snapshot: nil)
        let all = hub.subscribe(filter: DownloadID("a"), after: nil, bounded: true, snapshot: nil)
        hub.emit(.init(.changed, state: .completed), of: DownloadID("a")) {
            made.withLock { $0 += 1 }
            return .changed(Self.download("a", .completed))
        }
        #expect(made.withLock { $0 } == 1)
        #expect(!hub.isBusy)
        hub.emit(.removed(DownloadID("a")))
        hub.finishAll()
        #expect(await Self.drain(changes).map(\.event.state) == [.completed])
        #expect(await Self.drain(all).map(\.id.sequence) == [2, 3])
        #expect(await Self.drain(removals).map(\.event) == [.removed(DownloadID("a"))])
    }

    @Test("a filtered subscriber sees only its download's events, replayed ones included")
    func filter() async {
        let hub = EventHub(run: 1)
        hub.emit(Self.progress("a", 1))
        hub.emit(Self.progress("b", 1))
        let subscription = hub.subscribe(
            filter: DownloadID("b"), after: EventID(run: 1, sequence: 0), bounded: true
        ) { .removed(DownloadID("snapshot")) }
        hub.emit(Self.progress("a", 2))
        hub.emit(.settings(ManagerSettings()))
        hub.emit(Self.progress("b", 2))
        hub.finishAll()
        let events = await Self.drain(subscription)
        #expect(events.map(\.id.sequence) == [2, 5])
        #expect(events.allSatisfy { $0.event.downloadID == DownloadID("b") })
    }

    @Test("a subscriber that picks events is given only those; one it does not want still ends its download's stream")
    func wanted() async {
        let hub = EventHub(run: 1)
        let picky = hub.subscribe(
            filter: nil, after: nil, bounded: false, wanted: { $0.name != .added },
            snapshot: nil)
        let one = hub.subscribe(
            filter: DownloadID("b"), after: nil, bounded: false,
            wanted: { $0.name != .removed },
            snapshot: nil)
        hub.emit(.added(Self.download("a", .queued)))
        hub.emit(.added(Self.download("b", .paused)))
        hub.emit(Self.progress("b", 1))
        hub.emit(.removed(DownloadID("b")))
        let ended = await Self.drain(one)
        #expect(ended.map(\.id.sequence) == [2, 3])
        hub.finishAll()
        let events = await Self.drain(picky)
        #expect(events.map(\.id.sequence) == [3, 4])
    }

    @Test("a reader that falls behind has its queued progress collapse into the newest per download")
    func collapse() async {
        let hub = EventHub(run: 1, collapseThreshold: 4, subscriberLimit: 50)
        let subscription = hub.subscribe(filter: nil, after: EventID(run: 1, sequence: 0), bounded: true) {
            .removed(DownloadID("snapshot"))
        }
        hub.emit(.removed(DownloadID("x")))
        for index in 1...1000 {
            hub.emit(Self.progress("a", Int64(index)))
            hub.emit(Self.progress("b", Int64(index)))
            hub.emit(.stats(DownloadStats(bytesPerSecond: Double(index), counts: [:])))
        }
        hub.finishAll()
        let events = await Self.drain(subscription)
        // Below the threshold every event is kept; above it one progress per download and one stats remain.
        #expect(events.count <= 4 + 3)
        #expect(events.first?.event == .removed(DownloadID("x")))
        #expect(events.map(\.id.sequence) == events.map(\.id.sequence).sorted(), "ids stay in order")
        #expect(events.suffix(3).map(\.event).contains(Self.progress("a", 1000)))
        #expect(events.suffix(3).map(\.event).contains(Self.progress("b", 1000)))
    }

    @Test("a reader too far behind is closed and its queue freed; it reconnects with its last id and misses nothing")
    func overflow() async {
        let hub = EventHub(run: 1, replayCapacity: 1000, collapseThreshold: 4, subscriberLimit: 20)
        let subscription = hub.subscribe(filter: nil, after: EventID(run: 1, sequence: 0), bounded: true) {
            .removed(DownloadID("snapshot"))
        }
        var iterator = subscription.makeAsyncIterator()
        hub.emit(.removed(DownloadID("first")))
        let first = await iterator.next()
        #expect(first?.id.sequence == 1)
        // State changes do not collapse: 30 of them overflow a limit of 20.
        for index in 0..<30 { hub.emit(.removed(DownloadID("\(index)"))) }
        #expect(await iterator.next() == nil, "closed, and its queue dropped")
        let again = hub.subscribe(filter: nil, after: first?.id, bounded: true) { .removed(DownloadID("snapshot")) }
        hub.finishAll()
        #expect(await Self.drain(again).map(\.id.sequence) == Array(2...31))
    }

    @Test("an unbounded subscriber (the library's events) is never closed; its progress still collapses")
    func unbounded() async {
        let hub = EventHub(run: 1, collapseThreshold: 4, subscriberLimit: 20)
        let subscription = hub.subscribe(filter: nil, after: nil, bounded: false, snapshot: nil)
        for index in 1...100 { hub.emit(.removed(DownloadID("\(index)"))) }
        for index in 1...100 { hub.emit(Self.progress("a", Int64(index))) }
        hub.finishAll()
        let events = await Self.drain(subscription)
        #expect(events.count == 101)
        #expect(events.last?.event == Self.progress("a", 100))
    }

    @Test("a reader gets the snapshot, then what is emitted, then nil when the hub finishes")
    func waiting() async {
        let hub = EventHub(run: 1)
        let subscription = hub.subscribe(filter: nil, after: nil, bounded: true) { .removed(DownloadID("s")) }
        let reader = Task {
            var seen: [DownloadEvent] = []
            for await event in subscription { seen.append(event.event) }
            return seen
        }
        hub.emit(.removed(DownloadID("a")))
        hub.finishAll()
        #expect(await reader.value == [.removed(DownloadID("s")), .removed(DownloadID("a"))])
    }
}

@Suite("Download ids")
struct DownloadIDSourceTests {
    @Test("ids are lower-case version 7 UUIDs: the time first, ordered by it, distinct across refills of the pool")
    func fresh() {
        var source = DownloadIDSource()
        let start: UInt64 = 1_795_000_000_000  // 2026-11-17, in milliseconds
        let clock = Milliseconds(start)
        source.now = { clock.value }
        var seen: Set<String> = []
        var previous = ""
        for index in 0..<2_000 {
            // Five ids in each millisecond: the random bits keep them apart.
            if index % 5 == 0 { clock.value += 1 }
            let id = source.make().rawValue
            let uuid = UUID(uuidString: id)
            #expect(uuid != nil, "\(id)")
            #expect(id == id.lowercased() && id.count == 36)
            let bytes = uuid.map { withUnsafeBytes(of: $0.uuid) { Array($0) } } ?? []
            #expect(bytes.count == 16 && bytes[6] >> 4 == 7 && bytes[8] >> 6 == 2, "version 7, RFC 4122 variant: \(id)")
            let time = bytes.prefix(6).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            #expect(time == clock.value, "the first 48 bits are the time in milliseconds: \(id)")
            // Ids of a later millisecond sort after every earlier one (the store's index of ids grows at its end).
            if index % 5 == 0 { #expect(id > previous, "\(id) after \(previous)") }
            previous = max(previous, id)
            seen.insert(id)
        }
        #expect(seen.count == 2_000)
    }

    @Test("the wall clock's milliseconds by default")
    func wallClock() {
        var source = DownloadIDSource()
        let before = UInt64(Date().timeIntervalSince1970 * 1000)
        let id = source.make().rawValue.replacingOccurrences(of: "-", with: "")
        let after = UInt64(Date().timeIntervalSince1970 * 1000) + 1
        let time = UInt64(id.prefix(12), radix: 16) ?? 0
        #expect(before <= time && time <= after, "\(time) within \(before)...\(after)")
    }
}

/// A value a test's closure reads and the test moves on.
private final class Milliseconds: @unchecked Sendable {
    var value: UInt64
    init(_ value: UInt64) { self.value = value }
}
