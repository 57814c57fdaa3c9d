import HaulCore
import Testing

/// Runs a machine against simulated servers, one per source, until the download ends: each step of 10 ms answers
/// the requests sent, streams each accepted body at its server's speed, and ticks.
struct MirrorSimulation {
    /// How one server behaves.
    struct Server {
        /// Bytes a connection brings per step.
        var speed: Int
        var total: Int64 = 100_000
        var etag: String
        /// Its bytes differ from the reference's (caught when compared).
        var otherBytes = false
        /// Answers every request with this status instead, and breaks the bodies it was sending.
        var status: Int?
        /// Its bytes here are not the file's (a piece check catches them).
        var wrongBytes: Range<Int64>?
        /// Answers a request whose `If-Range` is not its ETag with the whole file (200), as RFC 9110 says.
        var honoursIfRange = false
    }

    var driver: Driver
    var servers: [Server]
    var requests: [Int: RangeRequest] = [:]
    var streaming: Set<Int> = []
    var waits: [Int: Duration] = [:]
    /// Bytes each server had written.
    var served: [Int: Int64] = [:]
    var sent: [RangeRequest] = []
    var reports: [TransferMachine.Report] = []
    var ending: TransferMachine.Ending?
    /// Which server wrote each byte of the part file (-1: none).
    var origin: [Int]
    /// Called after a piece check failed (a flaky server mends).
    var onBadPiece: (inout MirrorSimulation) -> Void = { _ in }

    init(
        servers: [Server], connectionsPerSource: Int = 2, minimumSplitSize: Int64 = 4_000, pieceLength: Int64? = nil,
        rampWindow: Duration = .milliseconds(100)
    ) {
        self.servers = servers
        origin = Array(repeating: -1, count: Int(servers[0].total))
        driver = Driver(
            TransferMachine.Settings(
                maxConnections: connectionsPerSource * servers.count, minimumSplitSize: minimumSplitSize,
                overlapLength: 1_000, idleTimeout: .seconds(30), rampWindow: rampWindow,
                sources: servers.count, connectionsPerSource: connectionsPerSource, pieceLength: pieceLength))
    }

    /// Whether every byte of `range` holds the file's byte.
    func isRight(_ range: Range<Int64>) -> Bool {
        range.allSatisfy { byte in
            let writer = origin[Int(byte)]
            return writer >= 0 && servers[writer].wrongBytes?.contains(byte) != true
        }
    }

    func head(for request: RangeRequest) -> ResponseHead {
        let server = servers[request.source]
        if let status = server.status { return Heads.status(status) }
        guard let start = request.rangeStart else { return Heads.ok(server.total, etag: server.etag) }
        if let ifRange = request.ifRange, ifRange != server.etag {
            if request.requiresSame { return Heads.status(412) }
            if server.honoursIfRange { return Heads.ok(server.total, etag: server.etag) }
        }
        if start >= server.total { return Heads.status(416, [("Content-Range", "bytes */\(server.total)")]) }
        let last = min((request.end ?? server.total) - 1, server.total - 1)
        return Heads.partial(start, last, of: server.total, etag: server.etag)
    }

    mutating func perform(_ actions: [TransferMachine.Action]) {
        var pending = actions
        while !pending.isEmpty, ending == nil {
            let action = pending.removeFirst()
            switch action {
            case .send(let id, let request):
                requests[id] = request
                streaming.remove(id)
                sent.append(request)
            case .stream(let id, _): streaming.insert(id)
            case .close(let id), .discard(let id):
                requests[id] = nil
                streaming.remove(id)
            case .wait(let id, let delay):
                requests[id] = nil
                streaming.remove(id)
                waits[id] = driver.now + delay
            case .checkpoint(let mark): pending += driver.machine.checkpointed(mark, now: driver.now)
            case .finalize: pending += driver.machine.finalized(.completed, now: driver.now)
            case .checkPiece(let index, let range, let ticket):
                let matches = isRight(range)
                if !matches { onBadPiece(&self) }
                pending += driver.machine.pieceChecked(index, ticket: ticket, matches: matches, now: driver.now)
            case .report(let report): reports.append(report)
            case .end(let end): ending = end
            case .truncate(let length):
                for byte in Int(length)..<origin.count { origin[byte] = -1 }
            case .progress: break
            }
        }
    }

    /// Runs until the download ends or `steps` pass.
    mutating func run(steps: Int = 20_000) {
        if !driver.machine.hasStarted {
            perform(
                driver.machine.start(
                    .init(partLength: 0, durableOffset: 0, isPartVerified: true, facts: nil), now: .zero))
        }
        for _ in 0..<steps where ending == nil {
            for id in requests.keys.sorted() where !streaming.contains(id) {
                guard let request = requests[id] else { continue }
                perform(driver.machine.responseReceived(id, head(for: request), now: driver.now))
            }
            for id in streaming.sorted() {
                guard let request = requests[id], streaming.contains(id), ending == nil else { continue }
                let server = servers[request.source]
                if server.status != nil {
                    streaming.remove(id)
                    let reset = DownloadError(.connectionLost, "connection reset", isRetryable: true)
                    perform(driver.machine.bodyBroke(id, reset, now: driver.now))
                    continue
                }
                let grant = driver.machine.claim(id, count: server.speed)
                if grant.compare > 0, server.otherBytes {
                    perform(driver.machine.overlapDiffered(id, now: driver.now))
                    continue
                }
                served[request.source, default: 0] += Int64(grant.write)
                let from = Int(grant.offset) + grant.compare
                for byte in from..<from + grant.write { origin[byte] = request.source }
                perform(driver.machine.wrote(id, now: driver.now))
                if grant.stop || grant.write + grant.compare < server.speed {
                    streaming.remove(id)
                    perform(driver.machine.bodyEnded(id, now: driver.now))
                }
            }
            for (id, time) in waits where time <= driver.now {
                waits[id] = nil
                perform(driver.machine.waitEnded(id, now: driver.now))
            }
            driver.now += .milliseconds(10)
            perform(driver.machine.tick(now: driver.now))
        }
    }

    var dropped: [Int: String] {
        var found: [Int: String] = [:]
        for case .mirrorDropped(let source, let reason) in reports { found[source] = reason }
        return found
    }
}

@Suite("The transfer machine: one file from several servers")
struct TransferMachineMirrorTests {
    @Test("three servers of unequal speed: each serves bytes, the fastest the most, every byte written once")
    func spreads() {
        var sim = MirrorSimulation(servers: [
            .init(speed: 300, etag: "\"a\""), .init(speed: 600, etag: "\"b\""), .init(speed: 150, etag: "\"c\""),
        ])
        sim.run()
        #expect(sim.ending == .completed)
        #expect(sim.served.values.reduce(0, +) == 100_000)
        #expect(sim.served.keys.sorted() == [0, 1, 2])
        #expect(sim.served[1, default: 0] > sim.served[0, default: 0])
        #expect(sim.served[0, default: 0] > sim.served[2, default: 0])
        #expect(sim.dropped.isEmpty)
    }

    @Test("no mirror is asked before the first server's last bytes are held; each mirror is first asked for them")
    func sampleFirst() {
        var sim = MirrorSimulation(servers: [.init(speed: 300, etag: "\"a\""), .init(speed: 300, etag: "\"b\"")])
        sim.run()
        #expect(sim.ending == .completed)
        let tail = sim.sent.firstIndex { $0.source == 0 && $0.offset == 99_000 && $0.end == 100_000 }
        let mirror = sim.sent.firstIndex { $0.source == 1 }
        #expect(tail != nil && mirror != nil && tail! < mirror!)
        // The sample is compared, never written, and carries no validator: the mirror's own is learned from it.
        #expect(sim.sent[mirror!] == RangeRequest(offset: 99_000, end: 100_000, source: 1))
        #expect(sim.sent.contains { $0.source == 1 && $0.ifRange == "\"b\"" })
    }

    @Test("the mirrors are asked even when the ramp never adds a second connection to the first server")
    func mirrorsWithoutRamp() {
        var sim = MirrorSimulation(
            servers: [.init(speed: 100, etag: "\"a\""), .init(speed: 100, etag: "\"b\"")], rampWindow: .seconds(3_600))
        sim.run()
        #expect(sim.ending == .completed)
        #expect(sim.served[1, default: 0] > 20_000, "the mirror serves a share")
        // The sample connection was opened right after the first answer, well before the first server alone would end.
        let sample = sim.sent.firstIndex { $0.source == 0 && $0.offset == 99_000 }
        #expect(sample != nil && sample! <= 2)
    }

    @Test("a mirror whose file has another size is dropped, saying so; the download goes on without it")
    func otherSize() {
        var sim = MirrorSimulation(servers: [
            .init(speed: 300, etag: "\"a\""), .init(speed: 300, total: 90_000, etag: "\"b\""),
        ])
        sim.run()
        #expect(sim.ending == .completed)
        #expect(sim.dropped[1]?.contains("90000 bytes") == true)
        #expect(sim.served[1] == nil)
    }

    @Test("a mirror whose last bytes differ is dropped before any of its bytes is written, with no restart")
    func otherBytes() {
        var sim = MirrorSimulation(servers: [
            .init(speed: 300, etag: "\"a\""), .init(speed: 300, etag: "\"b\"", otherBytes: true),
        ])
        sim.run()
        #expect(sim.ending == .completed)
        #expect(sim.dropped[1]?.contains("differ") == true)
        #expect(sim.served[1] == nil)
        #expect(!sim.reports.contains { if case .restarted = $0 { true } else { false } })
    }

    @Test("a mirror answering 404 is dropped; one answering 503 is retried on itself, then dropped; neither fails it")
    func failingMirrors() {
        var sim = MirrorSimulation(servers: [
            .init(speed: 30, total: 200_000, etag: "\"a\""),
            .init(speed: 30, total: 200_000, etag: "\"b\"", status: 404),
            .init(speed: 30, total: 200_000, etag: "\"c\"", status: 503),
        ])
        sim.run()
        #expect(sim.ending == .completed)
        #expect(sim.dropped[1]?.contains("404") == true)
        #expect(sim.dropped[2]?.contains("attempts in a row") == true)
        #expect(sim.sent.filter { $0.source == 2 }.count == 5)
        #expect(sim.served[0] == 200_000)
    }

    @Test("when the first server fails for good while a mirror is trusted, the mirror finishes the file")
    func referenceLost() {
        var sim = MirrorSimulation(servers: [
            .init(speed: 30, total: 200_000, etag: "\"a\""), .init(speed: 30, total: 200_000, etag: "\"b\""),
        ])
        // Run until the mirror is trusted, then make the first server answer 404.
        for _ in 0..<2_000 where !sim.sent.contains(where: { $0.source == 1 && $0.ifRange != nil }) {
            sim.run(steps: 1)
        }
        sim.servers[0].status = 404
        sim.run()
        #expect(sim.ending == .completed)
        #expect(sim.dropped[0]?.contains("404") == true)
        #expect(sim.served.values.reduce(0, +) == 200_000)
    }

    @Test(
        "a mirror that sends a piece with another hash is dropped, the piece comes again from another, the file is right"
    )
    func badPiece() {
        var sim = MirrorSimulation(
            servers: [
                .init(speed: 300, etag: "\"a\""),
                // Right at the end (it passes the sample check), wrong elsewhere.
                .init(speed: 300, etag: "\"b\"", wrongBytes: 0..<99_000),
            ],
            pieceLength: 10_000)
        sim.run()
        #expect(sim.ending == .completed)
        #expect(sim.isRight(0..<100_000))
        #expect(sim.served[1, default: 0] > 0)
        #expect(sim.dropped[1]?.contains("does not match its hash") == true, "\(sim.dropped)")
    }

    @Test("one server: a piece that does not match is fetched again from it; a third failure fails the download")
    func onePieceAgain() {
        var flaky = MirrorSimulation(
            servers: [.init(speed: 300, etag: "\"a\"", wrongBytes: 70_000..<70_001)], pieceLength: 10_000)
        flaky.onBadPiece = { $0.servers[0].wrongBytes = nil }
        flaky.run()
        #expect(flaky.ending == .completed)
        #expect(flaky.isRight(0..<100_000))
        #expect(
            flaky.reports.contains { if case .restarted(let reason) = $0 { reason.contains("piece 7") } else { false } }
        )

        var broken = MirrorSimulation(
            servers: [.init(speed: 300, etag: "\"a\"", wrongBytes: 70_000..<70_001)], pieceLength: 10_000)
        broken.run()
        guard case .failed(let error, _)? = broken.ending else {
            Issue.record("expected a failure, got \(String(describing: broken.ending))")
            return
        }
        #expect(error.code == .checksumMismatch && error.message.contains("fetched 3 times"), "\(error.message)")
    }
}
