import AsyncHTTPClient
import Foundation
import Haul
import HaulAPI
import HaulServer
import HaulTesting
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import HaulWire

/// One server-sent event as it arrived.
struct ReceivedEvent: Equatable {
    var id: String?
    var name: String?
    var data: String
    var isComment: Bool
}

/// Reads `GET /api/v1/events` over a real connection, from after `lastEventID`, until `keepGoing` says stop.
func readEvents(
    port: Int, lastEventID: String?, query: String = "", headers: [(String, String)] = [],
    keepGoing: (ReceivedEvent) async throws -> Bool
) async throws {
    var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/api/v1/events\(query)")
    request.headers.add(name: "Authorization", value: "Bearer \(ServerHarness.token)")
    if let lastEventID { request.headers.add(name: "Last-Event-ID", value: lastEventID) }
    for (name, value) in headers { request.headers.add(name: name, value: value) }
    let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
    #expect(response.status == .ok)
    #expect(response.headers.first(name: "content-type")?.hasPrefix("text/event-stream") == true)
    var pending = ""
    for try await chunk in response.body {
        pending += String(buffer: chunk)
        while let end = pending.range(of: "\n\n") {
            let block = pending[..<end.lowerBound]
            pending = String(pending[end.upperBound...])
            var event = ReceivedEvent(id: nil, name: nil, data: "", isComment: false)
            for line in block.split(separator: "\n") {
                if line.hasPrefix(":") { event.isComment = true }
                if line.hasPrefix("id: ") { event.id = String(line.dropFirst(4)) }
                if line.hasPrefix("event: ") { event.name = String(line.dropFirst(7)) }
                if line.hasPrefix("data: ") { event.data += line.dropFirst(6) }
            }
            if block.hasPrefix("retry:") { continue }
            if !(try await keepGoing(event)) { return }
        }
    }
}

@Suite("The event stream", .serialized, .timeLimit(.minutes(2)), .teardowns)
struct EventStreamTests {
    @Test("reconnecting with Last-Event-ID at random points of a busy run: no event missed, none twice")
    func reconnects() async throws {
        let h = try await ServerHarness.make { configuration in
            configuration.engine.progressInterval = .milliseconds(20)
            configuration.maxConcurrentDownloads = 8
        }
        let file = testBytes(400_000, seed: 4)
        for index in 0..<8 { h.server.serve("/\(index).bin", .init(body: file, bytesPerSecond: 400_000)) }
        try await h.application().test(.live) { client in
            let port = try #require(client.port)
            var ids: [EventID] = []
            var names: [String] = []
            var completed = Set<String>()
            var lastID: String?
            var connections = 0
            var generator = SystemRandomNumberGenerator()
            while completed.count < 8 {
                connections += 1
                let stopAfter = Int.random(in: 1...8, using: &generator)
                var read = 0
                try await readEvents(port: port, lastEventID: lastID) { event in
                    guard !event.isComment, let text = event.id, let id = EventID(text), let name = event.name else {
                        return true
                    }
                    ids.append(id)
                    names.append(name)
                    lastID = text
                    if name == "changed", event.data.contains(#""state":"completed""#),
                        let download = try? apiDecoder.decode(
                            Components.Schemas.Download.self, from: Data(event.data.utf8))
                    {
                        completed.insert(download.id)
                    }
                    read += 1
                    if connections == 1 && read == 1 {
                        // The first event of the first connection is the snapshot; now add the downloads.
                        #expect(name == "snapshot")
                        let items = (0..<8).map { index in
                            let url = h.server.url("/\(index).bin")
                            return #"{"url": "\#(url)"}"#
                        }
                        let added = try await client.post("/api/v1/downloads", "[" + items.joined(separator: ",") + "]")
                        #expect(added.status == .ok)
                    }
                    return read < stopAfter && completed.count < 8
                }
            }
            #expect(connections > 3, "the run should be cut several times")
            #expect(names.dropFirst().allSatisfy { $0 != "snapshot" }, "every reconnect was replayed")
            // The ids of all connections together count up one by one from the snapshot's: no gap, no repeat.
            #expect(ids.count > 40)
            let sequences = ids.map(\.sequence)
            #expect(sequences == Array(sequences[0]..<(sequences[0] + UInt64(sequences.count))))
            #expect(Set(ids.map(\.run)).count == 1)
            for index in 0..<8 { #expect(FileManager.default.contents(atPath: h.path("\(index).bin")) == Data(file)) }
        }
    }

    @Test("an id older than the replay window gets a fresh snapshot; a garbled one too")
    func staleID() async throws {
        let h = try await ServerHarness.make { $0.replayCapacity = 20 }
        try await h.application().test(.live) { client in
            let port = try #require(client.port)
            let items = (0..<30).map { #"{"url": "http://example.com/\#($0)", "paused": true}"# }
            _ = try await client.post("/api/v1/downloads", "[" + items.joined(separator: ",") + "]")
            let newest = h.manager.lastEventID
            #expect(newest.sequence == 30)
            for stale in [EventID(run: newest.run, sequence: 2).description, "garbage", "\(newest.run - 1)-5"] {
                var first: ReceivedEvent?
                try await readEvents(port: port, lastEventID: stale) { event in
                    first = event
                    return false
                }
                #expect(first?.name == "snapshot", "\(stale)")
                #expect(first?.id == newest.description)
                let snapshot = try apiDecoder.decode(
                    Components.Schemas.EventSnapshot.self, from: Data((first?.data ?? "").utf8))
                #expect(snapshot.downloads.count == 30)
            }
            // Within the window: exactly what followed.
            var replayed: [String] = []
            try await readEvents(port: port, lastEventID: EventID(run: newest.run, sequence: 25).description) { event in
                replayed.append(event.id ?? "")
                return replayed.count < 5
            }
            #expect(replayed == (26...30).map { EventID(run: newest.run, sequence: $0).description })
        }
    }

    @Test("?download=ID streams one download only; an unknown id is a 404; heartbeats are comment lines")
    func filterAndHeartbeat() async throws {
        let h = try await ServerHarness.make()
        let runner = Task { try await h.manager.run(heartbeatEvery: 1) }
        defer { runner.cancel() }
        try await h.application().test(.live) { client in
            let port = try #require(client.port)
            let a = try await client.add(h, "/a", extra: #", "paused": true"#)
            let b = try await client.add(h, "/b", extra: #", "paused": true"#)
            #expect(try await client.get("/api/v1/events?download=nope").status == .notFound)
            var seen: [ReceivedEvent] = []
            try await readEvents(port: port, lastEventID: nil, query: "?download=\(b.id)") { event in
                seen.append(event)
                if seen.count == 1 {
                    _ = try await client.post("/api/v1/downloads/\(a.id)/move", #"{"to": "top"}"#)
                    _ = try await client.post("/api/v1/downloads/\(b.id)/move", #"{"to": "top"}"#)
                }
                // Until a heartbeat after the change (one may come between the snapshot and the change on a busy
                // machine).
                return !(event.isComment && seen.contains { $0.name == "changed" })
            }
            #expect(seen.first?.name == "snapshot")
            let snapshot = try apiDecoder.decode(
                Components.Schemas.EventSnapshot.self, from: Data((seen.first?.data ?? "").utf8))
            #expect(snapshot.downloads.map(\.id) == [b.id])
            let changes = seen.filter { $0.name == "changed" }
            #expect(changes.count == 1 && changes[0].data.contains(b.id) && !changes[0].data.contains(a.id))
            #expect(seen.last?.isComment == true, "a heartbeat came")
        }
    }

    @Test("?state= holds only the downloads in those states in the snapshot; the events after it are every download's")
    func stateFilter() async throws {
        let h = try await ServerHarness.make()
        try await h.application().test(.live) { client in
            let port = try #require(client.port)
            let a = try await client.add(h, "/a", extra: #", "paused": true"#)
            let b = try await client.add(h, "/b", extra: #", "paused": true"#)
            for bad in ["done", "queued,,running"] {
                #expect(try await client.get("/api/v1/events?state=\(bad)").status == .badRequest, "\(bad)")
            }
            var seen: [ReceivedEvent] = []
            try await readEvents(port: port, lastEventID: nil, query: "?state=queued,running,waitingForNetwork") {
                event in
                guard !event.isComment else { return true }
                seen.append(event)
                if seen.count == 1 { _ = try await client.post("/api/v1/downloads/\(a.id)/move", #"{"to": "bottom"}"#) }
                return seen.count < 2
            }
            #expect(seen.map(\.name) == ["snapshot", "changed"])
            let snapshot = try apiDecoder.decode(
                Components.Schemas.EventSnapshot.self, from: Data((seen.first?.data ?? "").utf8))
            #expect(snapshot.downloads.isEmpty)
            #expect(seen.last?.data.contains(a.id) == true)
            for (query, expected) in [
                ("?state=paused", [b.id, a.id]), ("?state=paused&download=\(b.id)", [b.id]),
                ("?state=queued&download=\(b.id)", []),
            ] {
                var first: ReceivedEvent?
                try await readEvents(port: port, lastEventID: nil, query: query) { event in
                    first = event
                    return false
                }
                let held = try apiDecoder.decode(
                    Components.Schemas.EventSnapshot.self, from: Data((first?.data ?? "").utf8))
                #expect(held.downloads.map(\.id) == expected, "\(query)")
            }
        }
    }

    @Test("while a download runs, a stats event comes about once a second with the speed and the counts")
    func stats() async throws {
        // The real clock: the speed is measured over time.
        let h = try await ServerHarness.make { $0.clock = ContinuousClock() }
        h.server.serve("/slow", .init(body: testBytes(2_000_000, seed: 6), bytesPerSecond: 400_000))
        let runner = Task { try await h.manager.run(heartbeatEvery: 1000) }
        defer { runner.cancel() }
        try await h.application().test(.live) { client in
            let port = try #require(client.port)
            _ = try await client.add(h, "/slow")
            var stats: Components.Schemas.Stats?
            try await readEvents(port: port, lastEventID: nil) { event in
                guard event.name == "stats" else { return true }
                stats = try apiDecoder.decode(Components.Schemas.Stats.self, from: Data(event.data.utf8))
                // The first may come before the first progress of the download has a speed.
                return (stats?.bytesPerSecond ?? 0) == 0
            }
            #expect(stats?.counts.running == 1)
            #expect((stats?.bytesPerSecond ?? 0) > 0)
        }
    }

    @Test("/speed holds a sample for each second run: the total and the running download's track, aligned")
    func speedSamples() async throws {
        let h = try await ServerHarness.make { $0.clock = ContinuousClock() }
        h.server.serve("/slow", .init(body: testBytes(2_000_000, seed: 7), bytesPerSecond: 400_000))
        let runner = Task { try await h.manager.run(heartbeatEvery: 1000) }
        defer { runner.cancel() }
        try await h.application().test(.live) { client in
            let port = try #require(client.port)
            let added = try await client.add(h, "/slow")
            // A stats event with a speed comes after the second's sample is recorded.
            try await readEvents(port: port, lastEventID: nil) { event in
                guard event.name == "stats" else { return true }
                let stats = try apiDecoder.decode(Components.Schemas.Stats.self, from: Data(event.data.utf8))
                return stats.bytesPerSecond == 0
            }
            let all = try body(Components.Schemas.SpeedSamples.self, try await client.get("/api/v1/speed"))
            #expect(all.intervalSeconds == 1 && all.end != nil)
            #expect(!all.total.isEmpty && (all.total.last ?? 0) > 0, "\(all.total)")
            let track = try #require(all.downloads.first { $0.id == added.id })
            #expect(track.offset + track.samples.count == all.total.count, "the running download's track ends now")
            #expect(track.samples.last == all.total.last, "the only running download is the total")
            let one = try body(
                Components.Schemas.SpeedSamples.self, try await client.get("/api/v1/speed?download=\(added.id)"))
            #expect(one.downloads.map(\.id) == [added.id])
            let other = try body(Components.Schemas.SpeedSamples.self, try await client.get("/api/v1/speed?download=x"))
            #expect(other.downloads.isEmpty && !other.total.isEmpty)
        }
    }
}
