import HaulCore
import Testing

@Suite("Resume planner: every row of the resume table")
struct ResumePlannerTests {
    static let strong = Validators(etag: "\"v1\"", lastModified: nil, date: nil)
    static let weak = Validators(etag: "W/\"v1\"", lastModified: nil, date: nil)
    static let facts = RemoteFacts(totalLength: 1000, validators: strong, isResumable: true)

    struct Row: Sendable, CustomTestStringConvertible {
        var name: String
        var input: ResumePlanner.Input
        var plan: ResumePlanner.Plan
        var testDescription: String { name }
    }

    static let rows: [Row] = [
        Row(
            name: "no part file: GET from 0",
            input: .init(partLength: nil, durableOffset: 0, hasRecord: false, remote: nil),
            plan: .request(.whole, truncateTo: nil)
        ),
        Row(
            name: "part deleted while the row said 500: GET from 0",
            input: .init(partLength: nil, durableOffset: 500, hasRecord: true, remote: facts),
            plan: .request(.whole, truncateTo: nil)
        ),
        Row(
            name: "part shorter than the durable offset: trust the file",
            input: .init(partLength: 300, durableOffset: 500, hasRecord: true, remote: facts),
            plan: .request(RangeRequest(offset: 300, ifRange: "\"v1\""), truncateTo: nil)
        ),
        Row(
            name: "part longer than the durable offset: truncate to it",
            input: .init(partLength: 800, durableOffset: 500, hasRecord: true, remote: facts),
            plan: .request(RangeRequest(offset: 500, ifRange: "\"v1\""), truncateTo: 500)
        ),
        Row(
            name: "part equal to the known total: finalise without a request",
            input: .init(partLength: 1000, durableOffset: 1000, hasRecord: true, remote: facts),
            plan: .finalize(truncateTo: nil)
        ),
        Row(
            name: "part longer than the remote total: start again",
            input: .init(partLength: 1200, durableOffset: 1200, hasRecord: true, remote: facts),
            plan: .request(.whole, truncateTo: 0)
        ),
        Row(
            name: "not resumable: start again",
            input: .init(
                partLength: 400, durableOffset: 400, hasRecord: true,
                remote: RemoteFacts(totalLength: 1000, validators: strong, isResumable: false)),
            plan: .request(.whole, truncateTo: 0)
        ),
        Row(
            name: "not resumable but every byte held: finalise",
            input: .init(
                partLength: 1000, durableOffset: 1000, hasRecord: true,
                remote: RemoteFacts(totalLength: 1000, validators: strong, isResumable: false)),
            plan: .finalize(truncateTo: nil)
        ),
        Row(
            name: "weak ETag only: no If-Range, overlap check",
            input: .init(
                partLength: 100_000, durableOffset: 100_000, hasRecord: true,
                remote: RemoteFacts(totalLength: 200_000, validators: weak, isResumable: true)),
            plan: .request(RangeRequest(offset: 100_000, overlap: 65_536, ifRange: nil), truncateTo: nil)
        ),
        Row(
            name: "no validator and a short part: overlap is the whole part",
            input: .init(
                partLength: 1000, durableOffset: 1000, hasRecord: true,
                remote: RemoteFacts(totalLength: nil, validators: Validators(), isResumable: true)),
            plan: .request(RangeRequest(offset: 1000, overlap: 1000, ifRange: nil), truncateTo: nil)
        ),
        Row(
            name: "part file with no record: never appended blindly",
            input: .init(partLength: 700, durableOffset: 0, hasRecord: false, remote: nil),
            plan: .request(RangeRequest(offset: 700, overlap: 700, ifRange: nil), truncateTo: nil)
        ),
        Row(
            name: "a file handed over, longer than its stored length: cut to it, then compared, never If-Range",
            input: .init(partLength: 800, durableOffset: 500, hasRecord: false, boundsUnverified: true, remote: facts),
            plan: .request(RangeRequest(offset: 500, overlap: 500, ifRange: nil), truncateTo: 500)
        ),
        Row(
            name: "a file handed over, as long as the total: compared before it is finalised",
            input: .init(
                partLength: 1000, durableOffset: 1000, hasRecord: false, boundsUnverified: true, remote: facts),
            plan: .request(RangeRequest(offset: 1000, overlap: 1000, ifRange: nil), truncateTo: nil)
        ),
        Row(
            name: "empty part: GET from 0",
            input: .init(partLength: 0, durableOffset: 0, hasRecord: true, remote: nil),
            plan: .request(.whole, truncateTo: 0)
        ),
        Row(
            name: "unknown total, strong validator: resume with If-Range",
            input: .init(
                partLength: 600, durableOffset: 600, hasRecord: true,
                remote: RemoteFacts(totalLength: nil, validators: strong, isResumable: true)),
            plan: .request(RangeRequest(offset: 600, ifRange: "\"v1\""), truncateTo: nil)
        ),
    ]

    @Test(arguments: rows)
    func row(_ row: Row) {
        #expect(ResumePlanner().plan(row.input) == row.plan)
    }

    @Test func rangeHeaders() {
        #expect(RangeRequest.whole.rangeHeader == nil)
        #expect(RangeRequest(offset: 100).rangeHeader == "bytes=100-")
        #expect(RangeRequest(offset: 100, overlap: 40).rangeHeader == "bytes=60-")
    }
}

@Suite("Response validator")
struct ResponseValidatorTests {
    static let v1 = "\"v1\""
    static let known = RemoteFacts(
        totalLength: 1000, validators: Validators(etag: v1, lastModified: nil, date: nil), isResumable: true)
    static let resume = RangeRequest(offset: 400, ifRange: v1)

    static func head(_ status: Int, _ headers: [(String, String)]) -> ResponseHead {
        ResponseHead(status: status, headers: headers.map { (name: $0.0, value: $0.1) })
    }

    func decide(_ request: RangeRequest, _ head: ResponseHead, known: RemoteFacts? = known, part: Int64 = 400)
        -> ResponseValidator.Decision
    {
        ResponseValidator().decide(request: request, head: head, known: known, partLength: part)
    }

    func decide(_ head: ResponseHead) -> ResponseValidator.Decision {
        decide(Self.resume, head)
    }

    func isRestart(_ decision: ResponseValidator.Decision) -> Bool {
        if case .restart = decision { return true }
        return false
    }

    @Test func partialAtTheRightOffsetAppends() {
        let decision = decide(
            Self.head(206, [("Content-Range", "bytes 400-999/1000"), ("Content-Length", "600"), ("ETag", Self.v1)]))
        #expect(decision == .write(at: 400, overlap: 0, expectedLength: 600, facts: Self.known))
    }

    @Test func overlapRequestWritesAfterComparing() {
        let request = RangeRequest(offset: 400, overlap: 100)
        let decision = decide(request, Self.head(206, [("Content-Range", "bytes 300-999/1000")]), known: nil)
        guard case .write(let at, let overlap, let expected, _) = decision else {
            Issue.record("expected write, got \(decision)")
            return
        }
        #expect(at == 400 && overlap == 100 && expected == 700)
    }

    @Test func fullBodyToARangeRequestIsRewrittenFromZeroAndNotResumable() {
        let decision = decide(
            Self.head(200, [("Content-Length", "1000"), ("ETag", Self.v1), ("Accept-Ranges", "bytes")]))
        guard case .rewrite(let expected, let facts) = decision else {
            Issue.record("expected rewrite, got \(decision)")
            return
        }
        #expect(expected == 1000)
        #expect(facts.isResumable == false)
    }

    @Test func fullBodyAfterAChangeIsRewrittenAndStaysResumable() {
        let decision = decide(
            Self.head(200, [("Content-Length", "900"), ("ETag", "\"v2\""), ("Accept-Ranges", "bytes")]))
        guard case .rewrite(_, let facts) = decision else {
            Issue.record("expected rewrite, got \(decision)")
            return
        }
        #expect(facts.isResumable && facts.totalLength == 900)
    }

    @Test func firstAnswerWithoutAcceptRangesIsNotResumable() {
        let decision = decide(.whole, Self.head(200, [("Content-Length", "10")]), known: nil, part: 0)
        guard case .rewrite(_, let facts) = decision else {
            Issue.record("expected rewrite")
            return
        }
        #expect(!facts.isResumable)
    }

    @Test(
        "206 answers that are never written",
        arguments: [
            [("Content-Range", "bytes 0-999/1000")],  // wrong start
            [("Content-Range", "bytes 500-999/1000")],  // wrong start
            [(String, String)](),  // no Content-Range
            [("Content-Range", "bytes */1024")],
            [("Content-Range", "bytes 400-300/1000")],
            [("Content-Range", "bytes 400-1000/1000")],
            [("Content-Range", "bytes 400-99999999999999999999/99999999999999999999")],
            [("Content-Range", "items 400-999/1000")],
            [("Content-Range", "bytes 400-1099/1100")],  // total changed
            [("Content-Range", "bytes 400-999/1000"), ("ETag", "\"v2\"")],  // version changed
            [("Content-Range", "bytes 400-999/1000"), ("Content-Type", "multipart/byteranges; boundary=x")],
            [("Content-Range", "bytes 400-999/1000"), ("Content-Length", "10")],
        ]
    )
    func rejectedPartials(headers: [(String, String)]) {
        #expect(isRestart(decide(Self.head(206, headers))))
    }

    @Test func partialToARequestWithoutRangeIsAnError() {
        let decision = decide(.whole, Self.head(206, [("Content-Range", "bytes 0-9/10")]), known: nil, part: 0)
        guard case .fail(let error) = decision else {
            Issue.record("expected fail")
            return
        }
        #expect(error.code == .invalidResponse)
    }

    @Test func satisfiedRangeNotSatisfiableMeansComplete() {
        let request = RangeRequest(offset: 1000, ifRange: Self.v1)
        let decision = decide(request, Self.head(416, [("Content-Range", "bytes */1000")]), part: 1000)
        guard case .complete(let facts) = decision else {
            Issue.record("expected complete, got \(decision)")
            return
        }
        #expect(facts.totalLength == 1000)
    }

    @Test func shrunkOrBareRangeNotSatisfiableRestarts() {
        let request = RangeRequest(offset: 1000, ifRange: Self.v1)
        #expect(isRestart(decide(request, Self.head(416, [("Content-Range", "bytes */900")]), part: 1000)))
        #expect(isRestart(decide(request, Self.head(416, []), part: 1000)))
        #expect(
            isRestart(
                decide(request, Self.head(416, [("Content-Range", "bytes */1000"), ("ETag", "\"v2\"")]), part: 1000)))
    }

    @Test func encodedBodiesFailClearly() {
        let decision = decide(Self.head(200, [("Content-Encoding", "gzip"), ("Content-Length", "10")]))
        guard case .fail(let error) = decision else {
            Issue.record("expected fail")
            return
        }
        #expect(error.code == .contentEncoding)
        #expect(error.message.contains("gzip"))
    }

    @Test(
        "bad Content-Length values are rejected",
        arguments: [["10", "11"], ["-5"], ["99999999999999999999"], ["abc"], ["10, 12"]]
    )
    func badLengths(values: [String]) {
        let decision = decide(.whole, Self.head(200, values.map { ("Content-Length", $0) }), known: nil, part: 0)
        guard case .fail(let error) = decision else {
            Issue.record("expected fail, got \(decision)")
            return
        }
        #expect(error.code == .invalidResponse)
    }

    @Test func chunkedWinsOverContentLength() {
        let decision = decide(
            .whole, Self.head(200, [("Content-Length", "5"), ("Transfer-Encoding", "chunked")]), known: nil, part: 0)
        #expect(
            decision
                == .rewrite(
                    expectedLength: nil,
                    facts: RemoteFacts(totalLength: nil, validators: Validators(), isResumable: false)))
    }

    @Test func repeatedEqualLengthsAreFine() {
        let decision = decide(
            .whole, Self.head(200, [("Content-Length", "10"), ("Content-Length", "10")]), known: nil, part: 0)
        guard case .rewrite(let expected, _) = decision else {
            Issue.record("expected rewrite")
            return
        }
        #expect(expected == 10)
    }

    @Test(
        "statuses",
        arguments: [
            (404, false), (401, false), (403, false), (410, false), (500, true), (503, true), (429, true), (408, true),
        ]
    )
    func statuses(status: Int, retryable: Bool) {
        guard case .fail(let error) = decide(Self.head(status, [])) else {
            Issue.record("expected fail")
            return
        }
        #expect(error.isRetryable == retryable)
        #expect(error.message.contains("\(status)"))
    }

    @Test func retryAfterIsCarried() {
        guard case .fail(let error) = decide(Self.head(503, [("Retry-After", "7")])) else {
            Issue.record("expected fail")
            return
        }
        #expect(error.retryAfter == .seconds(7))
    }
}

@Suite("Download state machine")
struct DownloadStateMachineTests {
    static let legal: [(DownloadState, DownloadStateMachine.Event, DownloadState)] = [
        (.queued, .started, .running),
        (.queued, .pauseRequested, .paused),
        (.running, .pauseRequested, .paused),
        (.waitingForNetwork, .pauseRequested, .paused),
        (.paused, .resumeRequested, .queued),
        (.failed, .retryRequested, .queued),
        (.cancelled, .retryRequested, .queued),
        (.paused, .addedAgain, .queued),
        (.completed, .addedAgain, .queued),
        (.failed, .addedAgain, .queued),
        (.cancelled, .addedAgain, .queued),
        (.completed, .addedAgainPaused, .paused),
        (.failed, .addedAgainPaused, .paused),
        (.cancelled, .addedAgainPaused, .paused),
        (.queued, .cancelRequested, .cancelled),
        (.running, .cancelRequested, .cancelled),
        (.paused, .cancelRequested, .cancelled),
        (.waitingForNetwork, .cancelRequested, .cancelled),
        (.failed, .cancelRequested, .cancelled),
        (.running, .networkLost, .waitingForNetwork),
        (.waitingForNetwork, .networkReturned, .running),
        (.running, .finished, .completed),
        (.running, .failedPermanently, .failed),
        (.waitingForNetwork, .failedPermanently, .failed),
        (.queued, .failedPermanently, .failed),
        (.running, .interruptedByExit, .queued),
        (.waitingForNetwork, .interruptedByExit, .queued),
    ]

    @Test func everyLegalTransition() throws {
        for (from, event, to) in Self.legal {
            var machine = DownloadStateMachine(state: from)
            #expect(try machine.apply(event) == to, "\(from) --\(event)--> \(to)")
        }
    }

    @Test func everyOtherTransitionIsRejected() {
        for state in DownloadState.allCases {
            for event in DownloadStateMachine.Event.allCases
            where !Self.legal.contains(where: { $0.0 == state && $0.1 == event }) {
                var machine = DownloadStateMachine(state: state)
                #expect(throws: DownloadError.self, "\(state) --\(event)") { try machine.apply(event) }
                #expect(machine.state == state)
            }
        }
    }

    @Test func resumingACompletedDownloadNamesTheProblem() {
        var machine = DownloadStateMachine(state: .completed)
        do {
            _ = try machine.apply(.resumeRequested)
            Issue.record("expected an error")
        } catch {
            #expect(error.code == .illegalTransition)
            #expect(error.message == "cannot resume a download that is completed")
        }
        var failed = DownloadStateMachine(state: .failed)
        #expect(throws: DownloadError(.illegalTransition, "cannot resume a download that is failed; use retry")) {
            try failed.apply(.resumeRequested)
        }
    }
}
