import HaulCore
import Testing

/// A download resumed on a replaced link (`Start.linkReplaced`), against `MirrorSimulation`'s one server: the held
/// bytes are kept when the new link serves the same file, and never mixed with another file's.
@Suite("The transfer machine: a replaced link")
struct TransferMachineLinkTests {
    static let etag = "\"a\""

    /// A simulation started on a part file holding `segments`, learned from a link whose ETag was `Self.etag`.
    /// A simulation started on a part file holding `segments`, or (without them) its first 20,000 bytes on one
    /// connection, learned from a link whose ETag was `Self.etag`; run to its end.
    static func resumed(_ server: MirrorSimulation.Server, segments: [Segment]? = nil, linkReplaced: Bool = true)
        -> MirrorSimulation
    {
        var sim = MirrorSimulation(servers: [server])
        let held = segments ?? [Segment(start: 0, end: 100_000, offset: 20_000)]
        for segment in held {
            for byte in segment.start..<segment.offset { sim.origin[Int(byte)] = 0 }
        }
        let facts = RemoteFacts(
            totalLength: 100_000, validators: Validators(etag: EntityTag(etag)), isResumable: true)
        let bytes = held.reduce(0) { $0 + $1.offset - $1.start }
        sim.perform(
            sim.driver.machine.start(
                .init(
                    partLength: segments == nil ? bytes : 100_000, durableOffset: bytes, segments: segments,
                    isPartVerified: true, facts: facts, linkReplaced: linkReplaced),
                now: .zero))
        sim.run()
        return sim
    }

    static let halfway = [
        Segment(start: 0, end: 50_000, offset: 20_000), Segment(start: 50_000, end: 100_000, offset: 70_000),
    ]

    var restarts: (MirrorSimulation) -> [String] = { sim in
        sim.reports.compactMap { if case .restarted(let reason) = $0 { reason } else { nil } }
    }

    @Test("the same strong validator: every held byte kept, none asked for again")
    func sameValidator() {
        let sim = Self.resumed(.init(speed: 300, etag: Self.etag, honoursIfRange: true), segments: Self.halfway)
        #expect(sim.ending == .completed)
        #expect(restarts(sim).isEmpty)
        #expect(sim.served[0] == 60_000, "only the bytes not held")
        #expect(sim.sent.allSatisfy { $0.overlap == 0 && $0.ifRange == Self.etag })
    }

    @Test("another validator, the same bytes: the bytes before each offset are compared, then kept")
    func otherValidatorSameBytes() {
        let sim = Self.resumed(.init(speed: 300, etag: "\"b\"", honoursIfRange: true), segments: Self.halfway)
        #expect(sim.ending == .completed)
        #expect(restarts(sim).isEmpty)
        #expect(sim.served[0] == 60_000)
        // Each segment compared the 1,000 bytes (the simulation's overlap) before its offset.
        #expect(sim.sent.contains { $0.offset == 20_000 && $0.overlap == 1_000 })
        #expect(sim.sent.contains { $0.offset == 70_000 && $0.overlap == 1_000 })
        #expect(sim.origin.allSatisfy { $0 == 0 })
    }

    @Test("the held bytes at the end of the file, which no segment continues from, are compared too")
    func tailCompared() {
        let segments = [
            Segment(start: 0, end: 50_000, offset: 20_000), Segment(start: 50_000, end: 100_000, offset: 100_000),
        ]
        let sim = Self.resumed(.init(speed: 300, etag: "\"b\""), segments: segments)
        #expect(sim.ending == .completed)
        #expect(restarts(sim).isEmpty)
        #expect(sim.sent.contains { $0.offset == 99_000 && $0.end == 100_000 && $0.overlap == 0 })
        #expect(sim.served[0] == 30_000)
    }

    @Test("other bytes of the same length: the comparison fails, the download starts again, nothing is mixed")
    func otherBytes() {
        var server = MirrorSimulation.Server(speed: 300, etag: "\"b\"", honoursIfRange: true)
        server.otherBytes = true
        // The compared bytes differ; after the restart nothing is compared: the file comes whole from the new link.
        let sim = Self.resumed(server)
        #expect(sim.ending == .completed)
        #expect(restarts(sim) == ["the bytes held differ from the server's; fetching it again from 0"])
        #expect(sim.served[0] == 100_000, "fetched whole after the restart")
    }

    @Test("another length is another file: it starts again, saying so")
    func otherLength() {
        var server = MirrorSimulation.Server(speed: 300, etag: "\"b\"")
        server.total = 90_000
        let shorter = Self.resumed(server)
        #expect(shorter.ending == .completed)
        #expect(restarts(shorter).first?.contains("the new link serves another file (90000 bytes, not 100000)") == true)
    }

    @Test("without a replaced link, a 200 to If-Range is a changed file, as before")
    func notReplaced() {
        let sim = Self.resumed(
            .init(speed: 300, etag: "\"b\"", honoursIfRange: true), segments: Self.halfway, linkReplaced: false)
        #expect(sim.ending == .completed)
        #expect(!restarts(sim).isEmpty)
    }
}
