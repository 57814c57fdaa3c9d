import Testing

@testable import Haul

@Suite("The runner's inbox")
struct RunnerInboxTests {
    /// The connection a `waitEnded` event names, nil for any other event.
    static func connection(_ event: DownloadRunner.Event?) -> Int? {
        if case .waitEnded(let id, _) = event { id } else { nil }
    }

    @Test("events come out in the order they went in")
    func order() async {
        let inbox = RunnerInbox()
        for id in 1...5 { #expect(inbox.yield(.waitEnded(id, 0))) }
        var seen: [Int?] = []
        for _ in 1...5 { seen.append(Self.connection(await inbox.next())) }
        #expect(seen == [1, 2, 3, 4, 5])
    }

    @Test("after the finish: what was queued is still handed out, then nil; later events are refused")
    func finish() async {
        let inbox = RunnerInbox()
        inbox.yield(.waitEnded(7, 0))
        inbox.finish()
        #expect(!inbox.yield(.waitEnded(8, 0)))
        #expect(Self.connection(await inbox.next()) == 7)
        #expect(await inbox.next() == nil)
        #expect(await inbox.next() == nil)
    }

    @Test("a waiting loop is handed an event sent from another task, and the finish")
    func waiting() async {
        let inbox = RunnerInbox()
        let loop = Task { () -> [Int?] in
            var seen: [Int?] = []
            while let event = await inbox.next() { seen.append(Self.connection(event)) }
            return seen
        }
        let sender = Task {
            for id in 1...100 { inbox.yield(.waitEnded(id, 0)) }
            inbox.finish()
        }
        await sender.value
        #expect(await loop.value == (1...100).map { Optional($0) })
    }

    @Test("a cancelled loop finishes the inbox: its wait ends with nil, and senders are refused")
    func cancellation() async {
        let inbox = RunnerInbox()
        let loop = Task { await inbox.next() }
        loop.cancel()
        #expect(await loop.value == nil)
        #expect(!inbox.yield(.waitEnded(1, 0)))
    }
}
