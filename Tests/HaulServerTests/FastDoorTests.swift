import Foundation
import HTTPTypes
import Haul
import HaulAPI
import HaulTesting
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import HaulServer
@testable import HaulWire

#if canImport(Glibc)
    import Glibc
#endif

@Suite("The network door's fast path: the router's answers, in order", .teardowns)
struct FastDoorTests {
    /// The daemon's network application on a free loopback port, with the fast path or without.
    static func application(_ h: ServerHarness, fast: FastDoor?) throws -> some ApplicationProtocol {
        try buildApplication(
            router: try buildRouter(manager: h.manager, configuration: h.configuration, door: .network),
            address: .hostname("127.0.0.1", port: 0), fastDoor: fast, logger: Logger(label: "haul-test"))
    }

    /// What a client sees of an answer, with the values that differ between two adds of different URLs (and the
    /// clock) taken out.
    struct Seen: Equatable, CustomStringConvertible {
        var status: Int
        var contentType: String?
        var location: Bool
        var server: String?
        var hasDate: Bool
        var body: String
        /// The body read as JSON, where it is (the generated route's encoder writes an object's keys in any order).
        var json: NSObject?

        static func == (lhs: Seen, rhs: Seen) -> Bool {
            lhs.status == rhs.status && lhs.contentType == rhs.contentType && lhs.location == rhs.location
                && lhs.server == rhs.server && lhs.hasDate == rhs.hasDate
                && (lhs.json != nil && rhs.json != nil ? lhs.json == rhs.json : lhs.body == rhs.body)
        }

        init(_ response: TestResponse, replacing: [(String, String)] = []) {
            status = response.status.code
            contentType = response.headers[.contentType]
            location = response.headers[.location] != nil
            server = response.headers[.server]
            hasDate = response.headers[.date] != nil
            var text = String(buffer: response.body)
            for (from, to) in replacing { text = text.replacingOccurrences(of: from, with: to) }
            body = text.replacing(/"createdAt":"[^"]*"/, with: "\"createdAt\":\"…\"")
                .replacing(/"id":"[^"]*"/, with: "\"id\":\"…\"")
                .replacing(/"ids":\["[^\]]*"\]/, with: "\"ids\":[…]")
                .replacing(/"position":[0-9]+/, with: "\"position\":0")
            json = (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? NSObject
        }

        var description: String { "\(status) \(contentType ?? "-") location=\(location) \(body)" }
    }

    @Test("every request the fast path takes or passes gets the router's answer")
    func sameAnswers() async throws {
        let h = try await ServerHarness.make()
        let fast = FastDoor(manager: h.manager, configuration: h.configuration)
        try await Self.application(h, fast: fast).test(.live) { quick in
            try await Self.application(h, fast: nil).test(.live) { plain in
                let existing = try await quick.add(h, "/existing.bin", extra: #", "paused": true"#)
                // One running download holds the only slot, so the existing one, added again unpaused, stays queued
                // through both doors' answers: free to start, it could start (and end) between them.
                try await h.manager.setMaxConcurrentDownloads(1)
                h.server.serve(
                    "/slot", .init(body: [UInt8](repeating: 1, count: 100_000)) { _, _ in .hold(afterBytes: 1) })
                let (stalls, stalled) = AsyncStream<Void>.makeStream()
                h.server.onStall { _ in stalled.yield() }
                _ = try await quick.add(h, "/slot")
                var waits = stalls.makeAsyncIterator()
                _ = await waits.next()
                defer { h.server.release() }
                let token = "Bearer \(ServerHarness.token)"
                var minimal = authorized
                minimal[.prefer] = "return=minimal"
                // (method, path, headers, body, taken by the fast path)
                let cases: [(HTTPRequest.Method, String, HTTPFields, String?, Bool)] = [
                    (.get, "/api/v1/downloads/\(existing.id)", [.authorization: token], nil, true),
                    (.get, "/api/v1/downloads/\(existing.id)", [.authorization: token, .accept: "*/*"], nil, true),
                    (.get, "/api/v1/downloads/no-such-id", [.authorization: token], nil, true),
                    (.get, "/api/v1/downloads/\(existing.id)", [:], nil, false),
                    (.get, "/api/v1/downloads/\(existing.id)", [.authorization: "Bearer wrong"], nil, false),
                    (
                        .get, "/api/v1/downloads/\(existing.id)", [.authorization: token, .accept: "text/html"], nil,
                        false
                    ),
                    (.get, "/api/v1/downloads/\(existing.id)?x=1", [.authorization: token], nil, false),
                    (.get, "/api/v1/downloads", [.authorization: token], nil, false),
                    (
                        .post, "/api/v1/downloads", authorized,
                        #"{"url": "\#(h.server.url("/URL"))", "paused": true, "priority": "high"}"#, true
                    ),
                    (.post, "/api/v1/downloads", authorized, #"{"url": "\#(h.server.url("/existing.bin"))"}"#, true),
                    (
                        .post, "/api/v1/downloads", minimal,
                        #"[{"url": "\#(h.server.url("/URL-min"))", "paused": true}]"#, true
                    ),
                    (.post, "/api/v1/downloads", minimal, #"{"url": "\#(h.server.url("/existing.bin"))"}"#, true),
                    (.post, "/api/v1/downloads", authorized, #"{"url": "ftp:/nothing"}"#, true),
                    (
                        .post, "/api/v1/downloads", authorized,
                        #"{"url": "\#(h.server.url("/a"))", "connections": 99}"#, true
                    ),
                    (
                        .post, "/api/v1/downloads", authorized, #"{"url": "\#(h.server.url("/b"))", "color": "red"}"#,
                        false
                    ),
                    (.post, "/api/v1/downloads", authorized, #"{"url": null}"#, false),
                    (.post, "/api/v1/downloads", authorized, #"{"url": "#, false),
                    (
                        .post, "/api/v1/downloads", authorized,
                        #"[{"url": "\#(h.server.url("/URL-list"))", "paused": true}]"#, true
                    ),
                    (
                        .post, "/api/v1/downloads", [.authorization: token, .contentType: "text/plain"],
                        #"{"url": "\#(h.server.url("/c"))"}"#, false
                    ),
                    (
                        .post, "/api/v1/downloads",
                        [.authorization: token, .contentType: "application/json", .origin: "http://evil.example"],
                        #"{"url": "\#(h.server.url("/d"))"}"#, false
                    ),
                    (
                        .post, "/api/v1/downloads", [.contentType: "application/json"],
                        #"{"url": "\#(h.server.url("/e"))"}"#, false
                    ),
                    // A command is passed to the router; one for no download answers both doors alike.
                    (.post, "/api/v1/downloads/no-such-id/pause", authorized, "", false),
                ]
                for (index, (method, path, headers, text, taken)) in cases.enumerated() {
                    // Each server adds its own URL (`URL-fast`, `URL-plain`), so both adds are new.
                    let before = fast.answered.count.load(ordering: .relaxed)
                    let quickAnswer = try await quick.execute(
                        uri: path, method: method, headers: headers,
                        body: text.map { ByteBuffer(string: $0.replacingOccurrences(of: "/URL", with: "/URL-fast")) })
                    let plainAnswer = try await plain.execute(
                        uri: path, method: method, headers: headers,
                        body: text.map { ByteBuffer(string: $0.replacingOccurrences(of: "/URL", with: "/URL-plain")) })
                    let quickSeen = Seen(quickAnswer, replacing: [("URL-fast", "URL-…")])
                    let plainSeen = Seen(plainAnswer, replacing: [("URL-plain", "URL-…")])
                    #expect(quickSeen == plainSeen, "case \(index): \(method) \(path)")
                    #expect(quickSeen.server == "haul" && quickSeen.hasDate, "case \(index)")
                    let took = fast.answered.count.load(ordering: .relaxed) - before
                    #expect(took == (taken ? 1 : 0), "case \(index): \(method) \(path) \(quickSeen)")
                }
            }
        }
    }

    @Test("requests sent together are answered in order, whichever path answers each")
    func pipelined() async throws {
        let h = try await ServerHarness.make()
        let fast = FastDoor(manager: h.manager, configuration: h.configuration)
        try await Self.application(h, fast: fast).test(.live) { client in
            let existing = try await client.add(h, "/one.bin", extra: #", "paused": true"#)
            let before = fast.answered.count.load(ordering: .relaxed)
            let port = try #require(client.port)
            let auth = "Authorization: Bearer \(ServerHarness.token)\r\nHost: 127.0.0.1:\(port)\r\n"
            let add = #"{"url": "\#(h.server.url("/two.bin"))", "paused": true}"#
            // Fast, fast (unknown id), fast add, router (stats), router (no token), fast read.
            let requests = [
                "GET /api/v1/downloads/\(existing.id) HTTP/1.1\r\n\(auth)\r\n",
                "GET /api/v1/downloads/unknown HTTP/1.1\r\n\(auth)\r\n",
                "POST /api/v1/downloads HTTP/1.1\r\n\(auth)Content-Type: application/json\r\n"
                    + "Content-Length: \(add.utf8.count)\r\n\r\n\(add)",
                "GET /api/v1/stats HTTP/1.1\r\n\(auth)\r\n",
                "GET /api/v1/downloads/\(existing.id) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n",
                "GET /api/v1/downloads/\(existing.id) HTTP/1.1\r\n\(auth)\r\n",
                // The router's to honour: the connection ends after its answer.
                "GET /api/v1/downloads/\(existing.id) HTTP/1.1\r\n\(auth)Connection: close\r\n\r\n",
            ]
            let answers = try await onOwnThread {
                try Self.exchange(port: port, sending: requests.joined(), answers: requests.count, thenClosed: true)
            }
            #expect(answers.map(\.status) == [200, 404, 201, 200, 401, 200, 200])
            #expect(answers[0].body.contains(#""id":"\#(existing.id)""#))
            #expect(answers[1].body.contains("notFound"))
            #expect(answers[2].body.contains("two.bin"))
            #expect(answers[3].body.contains("bytesPerSecond"))
            #expect(answers[5].body == answers[0].body && answers[6].body == answers[0].body)
            #expect(fast.answered.count.load(ordering: .relaxed) - before == 4)
        }
    }

    @Test(
        "a first request that is not HTTP (a TLS handshake at a plain daemon, garbage) is answered 400 and the connection closed; after a request, the server's own answer"
    )
    func unparsable() async throws {
        let h = try await ServerHarness.make()
        let fast = FastDoor(manager: h.manager, configuration: h.configuration)
        try await Self.application(h, fast: fast).test(.live) { client in
            let port = try #require(client.port)
            // The start of a TLS ClientHello: a handshake record, TLS 1.0, 512 bytes.
            let hello =
                "\u{16}\u{03}\u{01}\u{02}\u{00}\u{01}\u{00}\u{01}\u{FC}\u{03}\u{03}"
                + String(repeating: "a", count: 100)
            for text in [hello, "GARBAGE / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\nHost\r\n\r\n"] {
                let answers = try await onOwnThread {
                    try Self.exchange(port: port, sending: text, answers: 1, thenClosed: true)
                }
                #expect(answers.map(\.status) == [400], "\(text.prefix(20).debugDescription)")
            }
            let answers = try await onOwnThread {
                try Self.exchange(
                    port: port,
                    sending: "GET /api/v1/stats HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\nGARBAGE / HTTP/1.1\r\n\r\n",
                    answers: 2, thenClosed: true)
            }
            #expect(answers.map(\.status) == [401, 400])
        }
    }

    /// Sends `text` on a new connection to `port` and reads `answers` answers (each with a Content-Length); with
    /// `thenClosed`, expects the server to end the connection after them. It blocks on its socket, so a test runs it
    /// `onOwnThread` and it throws what went wrong.
    static func exchange(port: Int, sending text: String, answers count: Int, thenClosed: Bool = false) throws -> [(
        status: Int, body: String
    )] {
        // Close-on-exec: a test running beside this one may start a process, which must not inherit the socket.
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard socket >= 0 else { throw ExchangeFailure("no socket: errno \(errno)") }
        defer { close(socket) }
        let connected = withLoopbackAddress(port: port) { connect(socket, $0, $1) }
        guard connected == 0 else { throw ExchangeFailure("no connection to port \(port): errno \(errno)") }
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let wrote = bytes[sent...].withUnsafeBytes { send(socket, $0.baseAddress, $0.count, 0) }
            guard wrote > 0 else { throw ExchangeFailure("sending failed after \(sent) bytes: errno \(errno)") }
            sent += wrote
        }
        var received: [UInt8] = []
        var answers: [(Int, String)] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while answers.count < count {
            if let (answer, used) = parse(received) {
                answers.append(answer)
                received.removeFirst(used)
                continue
            }
            let got = buffer.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            guard got > 0 else {
                let why = "recv \(got), errno \(errno)"
                throw ExchangeFailure("the connection ended after \(answers.count) answers (\(why))")
            }
            received += buffer[..<got]
        }
        if thenClosed {
            let got = buffer.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            guard got == 0, received.isEmpty else {
                throw ExchangeFailure("the connection stayed open (recv \(got), \(received.count) bytes left over)")
            }
        }
        return answers
    }

    struct ExchangeFailure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// One whole answer at the start of `bytes`, and how many bytes it took.
    static func parse(_ bytes: [UInt8]) -> ((Int, String), Int)? {
        let separator = Array("\r\n\r\n".utf8)
        guard let end = bytes.indices.first(where: { bytes[$0...].starts(with: separator) }) else { return nil }
        let head = String(decoding: bytes[..<end], as: UTF8.self)
        let lines = head.split(separator: "\r\n")
        guard let status = lines.first?.split(separator: " ").dropFirst().first.flatMap({ Int($0) }),
            let length = lines.dropFirst().first(where: { $0.lowercased().hasPrefix("content-length:") })
                .flatMap({ Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) })
        else { return nil }
        let start = end + separator.count
        guard bytes.count >= start + length else { return nil }
        return ((status, String(decoding: bytes[start..<start + length], as: UTF8.self)), start + length)
    }
}
