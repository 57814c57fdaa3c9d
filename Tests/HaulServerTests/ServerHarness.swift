import Foundation
import HTTPTypes
import Haul
import HaulAPI
import HaulServer
import HaulTesting
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOEmbedded
import Testing

@testable import HaulWire

/// A fault server, a download folder, a state folder, a manager and the daemon's router for one test.
struct ServerHarness {
    static let token = "test-token-0123456789abcdef"

    let server: FaultServer
    let root: String
    let downloads: String
    let state: String
    let manager: DownloadManager
    let configuration: DaemonConfiguration

    static func make(allowed: [String] = [], configure: (inout DownloadManager.Configuration) -> Void = { _ in })
        async throws -> ServerHarness
    {
        let root = NSTemporaryDirectory() + "haul-server-tests-" + UUID().uuidString
        let downloads = root + "/downloads"
        try FileManager.default.createDirectory(atPath: downloads, withIntermediateDirectories: true)
        var managerConfiguration = DownloadManager.Configuration(stateDirectory: root + "/state")
        managerConfiguration.persistsSettings = true
        managerConfiguration.clock = RecordingClock()
        managerConfiguration.engine.jitter = { 1 }
        // As `haul serve` holds them: the network door's downloads are opened beneath these.
        managerConfiguration.allowedFolders = [downloads] + allowed
        configure(&managerConfiguration)
        let manager = try DownloadManager(configuration: managerConfiguration)
        try await manager.start()
        let harness = ServerHarness(
            server: try await FaultServer.start(), root: root, downloads: downloads, state: root + "/state",
            manager: manager,
            configuration: DaemonConfiguration(
                token: token, downloadDirectory: downloads, allowedDirectories: allowed))
        Teardowns.add { await harness.stop() }
        return harness
    }

    func application(door: Door = .network, peerUID: UInt32? = getuid()) throws -> some ApplicationProtocol {
        let router = try buildRouter(
            manager: manager, configuration: configuration, door: door, peerUID: { _ in peerUID })
        return Application(router: router, logger: Logger(label: "haul-test"))
    }

    func path(_ name: String) -> String { downloads + "/" + name }

    /// Returns once `manager` holds `count` pending waits for downloads to stop.
    static func untilWaiting(_ manager: DownloadManager, _ count: Int) async {
        while await manager.pendingStopWaits < count { await Task.yield() }
    }

    func stop() async {
        await manager.shutdown()
        await server.stop()
        try? FileManager.default.removeItem(atPath: root)
    }
}

/// Headers with the token and a JSON body type.
let authorized: HTTPFields = [.authorization: "Bearer \(ServerHarness.token)", .contentType: "application/json"]

/// The JSON coder of the API's types, as the daemon writes them.
let apiDecoder: JSONDecoder = {
    let decoder = JSONDecoder()
    decoder.dateDecodingStrategy = .iso8601
    return decoder
}()

let apiEncoder: JSONEncoder = {
    let encoder = JSONEncoder()
    encoder.dateEncodingStrategy = .iso8601
    return encoder
}()

func json(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

func body<T: Decodable>(_ type: T.Type, _ response: TestResponse) throws -> T {
    try apiDecoder.decode(T.self, from: Data(buffer: response.body))
}

/// The error of an error response.
func apiError(_ response: TestResponse) throws -> Components.Schemas.ErrorResponse._ErrorPayload {
    try body(Components.Schemas.ErrorResponse.self, response).error
}

extension TestClientProtocol {
    /// POSTs `text` as JSON with the token.
    @discardableResult
    func post(_ uri: String, _ text: String = "{}") async throws -> TestResponse {
        try await execute(uri: uri, method: .post, headers: authorized, body: json(text))
    }

    /// GETs `uri` with the token.
    func get(_ uri: String) async throws -> TestResponse {
        try await execute(uri: uri, method: .get, headers: authorized)
    }

    /// Adds one download of the fault server's `path` and returns it.
    func add(_ h: ServerHarness, _ path: String, extra: String = "") async throws -> Components.Schemas.Download {
        let response = try await post("/api/v1/downloads", #"{"url": "\#(h.server.url(path))"\#(extra)}"#)
        #expect(response.status == .created, "\(String(buffer: response.body))")
        return try body(Components.Schemas.Download.self, response)
    }
}
