import Foundation
import HaulTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `haul serve --store postgres://…` against a PostgreSQL 15 the test starts: the daemon keeps its downloads there,
/// a second daemon on the same store is refused, and the password shows nowhere.
@Suite("haul serve on a PostgreSQL store", .serialized, .teardowns, .timeLimit(.minutes(3)))
struct SharedStoreTests {
    @Test(
        "downloads are kept in PostgreSQL across restarts; a second daemon on the store is refused; no password shown")
    func serveOnPostgres() async throws {
        let database = try PostgresServer()
        Teardowns.add { database.stop() }
        let url = database.url(database: try database.createDatabase())
        let web = try await FaultServer.start()
        Teardowns.add { await web.stop() }
        let body = testBytes(2 << 20, seed: 34)
        web.serve("/a.bin", .init(body: body))
        let workspace = try Workspace()
        Teardowns.add { workspace.remove() }
        let environment = ["HAUL_STORE": url]

        let first = try await DaemonProcess(workspace, environment: environment)
        let id = try await first.add(web.url("/a.bin"))
        let finished = try await first.waitUntilStopped(id)
        #expect(finished["state"] as? String == "completed", "\(finished)")
        #expect(workspace.holds("a.bin", body))

        // A second worker on the same store would run the same downloads: refused, with the reason.
        let other = try Workspace()
        Teardowns.add { other.remove() }
        let refused = try await HaulProcess.run(
            ["serve", "--listen", "127.0.0.1:0", "--state-dir", other.state, "--download-dir", other.files], in: other,
            environment: environment)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("another haul serve runs its downloads"), "\(refused.stderr)")
        #expect(refused.stderr.contains("127.0.0.1:\(database.port)"), "\(refused.stderr)")

        let stopped = await first.stop(SIGTERM)
        #expect(stopped.status == 0, "\(stopped.stderr)")
        let second = try await DaemonProcess(workspace, environment: environment)
        let again = try await second.download(id)
        #expect(again["state"] as? String == "completed", "\(again)")
        #expect(again["receivedBytes"] as? Int == body.count, "\(again)")
        let last = await second.stop(SIGTERM)

        let serveFile = (try? String(contentsOfFile: workspace.state + "/serve.json", encoding: .utf8)) ?? ""
        for text in [stopped.stdout, stopped.stderr, last.stdout, last.stderr, refused.stderr, serveFile] {
            #expect(!text.contains(database.password), "\(text)")
        }
        #expect(stopped.stderr.contains("downloads are kept in postgres://haul@127.0.0.1:"), "\(stopped.stderr)")
    }

    @Test("a store that cannot be reached or a bad store URL: a clear error naming the host, never the password")
    func unreachable() async throws {
        let workspace = try Workspace()
        Teardowns.add { workspace.remove() }
        let closed = freePort()
        let nowhere = try await HaulProcess.run(
            [
                "serve", "--listen", "127.0.0.1:0", "--state-dir", workspace.state, "--store",
                "postgres://haul:hunter2@127.0.0.1:\(closed)/queue?sslmode=disable",
            ], in: workspace)
        #expect(nowhere.status == 1)
        #expect(
            nowhere.stderr.contains("cannot open the store at 127.0.0.1:\(closed) (database queue)"),
            "\(nowhere.stderr)")
        #expect(!nowhere.stderr.contains("hunter2"), "\(nowhere.stderr)")

        let bad = try await HaulProcess.run(
            ["serve", "--state-dir", workspace.state, "--store", "postgres://haul:hunter2@db.example/queue?ssl=1"],
            in: workspace)
        #expect(bad.status != 0)
        #expect(bad.stderr.contains("has the parameter ssl"), "\(bad.stderr)")
        #expect(!bad.stderr.contains("hunter2"), "\(bad.stderr)")
    }
}
