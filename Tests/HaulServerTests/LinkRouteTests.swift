import Foundation
import HTTPTypes
import Haul
import HaulAPI
import HaulCore
import HaulServer
import HaulTesting
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

/// A new link through the daemon's doors: `PATCH /api/v1/downloads/{id}` with `url`, and aria2's `changeUri`.
@Suite("Replacing a link through the API and the aria2 RPC", .timeLimit(.minutes(2)), .teardowns)
struct LinkRouteTests {
    let bytes = testBytes(2_000_000, seed: 38)

    /// A signed link at `/old` that expires after `deadline` bytes, and a fresh link to the same file at `/new`.
    func serveLinks(_ h: ServerHarness, deadline: Int) {
        h.server.serve("/old", .signed(bytes, deadline: deadline))
        var fresh = FaultServer.Resource(body: bytes)
        fresh.etag = "\"v1\""
        h.server.serve("/new", fresh)
    }

    /// Waits until `id` ends; returns its error, if it failed.
    func end(_ h: ServerHarness, _ id: String) async -> DownloadError? {
        do {
            _ = try await h.manager.result(of: DownloadID(id))
            return nil
        } catch {
            return error as? DownloadError
        }
    }

    @Test("PATCH url: an expired download goes on from the new link, no byte twice; a bad or late one is refused")
    func patch() async throws {
        let h = try await ServerHarness.make()
        serveLinks(h, deadline: 700_000)
        let router = try buildRouter(manager: h.manager, configuration: h.configuration)
        try await Application(router: router).test(.router) { client in
            let added = try await client.add(h, "/old", extra: #", "connections": 1"#)
            #expect(await end(h, added.id)?.code == .linkExpired)
            let failed = try body(
                Components.Schemas.Download.self, try await client.get("/api/v1/downloads/\(added.id)"))
            #expect(failed.error?.code == "linkExpired" && failed.error?.message.hasPrefix("the link expired") == true)

            let new = h.server.url("/new").absoluteString
            let patch = { (text: String) async throws -> TestResponse in
                try await client.execute(
                    uri: "/api/v1/downloads/\(added.id)", method: .patch, headers: authorized, body: json(text))
            }
            let bad = try await patch(#"{"url": "gopher://h/x"}"#)
            #expect(try bad.status == .badRequest && apiError(bad).field == "url")
            let response = try await patch(#"{"url": "\#(new)"}"#)
            #expect(response.status == .ok, "\(String(buffer: response.body))")
            #expect(try body(Components.Schemas.Download.self, response).url == new)
            #expect(await end(h, added.id) == nil)
            #expect(FileManager.default.contents(atPath: h.path("old")) == Data(bytes))
            #expect(h.server.bodyBytesSent(for: "/old") + h.server.bodyBytesSent(for: "/new") == bytes.count)
            let late = try await patch(#"{"url": "\#(new)"}"#)
            #expect(late.status == .conflict)
        }
    }

    @Test("aria2.changeUri: deleting the old URI and adding the new one replaces the link and keeps the bytes")
    func changeUri() async throws {
        let h = try await ServerHarness.make()
        serveLinks(h, deadline: 900_000)
        let router = try buildRouter(manager: h.manager, configuration: h.configuration)
        try await Application(router: router).test(.router) { client in
            let old = h.server.url("/old").absoluteString
            let new = h.server.url("/new").absoluteString
            var (_, answer) = try await Aria2RPCTests().rpc(
                client, "aria2.addUri", [[.string(old)], ["out": "file.bin", "split": "1"]])
            let gid = try #require(answer["result"])
            let id = try #require(await h.manager.page(in: nil, after: nil, limit: nil).ids.first)
            #expect(await end(h, id.rawValue)?.code == .linkExpired)
            (_, answer) = try await Aria2RPCTests().rpc(client, "aria2.changeUri", [gid, 2, [], [.string(new)]])
            #expect(answer["error"]?.object?["message"]?.string?.contains("fileIndex") == true)
            (_, answer) = try await Aria2RPCTests().rpc(
                client, "aria2.changeUri", [gid, 1, [.string(old)], [.string(new)]])
            #expect(answer["result"] == [1, 1])
            #expect(await end(h, id.rawValue) == nil)
            #expect(FileManager.default.contents(atPath: h.path("file.bin")) == Data(bytes))
            #expect(h.server.bodyBytesSent(for: "/old") + h.server.bodyBytesSent(for: "/new") == bytes.count)
            (_, answer) = try await Aria2RPCTests().rpc(client, "aria2.getUris", [gid])
            #expect(answer["result"]?.array?.map { $0.object?["uri"]?.string } == [new])
            (_, answer) = try await Aria2RPCTests().rpc(client, "aria2.changeUri", [gid, 1, [], [.string(old)]])
            #expect(answer["error"]?.object?["message"]?.string?.contains("is complete") == true)
        }
    }
}
