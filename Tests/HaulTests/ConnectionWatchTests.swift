import Foundation
import HaulCore
import HaulTesting
import NIOCore
import NIOEmbedded
import NIOHTTP1
import Testing

@testable import Haul

/// The watch that holds a connection's slot until AsyncHTTPClient is done with a connection whose answer the engine
/// left before its end.
@Suite("Watching the connection of a request", .timeLimit(.minutes(1)), .teardowns)
struct ConnectionWatchTests {
    /// A request head carrying `token` in the watch's header.
    static func head(token: UInt64) -> HTTPClientRequestPart {
        var headers = HTTPHeaders([("Host", "example.com"), ("Range", "bytes=0-")])
        headers.add(name: ConnectionWatch.header, value: String(token))
        return .head(HTTPRequestHead(version: .http1_1, method: .GET, uri: "/f", headers: headers))
    }

    @Test("the token leaves the request in the pipeline; the request is in flight until its answer ends")
    func answerEnds() async throws {
        let watch = ConnectionWatch()
        let channel = EmbeddedChannel(handler: ConnectionWatchHandler(watch: watch))
        let token = watch.token()
        #expect(!watch.isInFlight(token), "not sent yet")
        try channel.writeOutbound(Self.head(token: token))
        let sent = try #require(try channel.readOutbound(as: HTTPClientRequestPart.self))
        guard case .head(let head) = sent else { Issue.record("not a head: \(sent)"); return }
        #expect(head.headers[ConnectionWatch.header].isEmpty, "the token never leaves the process")
        #expect(head.headers["Range"] == ["bytes=0-"], "the request's own headers stay")
        #expect(watch.isInFlight(token))

        try channel.writeInbound(HTTPClientResponsePart.head(HTTPResponseHead(version: .http1_1, status: .ok)))
        try channel.writeInbound(HTTPClientResponsePart.body(ByteBuffer(string: "part")))
        #expect(watch.isInFlight(token), "the answer has not ended")
        try channel.writeInbound(HTTPClientResponsePart.end(nil))
        #expect(!watch.isInFlight(token))
        await watch.settled(token)
        _ = try channel.finish()
    }

    @Test("a request left before its end is in flight until its connection closes, which lets its waiters go")
    func connectionCloses() async throws {
        let watch = ConnectionWatch()
        let channel = EmbeddedChannel(handler: ConnectionWatchHandler(watch: watch))
        let token = watch.token()
        try channel.writeOutbound(Self.head(token: token))
        try channel.writeInbound(HTTPClientResponsePart.head(HTTPResponseHead(version: .http1_1, status: .ok)))
        let waits = (0..<2).map { _ in Task { await watch.settled(token) } }
        while watch.waiting(token) < 2 { await Task.yield() }
        #expect(watch.isInFlight(token))
        try await channel.close()
        for wait in waits { await wait.value }
        #expect(!watch.isInFlight(token) && watch.waiting(token) == 0)
        await watch.settled(token)
    }

    @Test("a request on a connection that carried another: the earlier one is settled when the next goes out")
    func keptAlive() throws {
        let watch = ConnectionWatch()
        let channel = EmbeddedChannel(handler: ConnectionWatchHandler(watch: watch))
        let (first, second) = (watch.token(), watch.token())
        try channel.writeOutbound(Self.head(token: first))
        try channel.writeOutbound(Self.head(token: second))
        #expect(!watch.isInFlight(first) && watch.isInFlight(second))
        _ = try channel.finish()
        #expect(!watch.isInFlight(second), "the connection closed")
    }

    @Test("a request through the live transport reaches the server without the token, and its answer settles")
    func liveTransport() async throws {
        let server = try await FaultServer.start()
        Teardowns.add { await server.stop() }
        server.serve("/f", .init(body: testBytes(4096)))
        let response = try await LiveTransport().send(
            TransportRequest(url: server.url("/f"), headers: [("Range", "bytes=0-")]))
        var received = 0
        for try await chunk in response.body { received += chunk.readableBytes }
        #expect(received == 4096)
        let settled = try #require(response.settled, "the live transport watches its requests")
        await settled()
        let request = try #require(server.requests(to: "/f").first)
        #expect(request.headers[ConnectionWatch.header.lowercased()] == nil, "\(request.headers)")
        #expect(request.range == "bytes=0-")
    }
}
