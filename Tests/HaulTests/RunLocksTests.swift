import Foundation
import HaulCore
import HaulTesting
import Testing

@testable import Haul

/// Two processes running downloads on one state folder's store (`haul get` run twice on overlapping lists), as two
/// managers on it: the locks of `run.lock` are those of an open file description, so two managers of one process
/// hold them as two processes would.
@Suite("Downloads another process runs", .timeLimit(.minutes(1)), .teardowns)
struct RunLocksTests {
    let body = testBytes(100_000)

    /// What a `haul get` that is not alone on its state folder runs (`DownloadManager.runningHere`).
    func manager(_ h: Harness, jobs: Int) throws -> DownloadManager {
        var configuration = DownloadManager.Configuration(stateDirectory: h.stateDirectory)
        configuration.startsStoredDownloads = false
        configuration.recoversInterruptedDownloads = false
        configuration.maxConcurrentDownloads = jobs
        return try DownloadManager(configuration: configuration)
    }

    @Test(
        "a download's lock is one process's at a time, dropped with it; one that started alone learns that another came, even one gone again"
    )
    func locks() async throws {
        let h = try await Harness.make()
        do {
            let first = try #require(RunLocks(state: h.stateDirectory))
            #expect(!first.othersMayHaveRun)
            do {
                let second = try #require(RunLocks(state: h.stateDirectory))
                #expect(second.othersMayHaveRun && first.othersMayHaveRun)
                // Taken again by its holder; refused to the other.
                #expect(first.hold("a") && first.hold("a"))
                #expect(!second.hold("a") && second.hold("b"))
                first.release("a")
                #expect(second.hold("a"))
            }
            // The second gone (its descriptor closed, as when its process ends): its locks went with it, and the first
            // still knows that it came.
            #expect(first.hold("a") && first.hold("b"))
            #expect(first.othersMayHaveRun)
        }
        // Every one gone: one that starts now is alone, and the rows are as it reads them.
        let later = try #require(RunLocks(state: h.stateDirectory))
        #expect(!later.othersMayHaveRun)
    }

    @Test(
        "a folder download another process runs, or ran since this one read its row, is not fetched again: it ends here as already complete, under its one name"
    )
    func overlappingLists() async throws {
        let h = try await Harness.make(jumpsPastStalls: false)
        let names = (0..<4).map { "\($0).bin" }
        // The first answer of 0 and of 1 holds its body back: the first is the first manager's, the second the
        // second's, each surely running while the other comes to it.
        for name in names.prefix(2) {
            h.server.serve("/x/\(name)", .init(body: body) { index, _ in index == 0 ? .hold(afterBytes: 0) : nil })
        }
        for name in names.dropFirst(2) { h.server.serve("/x/\(name)", .init(body: body)) }
        let (stalls, stalled) = AsyncStream<Void>.makeStream()
        h.server.onStall { _ in stalled.yield() }
        var waits = stalls.makeAsyncIterator()

        // The first runs one at a time: 0 (held), then the rest in turn.
        let first = try manager(h, jobs: 1)
        var firstIDs: [DownloadID] = []
        for name in names { firstIDs.append(try await first.add(h.server.url("/x/\(name)"), to: .directory(h.folder))) }
        _ = await waits.next()
        // The second is asked for 1, 2 and 3, which the first has queued: it runs them (1 held).
        let second = try manager(h, jobs: 4)
        var secondIDs: [DownloadID] = []
        for name in names.dropFirst() {
            secondIDs.append(try await second.add(h.server.url("/x/\(name)"), to: .directory(h.folder)))
        }
        #expect(secondIDs == Array(firstIDs.dropFirst()))
        _ = await waits.next()
        let secondResults = try await (second.result(of: secondIDs[1]), second.result(of: secondIDs[2]))
        #expect(!secondResults.0.wasAlreadyComplete && !secondResults.1.wasAlreadyComplete)
        h.server.release()
        // The first finishes 0, then comes to 1 (the second's, running or ended), 2 and 3 (ended since it read
        // their rows): none is fetched again.
        var firstResults: [DownloadResult] = []
        for id in firstIDs { firstResults.append(try await first.result(of: id)) }
        let secondHeld = try await second.result(of: secondIDs[0])
        #expect(firstResults.map(\.wasAlreadyComplete) == [false, true, true, true])
        #expect(!secondHeld.wasAlreadyComplete)
        #expect(firstResults.map(\.path) == names.map(h.path))
        for name in names {
            #expect(h.server.requests(to: "/x/\(name)").count == 1, "\(name)")
            #expect(h.contents(name) == body, "\(name)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: h.folder).sorted() == names)
        await first.shutdown()
        await second.shutdown()
    }
}
