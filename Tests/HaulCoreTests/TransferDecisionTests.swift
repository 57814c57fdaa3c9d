import HaulCore
import Testing

/// The machine's decisions as tables: what each failure, each checksum outcome and each way of stopping leads to. The
/// runner performs them and decides nothing of its own, so these rows are the whole rule.
@Suite("The transfer machine's decisions, as tables")
struct TransferDecisionTests {
    /// A machine streaming the whole 1000-byte file on connection 0, `written` bytes of it written; `resumed` when
    /// its run began from 400 bytes held.
    static func streaming(written: Int, resumed: Bool = false, checksum: Bool = false) -> Driver {
        var d = Driver(.init(maxConnections: 1, minimumSplitSize: 1 << 20, verifiesChecksum: checksum))
        if resumed {
            _ = d.machine.start(
                .init(partLength: 400, durableOffset: 400, isPartVerified: true, facts: Heads.strongFacts), now: d.now)
            _ = d.machine.responseReceived(0, Heads.partial(400, 999, of: 1000), now: d.now)
        } else {
            _ = d.machine.start(.init(partLength: nil, durableOffset: 0, isPartVerified: true, facts: nil), now: d.now)
            _ = d.machine.responseReceived(0, Heads.ok(1000), now: d.now)
        }
        if written > 0 { _ = d.stream(0, written) }
        return d
    }

    /// Starts the machine on a file of `length` bytes the user handed over with -c (an empty one has nothing to
    /// compare).
    static func handOver(_ length: Int64, to d: inout Driver) {
        _ = d.machine.start(
            .init(
                partLength: length, durableOffset: 0, isPartVerified: length == 0, isHandedOver: true, facts: nil),
            now: d.now)
    }

    /// What a list of actions amounts to, in a word.
    enum Decision: Equatable, CustomStringConvertible {
        case resendAtOnce(from: Int64)
        case waitThenRetry
        case waitForNetwork
        case fail(DownloadError.Code, PartFateKind)

        var description: String {
            switch self {
            case .resendAtOnce(let offset): "resend at once from \(offset)"
            case .waitThenRetry: "wait, then retry"
            case .waitForNetwork: "wait for the network"
            case .fail(let code, let fate): "fail (\(code)), \(fate) the part"
            }
        }
    }

    enum PartFateKind: Equatable { case keep, leave, discard, handBack }

    static func decision(_ actions: [TransferMachine.Action]) -> Decision? {
        for action in actions {
            switch action {
            case .end(.failed(let error, let fate)):
                let kind: PartFateKind =
                    switch fate {
                    case .keep: .keep
                    case .leave: .leave
                    case .discard: .discard
                    case .handBack: .handBack
                    }
                return .fail(error.code, kind)
            case .report(.waitingForNetwork): return .waitForNetwork
            case .wait: return .waitThenRetry
            case .send(_, let request): return .resendAtOnce(from: request.offset)
            default: continue
            }
        }
        return nil
    }

    struct FailureRow: Sendable, CustomTestStringConvertible {
        let what: String
        let error: DownloadError
        /// Reported as a body breaking in the network (`bodyBroke`), not as an error of its own kind.
        let inBody: Bool
        let writtenBefore: Int
        let expected: Decision

        var testDescription: String { "\(what) → \(expected)" }
    }

    static let failures: [FailureRow] = [
        FailureRow(
            what: "a reset after bytes", error: DownloadError(.connectionLost, "reset"), inBody: true,
            writtenBefore: 300, expected: .resendAtOnce(from: 300)),
        FailureRow(
            what: "a reset before any byte", error: DownloadError(.connectionLost, "reset"), inBody: true,
            writtenBefore: 0, expected: .waitThenRetry),
        FailureRow(
            what: "a body that ends short, after bytes", error: DownloadError(.bodyTooShort, "short"), inBody: false,
            writtenBefore: 500, expected: .resendAtOnce(from: 500)),
        FailureRow(
            what: "a TLS failure in a body", error: DownloadError(.tls, "bad record mac"), inBody: true,
            writtenBefore: 300, expected: .fail(.tls, .keep)),
        FailureRow(
            what: "a disk that is full", error: DownloadError(.diskFull, "no space"), inBody: false,
            writtenBefore: 300, expected: .fail(.diskFull, .keep)),
        FailureRow(
            what: "a write the file system refused", error: DownloadError(.fileSystem, "EIO"), inBody: false,
            writtenBefore: 300, expected: .fail(.fileSystem, .keep)),
        FailureRow(
            what: "a host that answered before and is unreachable now",
            error: DownloadError(.connectionFailed, "refused"), inBody: false, writtenBefore: 300,
            expected: .waitForNetwork),
        FailureRow(
            what: "an idle connection", error: DownloadError(.idleTimeout, "no data"), inBody: false,
            writtenBefore: 0, expected: .waitThenRetry),
    ]

    @Test(
        "each failure of a connection: resend at once, back off, wait for the network, or fail keeping the part",
        arguments: failures)
    func failure(_ row: FailureRow) {
        var d = Self.streaming(written: row.writtenBefore)
        let actions =
            row.inBody
            ? d.machine.bodyBroke(0, row.error, now: d.now)
            : d.machine.connectionFailed(0, row.error, now: d.now)
        #expect(Self.decision(actions) == row.expected, "\(actions)")
    }

    @Test("a body that breaks in the network is retried and says so; the bytes before the break count")
    func bodyBreakMessage() {
        var d = Self.streaming(written: 300)
        let actions = d.machine.bodyBroke(0, DownloadError(.connectionLost, "connection reset"), now: d.now)
        #expect(actions.last == .send(0, RangeRequest(offset: 300, ifRange: Heads.etag)))
        #expect(d.machine.heldBytes == 300)
    }

    @Test("after the retries, the failure names how many attempts brought nothing, and the part holding none goes")
    func givingUp() {
        var d = Self.streaming(written: 0)
        var last: [TransferMachine.Action] = []
        for _ in 0..<5 {
            last = d.machine.connectionFailed(0, DownloadError(.connectionLost, "reset"), now: d.now)
            if last.contains(where: \.isWait) { _ = d.machine.waitEnded(0, now: d.now) }
        }
        guard case .end(.failed(let error, .discard)) = last.last else {
            Issue.record("expected a failure deleting the empty part, got \(last)")
            return
        }
        #expect(error.message.contains("5 attempts without progress"))
        #expect(!error.isRetryable)
    }

    struct ChecksumRow: Sendable, CustomTestStringConvertible {
        let what: String
        let resumed: Bool
        let mismatchesBefore: Int
        /// The run restarts from 0 (one truncate) instead of ending.
        let restarts: Bool

        var testDescription: String { what }
    }

    @Test(
        "a checksum mismatch: fetched whole once after a resumed download; otherwise the download fails and the part goes",
        arguments: [
            ChecksumRow(what: "after a resume, the first mismatch", resumed: true, mismatchesBefore: 0, restarts: true),
            ChecksumRow(
                what: "after a resume, the second mismatch", resumed: true, mismatchesBefore: 1, restarts: false),
            ChecksumRow(what: "a download fetched whole", resumed: false, mismatchesBefore: 0, restarts: false),
        ])
    func checksum(_ row: ChecksumRow) {
        var d = Self.streaming(written: row.resumed ? 600 : 1000, resumed: row.resumed, checksum: true)
        _ = d.machine.bodyEnded(0, now: d.now)
        let mismatch = DownloadError(.checksumMismatch, "checksum mismatch")
        for _ in 0..<row.mismatchesBefore {
            let again = d.machine.finalized(.checksumMismatch(mismatch), now: d.now)
            guard case .send(let id, _)? = again.last else {
                Issue.record("no fresh fetch: \(again)")
                return
            }
            _ = d.machine.responseReceived(id, Heads.ok(1000), now: d.now)
            _ = d.stream(id, 1000)
            _ = d.machine.bodyEnded(id, now: d.now)
        }
        let actions = d.machine.finalized(.checksumMismatch(mismatch), now: d.now)
        if row.restarts {
            #expect(actions.filter { $0 == .truncate(to: 0) }.count == 1, "\(actions)")
            #expect(actions.last?.sent == .whole)
        } else {
            #expect(actions == [.end(.failed(mismatch, .discard))])
        }
    }

    struct EndingRow: Sendable, CustomTestStringConvertible {
        let what: String
        let play: @Sendable (inout Driver) -> [TransferMachine.Action]
        let expected: TransferMachine.Ending

        var testDescription: String { what }
    }

    static let endings: [EndingRow] = [
        EndingRow(
            what: "a stop before the transfer started stores nothing", play: { $0.machine.stop() },
            expected: .stopped(.leave)),
        EndingRow(
            what: "a stop while streaming keeps exactly the bytes written",
            play: { d in
                d = TransferDecisionTests.streaming(written: 450)
                return d.machine.stop()
            }, expected: .stopped(.keep(.offset(450)))),
        EndingRow(
            what: "an action that failed before the start leaves the stored record",
            play: { $0.machine.actionFailed(DownloadError(.fileSystem, "no folder")) },
            expected: .failed(DownloadError(.fileSystem, "no folder"), .leave)),
        EndingRow(
            what: "an action that failed while streaming keeps the bytes written",
            play: { d in
                d = TransferDecisionTests.streaming(written: 200)
                return d.machine.actionFailed(DownloadError(.fileSystem, "EIO"))
            }, expected: .failed(DownloadError(.fileSystem, "EIO"), .keep(.offset(200)))),
        EndingRow(
            what: "a checkpoint the store could not take fails the download, keeping the bytes",
            play: { d in
                d = TransferDecisionTests.streaming(written: 300)
                return d.machine.checkpointFailed(DownloadError(.diskFull, "store full"))
            }, expected: .failed(DownloadError(.diskFull, "store full"), .keep(.offset(300)))),
        EndingRow(
            what: "an answer that can never succeed fails the download, deleting the part file that holds no byte",
            play: { d in
                _ = d.machine.start(
                    .init(partLength: nil, durableOffset: 0, isPartVerified: true, facts: nil), now: d.now)
                return d.machine.responseReceived(0, Heads.status(404), now: d.now)
            }, expected: .failed(.httpStatus(404), .discard)),
        EndingRow(
            what: "an answer that can never succeed after a resume keeps the bytes held",
            play: { d in
                _ = d.machine.start(
                    .init(partLength: 700, durableOffset: 700, isPartVerified: true, facts: Heads.strongFacts),
                    now: d.now)
                return d.machine.responseReceived(0, Heads.status(404), now: d.now)
            }, expected: .failed(.httpStatus(404), .keep(.offset(700)))),
        EndingRow(
            what: "a file handed over with -c that the server cannot give goes back as it came",
            play: { d in
                TransferDecisionTests.handOver(700, to: &d)
                return d.machine.responseReceived(0, Heads.status(404), now: d.now)
            }, expected: .failed(.httpStatus(404), .handBack)),
        EndingRow(
            what: "an empty file handed over with -c goes back too, not deleted as a part file holding no byte",
            play: { d in
                TransferDecisionTests.handOver(0, to: &d)
                return d.machine.responseReceived(0, Heads.status(404), now: d.now)
            }, expected: .failed(.httpStatus(404), .handBack)),
        EndingRow(
            what: "a pause before this run writes into a file handed over gives it back too",
            play: { d in
                TransferDecisionTests.handOver(700, to: &d)
                return d.machine.stop()
            }, expected: .stopped(.handBack)),
        EndingRow(
            what: "a file handed over that this run wrote into is a part file: its bytes are kept",
            play: { d in
                TransferDecisionTests.handOver(0, to: &d)
                _ = d.machine.responseReceived(0, Heads.ok(1000), now: d.now)
                _ = d.stream(0, 300)
                return d.machine.actionFailed(DownloadError(.fileSystem, "EIO"))
            }, expected: .failed(DownloadError(.fileSystem, "EIO"), .keep(.offset(300)))),
        EndingRow(
            what: "a file handed over whose bytes differ from the server's is emptied, and is then a part file",
            play: { d in
                TransferDecisionTests.handOver(700, to: &d)
                _ = d.machine.responseReceived(0, Heads.ok(1000), now: d.now)
                // The whole file asked for again, on connection 1.
                #expect(d.machine.overlapDiffered(0, now: d.now).contains(.truncate(to: 0)))
                return d.machine.responseReceived(1, Heads.status(404), now: d.now)
            }, expected: .failed(.httpStatus(404), .discard)),
        EndingRow(
            what: "a verified file completes",
            play: { d in
                d = TransferDecisionTests.streaming(written: 1000)
                _ = d.machine.bodyEnded(0, now: d.now)
                return d.machine.finalized(.completed, now: d.now)
            }, expected: .completed),
    ]

    @Test("every way a run ends is one .end action, with what becomes of the part file", arguments: endings)
    func ending(_ row: EndingRow) {
        var d = Driver()
        let actions = row.play(&d)
        let ends = actions.compactMap { if case .end(let ending) = $0 { ending } else { nil } }
        #expect(ends == [row.expected], "\(actions)")
        #expect(actions.last.map { if case .end = $0 { true } else { false } } == true, "the end comes last")
        #expect(d.machine.stop() == [], "nothing follows the end")
    }
}
