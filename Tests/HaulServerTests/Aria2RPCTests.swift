import Foundation
import Haul
import HaulAPI
import HaulCore
import HaulTesting
import Hummingbird
import HummingbirdTesting
import NIOCore
import Synchronization
import Testing

@testable import HaulServer
@testable import HaulWire

@Suite("aria2's JSON-RPC: the mapping of parameters and results", .timeLimit(.minutes(2)), .teardowns)
struct Aria2RPCTests {
    let bytes = testBytes(40_000, seed: 11)

    static func snapshot(
        _ state: DownloadState, received: Int64 = 0, total: Int64? = nil, segments: [Segment]? = nil,
        error: DownloadError? = nil
    ) -> DownloadSnapshot {
        DownloadSnapshot(
            id: DownloadID("3f2a9c1e-7b4d-4e8a-9c0f-1a2b3c4d5e6f"), url: "http://h/f.bin", path: "/d/f.bin",
            directory: "/d", state: state, priority: .normal, position: 1, receivedBytes: received, totalBytes: total,
            bytesPerSecond: 1000.4, secondsRemaining: nil, connections: 2, segments: segments, after: [], error: error,
            isResumable: true, createdAt: Date(timeIntervalSince1970: 0), completedAt: nil,
            options: DownloadOptions(maxConnectionsPerDownload: 3), rateLimit: 5000, origin: .api)
    }

    @Test(
        "states: aria2's status names, and the notification each change sends",
        arguments: [
            (nil, DownloadState.running, "active", "aria2.onDownloadStart"),
            (.queued, .running, "active", "aria2.onDownloadStart"),
            (.running, .waitingForNetwork, "active", nil),
            (.running, .paused, "paused", "aria2.onDownloadPause"),
            (.queued, .paused, "paused", "aria2.onDownloadPause"),
            (.paused, .queued, "waiting", nil),
            (.running, .completed, "complete", "aria2.onDownloadComplete"),
            (.running, .failed, "error", "aria2.onDownloadError"),
            (.running, .cancelled, "removed", "aria2.onDownloadStop"),
            (.paused, .cancelled, "removed", "aria2.onDownloadStop"),
        ] as [(DownloadState?, DownloadState, String, String?)])
    func states(old: DownloadState?, new: DownloadState, name: String, notification: String?) {
        #expect(Aria2Status.name(of: new) == name)
        #expect(Aria2Status.notification(from: old, to: new) == notification)
    }

    @Test(
        "errors: aria2's exit-status numbers",
        arguments: [
            (DownloadError.httpStatus(404), 3), (.httpStatus(401), 24), (.httpStatus(503), 29), (.httpStatus(500), 22),
            (DownloadError(.idleTimeout, "idle"), 2), (DownloadError(.connectionFailed, "refused"), 6),
            (DownloadError(.diskFull, "full"), 9), (DownloadError(.checksumMismatch, "sum"), 32),
            (DownloadError(.destinationExists, "there"), 13), (DownloadError(.tooManyRedirects, "loop"), 23),
            (DownloadError(.store, "store"), 1),
        ])
    func errorCodes(error: DownloadError, code: Int) {
        #expect(Aria2Status.errorCode(of: error) == code)
    }

    @Test("tellStatus: every value a string; keys filter; a failed one carries errorCode and errorMessage")
    func status() {
        let running = Aria2Status.status(of: Self.snapshot(.running, received: 3 << 20, total: 10 << 20))
        #expect(running.object?["gid"] == "3f2a9c1e7b4d4e8a")
        #expect(running.object?["status"] == "active")
        #expect(running.object?["completedLength"] == "3145728")
        #expect(running.object?["totalLength"] == "10485760")
        #expect(running.object?["downloadSpeed"] == "1000")
        #expect(running.object?["connections"] == "2")
        #expect(running.object?["numPieces"] == "10")
        #expect(running.object?["dir"] == "/d")
        #expect(running.object?["bitfield"] == "e000")
        #expect(running.object?["errorCode"] == nil)
        let file = running.object?["files"]?.array?.first?.object
        #expect(file?["path"] == "/d/f.bin" && file?["index"] == "1" && file?["selected"] == "true")
        #expect(file?["uris"] == [["uri": "http://h/f.bin", "status": "used"]])

        let filtered = Aria2Status.status(of: Self.snapshot(.queued), keys: ["gid", "status"])
        #expect(filtered == ["gid": "3f2a9c1e7b4d4e8a", "status": "waiting"])
        let failed = Aria2Status.status(of: Self.snapshot(.failed, error: .httpStatus(404)))
        #expect(failed.object?["errorCode"] == "3")
        #expect(failed.object?["errorMessage"]?.string?.contains("404") == true)
        #expect(failed.object?["downloadSpeed"] == "0")
        #expect(Aria2Status.status(of: Self.snapshot(.cancelled)).object?["errorCode"] == "31")
        #expect(Aria2Status.status(of: Self.snapshot(.completed)).object?["errorCode"] == "0")
    }

    @Test("gids: the random hex digits of an id; time-ordered ids of one millisecond get distinct gids")
    func gids() {
        // An id made before ids began with their time (version 4): its first 16 hex digits, as before.
        #expect(Aria2Status.gid(of: DownloadID("3f2a9c1e-7b4d-4e8a-9c0f-1a2b3c4d5e6f")) == "3f2a9c1e7b4d4e8a")
        // Version 7: the first 12 hex digits are the time, so the last 16 are taken.
        #expect(Aria2Status.gid(of: DownloadID("019ab3c4-5d6e-7f01-8a2b-3c4d5e6f7081")) == "8a2b3c4d5e6f7081")
        // Short ids: a hash's.
        #expect(Aria2Status.gid(of: DownloadID("s")).count == 16)
        // Ids of one millisecond whose first 16 hex digits are the same (time, version, the first random bits):
        // their gids differ, as the first 16 digits would not.
        let ids = [
            "019ab3c4-5d6e-7f01-8a2b-3c4d5e6f7081", "019ab3c4-5d6e-7f01-9c00-000000000001",
            "019ab3c4-5d6e-7f01-b7ff-ffffffffffff",
        ].map(DownloadID.init)
        let gids = ids.map(Aria2Status.gid(of:))
        #expect(Set(gids).count == 3 && gids.allSatisfy(Aria2Status.isGID), "\(gids)")
    }

    @Test("bitfield: a piece counts once every byte of it is held, across segments")
    func bitfield() {
        let segments = [
            Segment(start: 0, end: 4 << 20, offset: 2 << 20), Segment(start: 4 << 20, end: 9 << 20, offset: 9 << 20),
        ]
        // Pieces 0, 1 (first segment), 4 to 8 (second, the last piece short): 1100 1111 1000 0000.
        #expect(Aria2Status.bitfield(of: Self.snapshot(.running, total: 9 << 20 - 5, segments: segments)) == "cf80")
        #expect(Aria2Status.bitfield(of: Self.snapshot(.queued)) == nil)
        // A length within a piece of Int64.max: too many pieces to draw, and no overflow.
        #expect(Aria2Status.bitfield(of: Self.snapshot(.running, total: .max, segments: nil)) == nil)
    }

    @Test("getOption: the download's options as aria2 names them")
    func options() {
        var snapshot = Self.snapshot(.paused)
        snapshot.options.checksum = try? Checksum(parsing: "sha256=" + String(repeating: "ab", count: 32))
        let options = Aria2Status.options(of: snapshot).object
        #expect(options?["split"] == "3")
        #expect(options?["max-download-limit"] == "5000")
        #expect(options?["out"] == "f.bin")
        #expect(options?["dir"] == "/d")
        #expect(options?["checksum"] == .string("sha-256=" + String(repeating: "ab", count: 32)))
    }

    @Test("addUri options: aria2's names and sizes into the API's add; a bad value names the option")
    func addOptions() throws {
        let item = try Aria2Options.addDownload(
            uri: "http://h/f",
            options: [
                "dir": "sub", "out": "x.bin", "split": "8", "max-connection-per-server": "4",
                "max-download-limit": "100K", "min-split-size": "2M", "pause": "true",
                "header": ["X-One: 1", "Referer: http://r/", "Accept-Encoding: gzip, br", "range: bytes=0-"],
                "checksum": .string("sha-1=" + String(repeating: "0", count: 40)),
                "file-allocation": "none", "max-tries": "0", "http-user": "u", "http-passwd": "p",
                "check-certificate": "false",
            ])
        #expect(item.directory == "sub" && item.filename == "x.bin")
        #expect(item.connections == 4)
        #expect(item.limitRate == 102_400)
        #expect(item.minSplitSize == 2 << 20)
        #expect(item.paused == true)
        #expect(item.headers?.additionalProperties == ["X-One": "1", "Referer": "http://r/"])
        #expect(item.checksum == "sha1=" + String(repeating: "0", count: 40))
        #expect(item.retries == 1_000_000)
        #expect(item.credentials?.user == "u" && item.credentials?.password == "p")
        #expect(item.tls?.insecure == true)

        // `out` is a path relative to `dir`, as aria2 reads it: its folders go beneath the add's directory.
        for (options, directory, filename) in [
            (["out": "sub/y.bin"] as [String: JSONValue], "sub", "y.bin"),
            (["dir": "/d/", "out": "a/b/y.bin"], "/d/a/b", "y.bin"),
            (["dir": "/d", "out": "/y.bin"], "/d", "y.bin"),
            (["dir": "/d", "out": "a/../b/./y.bin"], "/d/a/../b/.", "y.bin"),
        ] {
            let placed = try Aria2Options.addDownload(uri: "http://h/f", options: options)
            #expect(placed.directory == directory && placed.filename == filename, "\(options)")
        }
        let bad: [([String: JSONValue], String)] = [
            (["out": "sub/"], "option 'out': 'sub/' ends with '/'"),
            (["dir": "/d", "out": "../../etc/x"], "option 'out': '../../etc/x' climbs above dir with '..'"),
            (["out": "a/../../x"], "option 'out': 'a/../../x' climbs above dir with '..'"),
            (["max-download-limit": "fast"], "option 'max-download-limit': 'fast' is not a size"),
            (["split": "0"], "option 'split': '0' is not a number from 1 to 16"),
            (["pause": "yes"], "option 'pause': 'yes' is not true or false"),
            (["checksum": "crc32=00"], "option 'checksum': 'crc32=00' is not ALGO=HEX"),
            (["checksum": "sha-256=ab"], "option 'checksum': 'sha-256=ab': a sha256 digest is 64 hex digits"),
            (["header": "no colon"], "option 'header': 'no colon' is not NAME: VALUE"),
            (["gid": "0123456789abcdef"], "Haul chooses the gid"),
            (["select-file": "1"], "option 'select-file' is not one Haul takes"),
            (["on-download-complete": "/bin/sh"], "option 'on-download-complete': programs to run are set only"),
            (["dir": ["a"]], "option 'dir' must be a string, not an array"),
        ]
        for (options, message) in bad {
            #expect(throws: Aria2Options.Failure.self) {
                try Aria2Options.addDownload(uri: "http://h/f", options: options)
            }
            do { _ = try Aria2Options.addDownload(uri: "http://h/f", options: options) } catch {
                #expect(error.message.contains(message), "\(error.message)")
            }
        }
        #expect(
            throws: Aria2Options.Failure(
                message:
                    "option 'on-download-error': programs to run are set only with haul serve --on-complete and --on-error or in its config file, never over RPC"
            )
        ) {
            try Aria2Options.globalChange(["on-download-error": "/tmp/x"])
        }
        #expect(
            try Aria2Options.change(["max-download-limit": "0", "split": "2"])
                == .init(rateLimit: .some(nil), connections: 2))
        #expect(
            try Aria2Options.globalChange(["max-concurrent-downloads": "7", "max-overall-download-limit": "1M"])
                == .init(maxConcurrentDownloads: 7, rateLimit: .some(1 << 20)))
        #expect(throws: Aria2Options.Failure.self) { try Aria2Options.globalChange(["dir": "/tmp"]) }
    }

    @Test(
        "tellWaiting/tellStopped windows: offset and num; a negative offset counts from the end, backwards",
        arguments: [
            (0, 2, [0, 1]), (3, 10, [3, 4]), (5, 1, []), (-1, 1, [4]), (-1, 3, [4, 3, 2]), (-2, 10, [3, 2, 1, 0]),
            (-6, 1, []), (0, 0, []), (1, Int.max, [1, 2, 3, 4]),
        ])
    func window(offset: Int, count: Int, expected: [Int]) {
        #expect(Aria2RPC.window([0, 1, 2, 3, 4], offset: offset, count: count) == expected)
    }

    @Test(
        "changePosition: POS_SET, POS_CUR, POS_END, clamped to the queue",
        arguments: [
            (2, 0, "POS_SET", 0), (2, 9, "POS_SET", 4), (2, -1, "POS_CUR", 1), (2, 5, "POS_CUR", 4),
            (0, 0, "POS_END", 4), (0, -2, "POS_END", 2), (3, -9, "POS_CUR", 0),
        ])
    func destination(current: Int, position: Int, how: String, expected: Int) throws {
        #expect(try Aria2RPC.destination(current: current, count: 5, position: position, how: how) == expected)
    }

    // MARK: Through the router, against a real manager

    func rpc(_ client: some TestClientProtocol, _ method: String, _ params: [JSONValue], token: Bool = true)
        async throws -> (status: HTTPResponse.Status, answer: [String: JSONValue])
    {
        let call: JSONValue = [
            "jsonrpc": "2.0", "id": "t", "method": .string(method),
            "params": .array((token ? ["token:\(ServerHarness.token)"] : []) + params),
        ]
        let response = try await client.execute(
            uri: "/jsonrpc", method: .post, headers: [:], body: ByteBuffer(data: Aria2RPC.encode(call)))
        let answer = try JSONDecoder().decode(JSONValue.self, from: Data(buffer: response.body))
        return (response.status, answer.object ?? [:])
    }

    @Test("the envelope: token, unknown method, parse error, invalid request, batches, multicall, BitTorrent refused")
    func envelope() async throws {
        let h = try await ServerHarness.make()
        try await h.application().test(.router) { client in
            var (status, answer) = try await rpc(client, "aria2.getVersion", [], token: false)
            #expect(status == .badRequest && answer["error"] == ["code": 1, "message": "Unauthorized"])
            (status, answer) = try await rpc(client, "aria2.getVersion", ["token:wrong"], token: false)
            #expect(answer["error"]?.object?["message"] == "Unauthorized")
            (status, answer) = try await rpc(client, "aria2.getVersion", [])
            #expect(status == .ok && answer["id"] == "t" && answer["result"]?.object?["version"] != nil)
            (status, answer) = try await rpc(client, "aria2.nosuch", [])
            #expect(answer["error"]?.object?["message"] == "No such method: aria2.nosuch")
            (status, answer) = try await rpc(client, "aria2.addTorrent", ["AAAA"])
            #expect(answer["error"]?.object?["message"]?.string?.contains("not BitTorrent") == true)
            (status, answer) = try await rpc(client, "system.listMethods", [], token: false)
            #expect(answer["result"]?.array?.count == Aria2RPC.methods.count)
            (status, answer) = try await rpc(client, "aria2.tellStatus", [])
            #expect(answer["error"]?.object?["message"] == "The parameter at 0 is required but missing.")
            (status, answer) = try await rpc(client, "aria2.tellStatus", ["0123456789abcdef"])
            #expect(answer["error"]?.object?["message"] == "GID 0123456789abcdef is not found")
            (status, answer) = try await rpc(client, "aria2.tellStatus", ["../../etc"])
            #expect(answer["error"]?.object?["message"] == "Bad GID ../../etc")

            let garbage = try await client.execute(
                uri: "/jsonrpc", method: .post, headers: [:], body: ByteBuffer(string: "{not json"))
            #expect(garbage.status == .internalServerError)
            #expect(String(buffer: garbage.body).contains("-32700"))
            let noID = try await client.execute(
                uri: "/jsonrpc", method: .post, headers: [:],
                body: ByteBuffer(string: #"{"method":"aria2.getVersion"}"#))
            #expect(noID.status == .badRequest && String(buffer: noID.body).contains("-32600"))
            let batch = try await client.execute(
                uri: "/jsonrpc", method: .post, headers: [:],
                body: ByteBuffer(
                    string:
                        #"[{"jsonrpc":"2.0","id":1,"method":"system.listNotifications"},{"jsonrpc":"2.0","id":2,"method":"aria2.getVersion"}]"#
                ))
            let answers = try JSONDecoder().decode([JSONValue].self, from: Data(buffer: batch.body))
            #expect(batch.status == .ok && answers.count == 2)
            #expect(answers[0].object?["result"]?.array?.count == 5)
            #expect(answers[1].object?["error"]?.object?["message"] == "Unauthorized")

            (status, answer) = try await rpc(
                client, "system.multicall",
                [
                    [
                        ["methodName": "aria2.getGlobalStat", "params": ["token:\(ServerHarness.token)"]],
                        ["methodName": "aria2.getGlobalStat", "params": []],
                        ["methodName": "system.multicall", "params": []],
                    ]
                ], token: false)
            let results = answer["result"]?.array ?? []
            #expect(results.count == 3)
            #expect(results[0].array?.first?.object?["numActive"] == "0")
            #expect(results[1].object?["message"] == "Unauthorized")
            #expect(results[2].object?["message"] == "Recursive system.multicall forbidden.")
        }
    }

    @Test("a multicall or batch takes effect as one: pausing the running download and the waiting ones starts none")
    func callsTogether() async throws {
        let h = try await ServerHarness.make { $0.maxConcurrentDownloads = 1 }
        // The running one's answers are held back: it runs until paused.
        h.server.serve("/run.bin", .init(body: bytes) { _, _ in .hold(afterBytes: 1000) })
        for name in ["a", "b", "c", "d"] { h.server.serve("/\(name).bin", .init(body: bytes)) }
        let token: JSONValue = .string("token:\(ServerHarness.token)")
        try await h.application().test(.router) { client in
            func add(_ name: String) async throws -> String {
                let (_, answer) = try await rpc(
                    client, "aria2.addUri", [[.string(h.server.url("/\(name).bin").absoluteString)]])
                return try #require(answer["result"]?.string)
            }
            func transferring() async throws {
                let running = await h.manager.page(in: [.running], after: nil, limit: nil).ids[0]
                for await event in h.manager.events(for: running) {
                    if case .progress = event { break }
                }
            }
            let run = try await add("run")
            let (a, b) = (try await add("a"), try await add("b"))
            try await transferring()
            // As AriaNg pauses the downloads chosen: one multicall, the running one first.
            var (_, answer) = try await rpc(
                client, "system.multicall",
                [.array([run, a, b].map { ["methodName": "aria2.forcePause", "params": [token, .string($0)]] })],
                token: false)
            #expect(answer["result"]?.array?.count == 3)
            #expect(h.server.requests(to: "/a.bin").isEmpty && h.server.requests(to: "/b.bin").isEmpty)
            // A batch of calls, the same.
            (_, answer) = try await rpc(client, "aria2.unpause", [.string(run)])
            try await transferring()
            let (c, d) = (try await add("c"), try await add("d"))
            let batch: JSONValue = .array(
                [run, c, d].map {
                    ["jsonrpc": "2.0", "id": "p", "method": "aria2.forcePause", "params": [token, .string($0)]]
                })
            let response = try await client.execute(
                uri: "/jsonrpc", method: .post, headers: [:], body: ByteBuffer(data: Aria2RPC.encode(batch)))
            #expect(response.status == .ok)
            #expect(h.server.requests(to: "/c.bin").isEmpty && h.server.requests(to: "/d.bin").isEmpty)
            (_, answer) = try await rpc(client, "aria2.tellWaiting", [0, 10, ["status"]])
            #expect(
                answer["result"]?.array?.compactMap { $0.object?["status"]?.string }
                    == .init(repeating: "paused", count: 5))
        }
        h.server.release()
    }

    @Test("the methods: add, tellStatus, lists, pause, unpause, position, options, stats, remove, purge, shutdown")
    func methods() async throws {
        let h = try await ServerHarness.make()
        h.server.serve("/f.bin", .init(body: bytes))
        let shutdowns = Counter()
        let router = try buildRouter(
            manager: h.manager, configuration: h.configuration, shutdown: { shutdowns.increment() })
        try await Application(router: router).test(.router) { client in
            let url = h.server.url("/f.bin").absoluteString
            var (_, answer) = try await rpc(client, "aria2.addUri", [[.string(url)], ["out": "one.bin"]])
            let gid = try #require(answer["result"]?.string)
            #expect(Aria2Status.isGID(gid))
            let id = try #require(await h.manager.page(in: nil, after: nil, limit: nil).ids.first)
            #expect(Aria2Status.gid(of: id) == gid)
            _ = try await h.manager.result(of: id)
            #expect(FileManager.default.contents(atPath: h.path("one.bin")) == Data(bytes))
            (_, answer) = try await rpc(client, "aria2.tellStatus", [.string(gid)])
            #expect(answer["result"]?.object?["status"] == "complete")
            #expect(answer["result"]?.object?["completedLength"] == .string(String(bytes.count)))
            (_, answer) = try await rpc(client, "aria2.getFiles", [.string(gid)])
            #expect(answer["result"]?.array?.first?.object?["path"] == .string(h.path("one.bin")))
            (_, answer) = try await rpc(client, "aria2.getUris", [.string(gid)])
            #expect(answer["result"] == [["uri": .string(url), "status": "used"]])
            (_, answer) = try await rpc(client, "aria2.getServers", [.string(gid)])
            #expect(answer["error"]?.object?["message"] == .string("No active download for GID#\(gid)"))

            // Three paused ones: the waiting list, moves, unpause, options.
            var paused: [String] = []
            for index in 0..<3 {
                (_, answer) = try await rpc(
                    client, "aria2.addUri", [[.string(url + "?p=\(index)")], ["pause": "true", "out": "p\(index)"]])
                paused.append(try #require(answer["result"]?.string))
            }
            (_, answer) = try await rpc(client, "aria2.tellWaiting", [0, 10, ["gid", "status"]])
            #expect(answer["result"]?.array?.map { $0.object?["gid"]?.string } == paused)
            #expect(answer["result"]?.array?.allSatisfy { $0.object?["status"] == "paused" } == true)
            (_, answer) = try await rpc(client, "aria2.changePosition", [.string(paused[2]), 0, "POS_SET"])
            #expect(answer["result"] == 0)
            (_, answer) = try await rpc(client, "aria2.changePosition", [.string(paused[2]), 0, "POS_END"])
            #expect(answer["result"] == 2)
            (_, answer) = try await rpc(client, "aria2.changePosition", [.string(paused[0]), 1, "POS_CUR"])
            #expect(answer["result"] == 1)
            (_, answer) = try await rpc(client, "aria2.tellWaiting", [0, 10, ["gid"]])
            #expect(answer["result"]?.array?.map { $0.object?["gid"]?.string } == [paused[1], paused[0], paused[2]])
            (_, answer) = try await rpc(client, "aria2.changePosition", [.string(gid), 0, "POS_SET"])
            #expect(answer["error"]?.object?["message"] == .string("GID#\(gid) not found in the waiting queue."))

            (_, answer) = try await rpc(
                client, "aria2.changeOption", [.string(paused[0]), ["max-download-limit": "1M", "split": "2"]])
            #expect(answer["result"] == "OK")
            (_, answer) = try await rpc(client, "aria2.getOption", [.string(paused[0])])
            #expect(answer["result"]?.object?["max-download-limit"] == "1048576")
            #expect(answer["result"]?.object?["split"] == "2")
            (_, answer) = try await rpc(client, "aria2.unpause", [.string(gid)])
            #expect(answer["error"]?.object?["message"] == .string("GID#\(gid) cannot be unpaused now"))
            (_, answer) = try await rpc(client, "aria2.pause", [.string(paused[1])])
            #expect(answer["error"]?.object?["message"] == .string("GID#\(paused[1]) cannot be paused now"))

            (_, answer) = try await rpc(
                client, "aria2.changeGlobalOption",
                [["max-concurrent-downloads": "2", "max-overall-download-limit": "2M"]])
            #expect(answer["result"] == "OK")
            #expect(await h.manager.currentSettings().maxConcurrentDownloads == 2)
            #expect(await h.manager.currentSettings().rateLimit == 2 << 20)
            (_, answer) = try await rpc(client, "aria2.getGlobalOption", [])
            #expect(answer["result"]?.object?["max-overall-download-limit"] == "2097152")
            #expect(answer["result"]?.object?["dir"] == .string(h.downloads))
            (_, answer) = try await rpc(client, "aria2.getGlobalStat", [])
            #expect(answer["result"]?.object?["numWaiting"] == "3")
            #expect(answer["result"]?.object?["numStopped"] == "1")

            (_, answer) = try await rpc(client, "aria2.remove", [.string(paused[1])])
            #expect(answer["result"] == .string(paused[1]))
            (_, answer) = try await rpc(client, "aria2.tellStopped", [0, 10, ["gid", "status", "errorCode"]])
            #expect(answer["result"]?.array?.map { $0.object?["status"]?.string } == ["complete", "removed"])
            (_, answer) = try await rpc(client, "aria2.removeDownloadResult", [.string(paused[0])])
            #expect(
                answer["error"]?.object?["message"] == .string("Could not remove download result of GID#\(paused[0])"))
            (_, answer) = try await rpc(client, "aria2.purgeDownloadResult", [])
            #expect(answer["result"] == "OK")
            (_, answer) = try await rpc(client, "aria2.tellStopped", [0, 10])
            #expect(answer["result"] == [])
            (_, answer) = try await rpc(client, "aria2.unpauseAll", [])
            #expect(answer["result"] == "OK")
            (_, answer) = try await rpc(client, "aria2.tellStatus", [.string(paused[2]), ["status"]])
            #expect(answer["result"]?.object?["status"] != "paused")

            // Several URIs are one file's mirrors, each checked; a URI given twice counts once.
            (_, answer) = try await rpc(client, "aria2.addUri", [["ftp://h/a", "gopher://h/b"]])
            #expect(answer["error"]?.object?["message"]?.string?.contains("'gopher://h/b'") == true)
            (_, answer) = try await rpc(client, "aria2.addUri", [["ftp://h/a", "ftp://m/a", "ftp://h/a"]])
            let mirrored = try #require(answer["result"])
            (_, answer) = try await rpc(client, "aria2.getUris", [mirrored])
            #expect(answer["result"]?.array?.map { $0.object?["uri"]?.string } == ["ftp://h/a", "ftp://m/a"])
            (_, answer) = try await rpc(client, "aria2.remove", [mirrored])
            (_, answer) = try await rpc(client, "aria2.addUri", [[.string(url)], ["dir": "/etc"]])
            #expect(answer["error"]?.object?["message"]?.string?.contains("outside the folders") == true)

            // `out` with folders, as aria2 reads it: beneath the download folder, created there; never out of it.
            (_, answer) = try await rpc(client, "aria2.addUri", [[.string(url + "?n")], ["out": "nested/two.bin"]])
            let nested = try #require(answer["result"]?.string)
            (_, answer) = try await rpc(client, "aria2.getFiles", [.string(nested)])
            #expect(answer["result"]?.array?.first?.object?["path"] == .string(h.path("nested/two.bin")))
            (_, answer) = try await rpc(client, "aria2.addUri", [[.string(url + "?o")], ["out": "../../outside.bin"]])
            #expect(
                answer["error"]?.object?["message"]
                    == "option 'out': '../../outside.bin' climbs above dir with '..'; out is a path inside dir",
                "\(answer)")
            (_, answer) = try await rpc(client, "aria2.addUri", [[.string(url + "?d")], ["out": "sub/."]])
            #expect(answer["error"]?.object?["message"] == "option 'out': '.' names a folder, not a file", "\(answer)")
            (_, answer) = try await rpc(client, "aria2.addUri", [["gopher://h/x"]])
            #expect(answer["error"]?.object?["message"]?.string?.contains("is not an http, https or ftp URL") == true)

            (_, answer) = try await rpc(client, "aria2.saveSession", [])
            #expect(answer["result"] == "OK")
            (_, answer) = try await rpc(client, "aria2.getSessionInfo", [])
            #expect(answer["result"]?.object?["sessionId"]?.string?.count == 40)
            #expect(shutdowns.value == 0)
            (_, answer) = try await rpc(client, "aria2.shutdown", [])
            #expect(answer["result"] == "OK" && shutdowns.value == 1)
        }
    }

    @Test("a cross-site page may not call the RPC nor open its WebSocket (403); the daemon's own page may")
    func origin() async throws {
        let h = try await ServerHarness.make()
        try await h.application().test(.router) { client in
            let body = ByteBuffer(string: #"{"jsonrpc":"2.0","id":1,"method":"system.listMethods"}"#)
            let foreign = try await client.execute(
                uri: "/jsonrpc", method: .post, headers: [.origin: "http://evil.example"], body: body)
            #expect(foreign.status == .forbidden)
            let upgrade = try await client.execute(
                uri: "/jsonrpc", method: .get,
                headers: [.origin: "http://evil.example", .upgrade: "websocket", .connection: "Upgrade"])
            #expect(upgrade.status == .forbidden)
            let own = try await client.execute(
                uri: "/jsonrpc", method: .post, headers: [.origin: "http://localhost"], body: body)
            #expect(own.status == .ok)
        }
    }
}

/// Counts calls from any task.
final class Counter: Sendable {
    private let count = Mutex(0)
    func increment() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
