import HaulCore
import Testing

/// Heads as a server would send them.
enum Heads {
    static let etag = "\"v1\""
    static let date = "Tue, 02 Jan 2024 00:00:00 GMT"

    static func ok(_ length: Int64, etag: String? = Heads.etag, ranges: Bool = true) -> ResponseHead {
        var headers: [(name: String, value: String)] = [("Content-Length", "\(length)"), ("Date", date)]
        if let etag { headers.append(("ETag", etag)) }
        if ranges { headers.append(("Accept-Ranges", "bytes")) }
        return ResponseHead(status: 200, headers: headers)
    }

    static func partial(_ first: Int64, _ last: Int64, of total: Int64, etag: String? = Heads.etag) -> ResponseHead {
        var headers: [(name: String, value: String)] = [
            ("Content-Length", "\(last - first + 1)"), ("Content-Range", "bytes \(first)-\(last)/\(total)"),
            ("Accept-Ranges", "bytes"), ("Date", date),
        ]
        if let etag { headers.append(("ETag", etag)) }
        return ResponseHead(status: 206, headers: headers)
    }

    static func status(_ status: Int, _ headers: [(name: String, value: String)] = []) -> ResponseHead {
        ResponseHead(status: status, headers: headers)
    }

    static let strongFacts = RemoteFacts(
        totalLength: 1000, validators: Validators(etag: etag, lastModified: nil, date: date), isResumable: true)
}

/// Drives a machine with times given in milliseconds, and keeps what it asked for.
struct Driver {
    var machine: TransferMachine
    var now: Duration = .zero

    init(_ settings: TransferMachine.Settings = .init(maxConnections: 1, minimumSplitSize: 1 << 20)) {
        machine = TransferMachine(settings: settings)
    }

    /// Streams `count` bytes on `id` in chunks of `chunk`, as the runner would; returns the grants and the actions.
    mutating func stream(_ id: Int, _ count: Int, chunk: Int = 100) -> (
        grants: [TransferMachine.Grant], actions: [TransferMachine.Action]
    ) {
        var grants: [TransferMachine.Grant] = []
        var actions: [TransferMachine.Action] = []
        var left = count
        while left > 0 {
            let grant = machine.claim(id, count: min(chunk, left))
            grants.append(grant)
            actions += machine.wrote(id, now: now)
            left -= min(chunk, left)
            if grant.stop { break }
        }
        return (grants, actions)
    }
}

extension TransferMachine.Action {
    var isWait: Bool {
        if case .wait = self { return true }
        return false
    }

    var restartReason: String? {
        if case .report(.restarted(let reason)) = self { return reason }
        return nil
    }

    var sent: RangeRequest? {
        if case .send(_, let request) = self { return request }
        return nil
    }
}

@Suite("The transfer machine: one connection")
struct TransferMachineSingleTests {
    @Test("nothing held: the whole file is asked for; its 200 is streamed and, once every byte is written, finalised")
    func fresh() {
        var d = Driver()
        #expect(
            d.machine.start(.init(partLength: nil, durableOffset: 0, isPartVerified: true, facts: nil), now: d.now)
                == [.send(0, .whole)])
        let head = Heads.ok(1000)
        let accepted = d.machine.responseReceived(0, head, now: d.now)
        #expect(accepted.last == .stream(0, .init(start: 0, compareUntil: 0, end: 1000)))
        #expect(accepted.contains(.report(.factsLearned(Heads.strongFacts))))
        let (grants, _) = d.stream(0, 1000)
        #expect(grants.allSatisfy { $0.compare == 0 && !$0.overrun })
        #expect(grants.map(\.write).reduce(0, +) == 1000)
        #expect(d.machine.bodyEnded(0, now: d.now) == [.finalize(total: 1000)])
        #expect(d.machine.finalized(.completed, now: d.now) == [.end(.completed)])
        #expect(d.machine.resumedFrom == 0 && !d.machine.wasResumed)
    }

    @Test("a part with a record and a strong validator resumes with Range and If-Range, appending the 206")
    func resumes() {
        var d = Driver()
        let actions = d.machine.start(
            .init(partLength: 400, durableOffset: 400, isPartVerified: true, facts: Heads.strongFacts), now: d.now)
        #expect(actions == [.send(0, RangeRequest(offset: 400, ifRange: Heads.etag))])
        #expect(actions.first?.sent?.rangeHeader == "bytes=400-")
        let accepted = d.machine.responseReceived(0, Heads.partial(400, 999, of: 1000), now: d.now)
        #expect(accepted.last == .stream(0, .init(start: 400, compareUntil: 400, end: 1000)))
        _ = d.stream(0, 600)
        #expect(d.machine.bodyEnded(0, now: d.now) == [.finalize(total: 1000)])
        #expect(d.machine.wasResumed && d.machine.resumedFrom == 400)
    }

    @Test("bytes past the durable offset are cut before resuming (they were never synced)")
    func truncatesPastDurable() {
        var d = Driver()
        let actions = d.machine.start(
            .init(partLength: 700, durableOffset: 400, isPartVerified: true, facts: Heads.strongFacts), now: d.now)
        #expect(
            actions == [
                .truncate(to: 400), .send(0, RangeRequest(offset: 400, ifRange: Heads.etag)),
            ])
    }

    @Test("a break after bytes arrived resumes at once exactly where the bytes stopped; one that brought nothing waits")
    func breaks() {
        var d = Driver()
        _ = d.machine.start(.init(partLength: 0, durableOffset: 0, isPartVerified: true, facts: nil), now: d.now)
        _ = d.machine.responseReceived(0, Heads.ok(1000), now: d.now)
        _ = d.stream(0, 300)
        let lost = DownloadError(.connectionLost, "reset")
        #expect(
            d.machine.connectionFailed(0, lost, now: d.now)
                == [.send(0, RangeRequest(offset: 300, ifRange: Heads.etag))])
        // The next attempt brings nothing: it backs off (1 s with full jitter), and says so.
        let waited = d.machine.connectionFailed(0, lost, now: d.now)
        #expect(waited == [.report(.retrying(lost, delay: .seconds(1), attempts: 1)), .wait(0, .seconds(1))])
        #expect(d.machine.waitEnded(0, now: d.now) == [.send(0, RangeRequest(offset: 300, ifRange: Heads.etag))])
        // The first bytes after the wait say the error is over, once; an answer without bytes does not.
        _ = d.machine.responseReceived(0, Heads.partial(300, 999, of: 1000), now: d.now)
        let reports = d.stream(0, 300).actions.filter { if case .report = $0 { true } else { false } }
        #expect(reports == [.report(.recovered)])
    }

    @Test("attempts that bring nothing are bounded: five in a row give up, naming the cause")
    func boundedRetries() {
        var d = Driver()
        _ = d.machine.start(.init(partLength: nil, durableOffset: 0, isPartVerified: true, facts: nil), now: d.now)
        var last: [TransferMachine.Action] = []
        for _ in 0..<5 {
            last = d.machine.responseReceived(0, Heads.status(500), now: d.now)
            if last.contains(where: { $0.isWait }) { _ = d.machine.waitEnded(0, now: d.now) }
        }
        guard case .end(.failed(let error, _)) = last.last else {
            Issue.record("expected a failure, got \(last)")
            return
        }
        #expect(error.status == 500 && !error.isRetryable)
        #expect(error.message.contains("gave up after 5 attempts"))
    }

    @Test("a 200 to a Range request: the bytes held go, and the same answer is the new body from 0 (no new request)")
    func rangeIgnored() {
        var d = Driver()
        _ = d.machine.start(
            .init(partLength: 400, durableOffset: 400, isPartVerified: true, facts: Heads.strongFacts), now: d.now)
        let actions = d.machine.responseReceived(0, Heads.ok(1000), now: d.now)
        #expect(actions.contains { $0.restartReason?.contains("whole file") == true })
        #expect(actions.contains(.truncate(to: 0)))
        #expect(actions.last == .stream(0, .init(start: 0, compareUntil: 0, end: 1000)))
        #expect(!actions.contains { $0.sent != nil || $0.isWait })
        #expect(!d.machine.wasResumed && d.machine.resumedFrom == 0)
    }

    @Test(
        "a 206 that cannot be appended restarts at once from 0: no retry spent, no wait",
        arguments: [
            Heads.partial(300, 999, of: 1000), Heads.partial(400, 999, of: 2000),
            Heads.partial(400, 999, of: 1000, etag: "\"v2\""),
            Heads.status(206, [("Content-Range", "bytes */1000")]),
        ])
    func badPartial(_ head: ResponseHead) {
        var d = Driver()
        _ = d.machine.start(
            .init(partLength: 400, durableOffset: 400, isPartVerified: true, facts: Heads.strongFacts), now: d.now)
        let actions = d.machine.responseReceived(0, head, now: d.now)
        #expect(actions.first == .discard(0))
        #expect(actions.contains { $0.restartReason != nil })
        #expect(actions.contains(.truncate(to: 0)))
        #expect(actions.last?.sent == .whole)
        #expect(!actions.contains { $0.isWait })
    }

    @Test("416 with */L and L the part's length: finalised with nothing fetched; otherwise a restart")
    func rangeNotSatisfiable() {
        // A strong validator, but no length known (the first answer was chunked): the planner asks after the part.
        let unknownLength = RemoteFacts(
            totalLength: nil, validators: Heads.strongFacts.validators, isResumable: true)
        var d = Driver()
        _ = d.machine.start(
            .init(partLength: 1000, durableOffset: 1000, isPartVerified: true, facts: unknownLength), now: d.now)
        var e = Driver()
        let asked = e.machine.start(
            .init(partLength: 1000, durableOffset: 1000, isPartVerified: true, facts: unknownLength), now: e.now)
        #expect(asked == [.send(0, RangeRequest(offset: 1000, ifRange: Heads.etag))])
        let complete = e.machine.responseReceived(
            0, Heads.status(416, [("Content-Range", "bytes */1000")]), now: e.now)
        #expect(complete.last == .finalize(total: 1000))
        let restarted = d.machine.responseReceived(0, Heads.status(416, []), now: d.now)
        #expect(restarted.contains { $0.restartReason != nil })
        #expect(restarted.last?.sent == .whole)
    }

    @Test("no strong validator: the overlap is asked for and compared; a difference restarts from 0")
    func overlap() {
        var d = Driver()
        let weak = RemoteFacts(totalLength: 200_000, validators: Validators(), isResumable: true)
        let start = d.machine.start(
            .init(partLength: 100_000, durableOffset: 100_000, isPartVerified: true, facts: weak), now: d.now)
        #expect(start == [.send(0, RangeRequest(offset: 100_000, overlap: 65_536))])
        _ = d.machine.responseReceived(0, Heads.partial(34_464, 199_999, of: 200_000, etag: nil), now: d.now)
        let first = d.machine.claim(0, count: 70_000)
        #expect(first == .init(offset: 34_464, compare: 65_536, write: 4_464, stop: false, overrun: false))
        _ = d.machine.wrote(0, now: d.now)
        #expect(d.machine.resumedFrom == 100_000)
        let differed = d.machine.overlapDiffered(0, now: d.now)
        #expect(differed.contains { $0.restartReason?.contains("differ") == true })
        #expect(differed.last?.sent == .whole)
        // Started again: nothing held before is kept, so the result says it was fetched whole, not resumed.
        #expect(d.machine.resumedFrom == 0 && !d.machine.wasResumed)
    }

    @Test("a body longer than announced: what fits is written, the excess is not, and the connection fails")
    func overrun() {
        var d = Driver()
        _ = d.machine.start(.init(partLength: nil, durableOffset: 0, isPartVerified: true, facts: nil), now: d.now)
        _ = d.machine.responseReceived(0, Heads.ok(150), now: d.now)
        let grant = d.machine.claim(0, count: 200)
        #expect(grant == .init(offset: 0, compare: 0, write: 150, stop: true, overrun: true))
    }

    @Test("a host that answered before cannot be reached: the download waits for the network, spending no retry")
    func network() {
        var d = Driver()
        _ = d.machine.start(
            .init(partLength: 400, durableOffset: 400, isPartVerified: true, facts: Heads.strongFacts), now: d.now)
        let refused = DownloadError(.connectionFailed, "refused")
        var waits: [Duration] = []
        for attempt in 1...8 {
            let actions = d.machine.connectionFailed(0, refused, now: d.now)
            #expect((attempt == 1) == actions.contains(.report(.waitingForNetwork(refused))))
            for case .wait(_, let delay) in actions { waits.append(delay) }
            _ = d.machine.waitEnded(0, now: d.now)
        }
        #expect(waits == [1, 2, 4, 8, 16, 32, 60, 60].map { Duration.seconds($0) })
        let back = d.machine.responseReceived(0, Heads.partial(400, 999, of: 1000), now: d.now)
        #expect(back.first == .report(.networkReturned))
    }

    @Test("a host that never answered fails after the retries: a mistyped name does not wait for ever")
    func neverAnswered() {
        var d = Driver()
        _ = d.machine.start(.init(partLength: nil, durableOffset: 0, isPartVerified: true, facts: nil), now: d.now)
        var last: [TransferMachine.Action] = []
        for _ in 0..<5 {
            last = d.machine.connectionFailed(0, DownloadError(.connectionFailed, "refused"), now: d.now)
            _ = d.machine.waitEnded(0, now: d.now)
        }
        #expect(last.contains { if case .end(.failed) = $0 { true } else { false } })
    }

    @Test(
        "a checksum mismatch after a resumed download fetches it whole once (one truncate); a second one fails and discards the part"
    )
    func checksum() {
        var d = Driver(.init(maxConnections: 1, verifiesChecksum: true))
        _ = d.machine.start(
            .init(partLength: 1000, durableOffset: 1000, isPartVerified: true, facts: Heads.strongFacts), now: d.now)
        let mismatch = DownloadError(.checksumMismatch, "mismatch")
        let again = d.machine.finalized(.checksumMismatch(mismatch), now: d.now)
        #expect(again.contains { $0.restartReason?.contains("checksum") == true })
        #expect(again.filter { if case .truncate(to: 0) = $0 { true } else { false } }.count == 1)
        guard case .send(let id, .whole)? = again.last else {
            Issue.record("expected a whole request, got \(again)")
            return
        }
        _ = d.machine.responseReceived(id, Heads.ok(1000), now: d.now)
        _ = d.stream(id, 1000)
        #expect(d.machine.bodyEnded(id, now: d.now) == [.finalize(total: 1000)])
        #expect(d.machine.finalized(.checksumMismatch(mismatch), now: d.now) == [.end(.failed(mismatch, .discard))])
    }

    @Test("a server without ranges: a break restarts from 0 (said as a restart), no Range is ever sent")
    func notResumable() {
        var d = Driver()
        _ = d.machine.start(.init(partLength: nil, durableOffset: 0, isPartVerified: true, facts: nil), now: d.now)
        _ = d.machine.responseReceived(0, Heads.ok(1000, ranges: false), now: d.now)
        _ = d.stream(0, 300)
        let actions = d.machine.connectionFailed(0, DownloadError(.connectionLost, "reset"), now: d.now)
        #expect(actions.contains { $0.restartReason?.contains("does not resume") == true })
        #expect(actions.contains(.truncate(to: 0)))
        #expect(actions.last == .send(0, .whole))
    }

    @Test("checkpoints: every 16 MiB or every second with bytes to store, one at a time")
    func checkpoints() {
        var d = Driver(.init(maxConnections: 1, checkpointBytes: 1000, checkpointInterval: .seconds(1)))
        _ = d.machine.start(.init(partLength: nil, durableOffset: 0, isPartVerified: true, facts: nil), now: d.now)
        _ = d.machine.responseReceived(0, Heads.ok(10_000), now: d.now)
        let first = d.stream(0, 1000).actions
        #expect(first == [.checkpoint(.offset(1000))])
        #expect(d.stream(0, 1000).actions == [], "one in flight at a time")
        #expect(d.machine.checkpointed(.offset(1000), now: d.now) == [])
        #expect(d.stream(0, 100).actions == [.checkpoint(.offset(2100))])
        _ = d.machine.checkpointed(.offset(2100), now: d.now)
        _ = d.stream(0, 100)
        #expect(d.machine.tick(now: .milliseconds(1500)).contains(.checkpoint(.offset(2200))))
    }

    /// (what the first checkpoint took, when the second starts), in milliseconds from the first's start; the first
    /// starts half an interval into the run, and the lead stops at half an interval (a slower sync is followed at
    /// once).
    static let checkpointLeads: [(cost: Int, second: Int)] = [
        (0, 1000), (1, 999), (200, 800), (499, 501), (500, 500), (900, 900), (1700, 1700),
    ]

    @Test(
        "a checkpoint starts early by what the last one took, so each is stored within an interval of the last",
        arguments: checkpointLeads)
    func checkpointLead(cost: Int, second: Int) {
        var d = Driver(.init(maxConnections: 1, checkpointBytes: 1 << 40, checkpointInterval: .seconds(1)))
        _ = d.machine.start(.init(partLength: nil, durableOffset: 0, isPartVerified: true, facts: nil), now: d.now)
        _ = d.machine.responseReceived(0, Heads.ok(1 << 30), now: d.now)
        d.now = .milliseconds(499)
        #expect(d.stream(0, 100).actions == [], "the first is not due before half an interval")
        d.now = .milliseconds(500)
        #expect(d.stream(0, 100).actions == [.checkpoint(.offset(200))])
        let first = d.now
        d.now = first + .milliseconds(cost)
        #expect(d.machine.checkpointed(.offset(200), now: d.now) == [])
        if second > cost {
            d.now = first + .milliseconds(second - 1)
            #expect(d.stream(0, 100).actions == [], "not due yet")
        }
        d.now = first + .milliseconds(second)
        #expect(d.stream(0, 100).actions.contains(.checkpoint(.offset(second > cost ? 400 : 300))))
    }

    @Test("a connection that brings nothing for the idle timeout is closed and retried")
    func idle() {
        var d = Driver(.init(maxConnections: 1, idleTimeout: .seconds(2)))
        _ = d.machine.start(.init(partLength: nil, durableOffset: 0, isPartVerified: true, facts: nil), now: d.now)
        _ = d.machine.responseReceived(0, Heads.ok(1000), now: d.now)
        _ = d.stream(0, 100)
        #expect(!d.machine.tick(now: .milliseconds(500)).contains(.close(0)), "it was active")
        #expect(!d.machine.tick(now: .milliseconds(2000)).contains(.close(0)), "quiet for 1.5 s only")
        let timedOut = d.machine.tick(now: .milliseconds(2600))
        #expect(timedOut.first == .close(0))
        #expect(timedOut.contains(.send(0, RangeRequest(offset: 100, ifRange: Heads.etag))), "bytes came: at once")
    }

    @Test("stop: every connection closes and the exact bytes written are stored")
    func stop() {
        var d = Driver()
        _ = d.machine.start(.init(partLength: nil, durableOffset: 0, isPartVerified: true, facts: nil), now: d.now)
        _ = d.machine.responseReceived(0, Heads.ok(1000), now: d.now)
        _ = d.stream(0, 450, chunk: 150)
        #expect(d.machine.stop() == [.close(0), .end(.stopped(.keep(.offset(450))))])
        #expect(d.machine.stop() == [])
    }

    @Test("stop: the mark kept is every byte written, and nothing is granted or counted after it")
    func stopAfterWrites() {
        var d = Driver()
        _ = d.machine.start(.init(partLength: nil, durableOffset: 0, isPartVerified: true, facts: nil), now: d.now)
        _ = d.machine.responseReceived(0, Heads.ok(1000), now: d.now)
        _ = d.stream(0, 300, chunk: 150)
        #expect(d.machine.stop() == [.close(0), .end(.stopped(.keep(.offset(300))))])
        #expect(d.machine.claim(0, count: 100).write == 0, "no byte granted after the stop")
        #expect(d.machine.wrote(0, now: d.now) == [])
        #expect(d.machine.checkpointMark == .offset(300))
    }

    @Test("restarts in a row with no byte written between them end in a failure after three, not a loop")
    func restartLoop() {
        var d = Driver()
        _ = d.machine.start(
            .init(partLength: 400, durableOffset: 400, isPartVerified: true, facts: Heads.strongFacts), now: d.now)
        var id = 0
        var outcomes: [[TransferMachine.Action]] = []
        for _ in 0..<4 {
            let actions = d.machine.overlapDiffered(id, now: d.now)
            outcomes.append(actions)
            if case .send(let next, _)? = actions.last { id = next }
        }
        #expect(outcomes.prefix(3).allSatisfy { $0.last?.sent == .whole })
        guard case .end(.failed(let error, _))? = outcomes[3].last else {
            Issue.record("expected a failure, got \(outcomes[3])")
            return
        }
        #expect(error.message.contains("restarts in a row"))
    }
}

@Suite("The transfer machine: several connections")
struct TransferMachineSegmentTests {
    static let settings = TransferMachine.Settings(
        maxConnections: 4, minimumSplitSize: 100, rampWindow: .milliseconds(100))

    /// A machine streaming a 1000-byte file on connection 0 that has just opened a second connection.
    static func split() -> (Driver, [TransferMachine.Action]) {
        var d = Driver(settings)
        _ = d.machine.start(.init(partLength: 0, durableOffset: 0, isPartVerified: true, facts: nil), now: d.now)
        #expect(
            d.machine.responseReceived(0, Heads.ok(1000), now: d.now).last
                == .stream(0, .init(start: 0, compareUntil: 0, end: 1000)))
        // The ramp looks often from the answer on (its first window starts half a window later).
        #expect(d.machine.wantsFastTicks)
        #expect(d.machine.tick(now: .milliseconds(49)).allSatisfy { $0.sent == nil })
        _ = d.machine.tick(now: .milliseconds(50))
        _ = d.stream(0, 100, chunk: 50)
        #expect(d.machine.tick(now: .milliseconds(149)).allSatisfy { $0.sent == nil })
        let added = d.machine.tick(now: .milliseconds(150))
        return (d, added)
    }

    @Test(
        "an answer big enough, with a strong validator: the ramp adds a connection, which asks for the second quarter")
    func firstSplit() {
        let (_, added) = Self.split()
        #expect(added.contains(.send(1, RangeRequest(offset: 250, ifRange: Heads.etag, end: 500))))
        #expect(added.first { $0.sent != nil }?.sent?.rangeHeader == "bytes=250-499")
    }

    @Test("the first connection stops at the end of its part; segments are written once; the last byte finalises")
    func completes() {
        var (d, _) = Self.split()
        let first = d.stream(0, 200, chunk: 100)
        #expect(first.grants.last == .init(offset: 200, compare: 0, write: 50, stop: true, overrun: false))
        var actions = d.machine.bodyEnded(0, now: d.now)
        // Connection 0 takes the next free part (the third quarter).
        #expect(actions.contains(.send(0, RangeRequest(offset: 500, ifRange: Heads.etag, end: 750))))
        #expect(
            d.machine.responseReceived(1, Heads.partial(250, 499, of: 1000), now: d.now).last
                == .stream(1, .init(start: 250, compareUntil: 250, end: 500)))
        _ = d.stream(1, 250)
        actions = d.machine.bodyEnded(1, now: d.now)
        #expect(actions.contains(.send(1, RangeRequest(offset: 750, ifRange: Heads.etag, end: 1000))))
        _ = d.machine.responseReceived(0, Heads.partial(500, 749, of: 1000), now: d.now)
        _ = d.machine.responseReceived(1, Heads.partial(750, 999, of: 1000), now: d.now)
        _ = d.stream(0, 250)
        _ = d.stream(1, 250)
        #expect(d.machine.heldBytes == 1000)
        // Every byte is written: the other connection has nothing left, and the download finalises.
        let ended = d.machine.bodyEnded(0, now: d.now)
        #expect(ended == [.close(1), .close(0), .finalize(total: 1000)])
        #expect(d.machine.bodyEnded(1, now: d.now) == [])
    }

    @Test("a segment answered 200 with a new validator: every segment goes, and that 200 is the new file, kept")
    func versionChangedKeepsTheNewFile() {
        var (d, _) = Self.split()
        let actions = d.machine.responseReceived(1, Heads.ok(1200, etag: "\"v2\""), now: d.now)
        #expect(actions.contains(.close(0)))
        #expect(!actions.contains(.close(1)))
        #expect(actions.contains { $0.restartReason?.contains("changed") == true })
        #expect(actions.contains(.truncate(to: 0)))
        #expect(actions.last == .stream(1, .init(start: 0, compareUntil: 0, end: 1200)))
        #expect(!actions.contains { $0.sent != nil || $0.isWait })
    }

    @Test("a segment answered 206 of another version: a restart from 0 with a new request, at once")
    func versionChangedPartial() {
        var (d, _) = Self.split()
        let actions = d.machine.responseReceived(1, Heads.partial(250, 499, of: 1000, etag: "\"v2\""), now: d.now)
        #expect(actions.contains(.close(0)) && actions.contains(.close(1)))
        #expect(actions.last?.sent == .whole)
        #expect(!actions.contains { $0.isWait })
    }

    @Test("a server that answers a segment with a wrong start: one connection from 0, and no more splitting")
    func badSegment() {
        var (d, _) = Self.split()
        let actions = d.machine.responseReceived(1, Heads.partial(200, 499, of: 1000), now: d.now)
        #expect(actions.contains { $0.restartReason?.contains("one connection") == true })
        guard case .send(let id, .whole)? = actions.last else {
            Issue.record("expected a whole request: \(actions)")
            return
        }
        let again = d.machine.responseReceived(id, Heads.ok(1000), now: d.now)
        _ = d.machine.tick(now: .milliseconds(200))
        _ = d.stream(id, 300)
        #expect(!d.machine.tick(now: .milliseconds(400)).contains { $0.sent != nil }, "no split after that")
        #expect(again.last == .stream(id, .init(start: 0, compareUntil: 0, end: 1000)))
    }

    @Test("429 on one connection while another runs: that connection closes, the rest go on")
    func overloaded() {
        var (d, _) = Self.split()
        let actions = d.machine.responseReceived(1, Heads.status(429, [("Retry-After", "5")]), now: d.now)
        #expect(actions.contains(.close(1)))
        #expect(!actions.contains { if case .end = $0 { true } else { false } })
        #expect(d.machine.openConnections == 1)
    }

    @Test("a stored map: each unfinished segment continues at its offset, none past the part file's end")
    func restores() {
        var d = Driver(Self.settings)
        let stored = [
            Segment(start: 0, end: 500, offset: 500), Segment(start: 500, end: 1000, offset: 800),
        ]
        let actions = d.machine.start(
            .init(
                partLength: 700, durableOffset: 700, segments: stored, isPartVerified: true, facts: Heads.strongFacts),
            now: d.now)
        #expect(actions == [.send(0, RangeRequest(offset: 700, ifRange: Heads.etag, end: 1000))])
        #expect(d.machine.resumedFrom == 700 && d.machine.wasResumed)
    }

    @Test("a stored map that does not tile the file: the download starts over, and says so")
    func badMap() {
        var d = Driver(Self.settings)
        let stored = [Segment(start: 0, end: 400, offset: 400), Segment(start: 500, end: 1000, offset: 600)]
        let actions = d.machine.start(
            .init(
                partLength: 600, durableOffset: 600, segments: stored, isPartVerified: true, facts: Heads.strongFacts),
            now: d.now)
        #expect(actions.first?.restartReason != nil)
        #expect(actions.contains(.truncate(to: 0)))
        #expect(actions.last?.sent == .whole)
    }

    @Test("checkpoints store the map with what is written, never a byte claimed but not written")
    func segmentCheckpoint() {
        var (d, _) = Self.split()
        _ = d.machine.claim(0, count: 50)
        // The claim of 50 bytes is not written yet.
        guard case .segments(let segments, let bytes) = d.machine.checkpointMark else {
            Issue.record("expected a segment map")
            return
        }
        #expect(bytes == 100)
        #expect(segments.first { $0.start == 0 }?.offset == 100)
        _ = d.machine.wrote(0, now: d.now)
        #expect(d.machine.heldBytes == 150)
    }
}
