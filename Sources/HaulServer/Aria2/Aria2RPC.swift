import Crypto
import Foundation
import HTTPTypes
import Haul
import HaulCore
import HaulWire
import Synchronization

/// aria2's JSON-RPC on Haul's manager: the envelope (single calls, batches, `system.multicall`), the token check,
/// and the methods (in `Aria2RPC+Methods.swift`). Served at `POST /jsonrpc` and over the WebSocket at `GET /jsonrpc`.
///
/// As aria2 does: every method under `aria2.` takes `"token:SECRET"` as its first parameter (SECRET is the daemon's
/// token); an answer with an error has code 1 and aria2's wording where one exists; a single call that fails is
/// answered 400, a batch 200, a body that is not JSON 500.
public final class Aria2RPC: Sendable {
    let manager: DownloadManager
    let handler: APIHandler
    let configuration: DaemonConfiguration
    private let shutdown: @Sendable () async -> Void
    private let gids = Mutex<[String: DownloadID]>([:])
    /// A new id each time the daemon starts, as aria2's session id.
    let sessionID: String

    /// Methods a client may call, as `system.listMethods` names them.
    static let methods = [
        "aria2.addUri", "aria2.addTorrent", "aria2.getPeers", "aria2.addMetalink", "aria2.remove", "aria2.pause",
        "aria2.forcePause", "aria2.pauseAll", "aria2.forcePauseAll", "aria2.unpause", "aria2.unpauseAll",
        "aria2.forceRemove", "aria2.changePosition", "aria2.tellStatus", "aria2.getUris", "aria2.getFiles",
        "aria2.getServers", "aria2.tellActive", "aria2.tellWaiting", "aria2.tellStopped", "aria2.getOption",
        "aria2.changeUri", "aria2.changeOption", "aria2.getGlobalOption", "aria2.changeGlobalOption",
        "aria2.purgeDownloadResult", "aria2.removeDownloadResult", "aria2.getVersion", "aria2.getSessionInfo",
        "aria2.shutdown", "aria2.forceShutdown", "aria2.getGlobalStat", "aria2.saveSession", "system.multicall",
        "system.listMethods", "system.listNotifications",
    ]

    /// The notifications the WebSocket sends (Haul has no BitTorrent, so never `onBtDownloadComplete`).
    static let notifications = [
        "aria2.onDownloadStart", "aria2.onDownloadPause", "aria2.onDownloadStop", "aria2.onDownloadComplete",
        "aria2.onDownloadError",
    ]

    /// The RPC of `manager` for requests through `door`; `shutdown` stops the daemon (`aria2.shutdown`).
    public init(
        manager: DownloadManager, configuration: DaemonConfiguration, door: Door,
        shutdown: @escaping @Sendable () async -> Void
    ) {
        self.manager = manager
        self.configuration = configuration
        handler = APIHandler(manager: manager, configuration: configuration, door: door)
        self.shutdown = shutdown
        var generator = SystemRandomNumberGenerator()
        sessionID = (0..<20).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }

    /// A method's failure: aria2's code (1 for every method error) and a message.
    struct Fault: Error, Equatable {
        var code: Int
        var message: String

        init(_ message: String, code: Int = 1) {
            self.code = code
            self.message = message
        }

        static let parse = Fault("Parse error.", code: -32700)
        static let invalidRequest = Fault("Invalid Request.", code: -32600)

        var json: JSONValue { ["code": .integer(Int64(code)), "message": .string(message)] }
    }

    // MARK: The envelope

    /// The answer to a request body: the HTTP status and the JSON to send.
    public func respond(to body: Data) async -> (status: HTTPResponse.Status, body: Data) {
        guard let request = try? JSONDecoder().decode(JSONValue.self, from: body) else {
            return (.internalServerError, Self.encode(Self.answer(id: .null, .failure(.parse))))
        }
        if case .array(let calls) = request {
            // Taking effect as one, as in aria2 (`DownloadManager.holdingStarts`).
            let answers = await manager.holdingStarts {
                var answers: [JSONValue] = []
                for call in calls { answers.append(await self.answer(call)) }
                return answers
            }
            return (.ok, Self.encode(.array(answers)))
        }
        let answer = await answer(request)
        let failed = answer.object?["error"] != nil
        return (failed ? .badRequest : .ok, Self.encode(answer))
    }

    /// The answer object to one call object.
    func answer(_ call: JSONValue) async -> JSONValue {
        guard let object = call.object, let method = object["method"]?.string, let id = object["id"] else {
            return Self.answer(id: call.object?["id"] ?? .null, .failure(.invalidRequest))
        }
        let params: [JSONValue]
        switch object["params"] {
        case nil: params = []
        case .array(let list)?: params = list
        default: return Self.answer(id: id, .failure(.invalidRequest))
        }
        do {
            return Self.answer(id: id, .success(try await self.call(method, params)))
        } catch {
            return Self.answer(id: id, .failure(error))
        }
    }

    static func answer(id: JSONValue, _ result: Result<JSONValue, Fault>) -> JSONValue {
        switch result {
        case .success(let value): ["id": id, "jsonrpc": "2.0", "result": value]
        case .failure(let fault): ["id": id, "jsonrpc": "2.0", "error": fault.json]
        }
    }

    static func encode(_ value: JSONValue) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value)) ?? Data(#"{"jsonrpc":"2.0","id":null,"result":null}"#.utf8)
    }

    /// One method call: the token checked, then the method.
    func call(_ method: String, _ given: [JSONValue]) async throws(Fault) -> JSONValue {
        switch method {
        case "system.listMethods": return .array(Self.methods.map(JSONValue.string))
        case "system.listNotifications": return .array(Self.notifications.map(JSONValue.string))
        case "system.multicall": return try await multicall(given)
        default: break
        }
        guard Self.methods.contains(method) else { throw Fault("No such method: \(method)") }
        var params = given
        guard let first = params.first?.string, first.hasPrefix("token:"), isToken(first.dropFirst(6)) else {
            throw Fault("Unauthorized")
        }
        params.removeFirst()
        return try await perform(method, Parameters(params))
    }

    private func isToken(_ given: Substring) -> Bool {
        // Compared as digests: the time taken says nothing about how much of the token was right.
        SHA256.hash(data: Data(given.utf8)) == SHA256.hash(data: Data(configuration.token.utf8))
    }

    /// `system.multicall([{methodName, params}, …])`: each result in a list of one, each error as an object.
    /// The calls take effect as one, as in aria2 (`DownloadManager.holdingStarts`).
    private func multicall(_ params: [JSONValue]) async throws(Fault) -> JSONValue {
        guard let calls = params.first?.array else { throw Fault("The parameter at 0 has wrong type.") }
        return await manager.holdingStarts { await self.each(calls) }
    }

    /// The calls of a multicall, one after another.
    private func each(_ calls: [JSONValue]) async -> JSONValue {
        var results: [JSONValue] = []
        for call in calls {
            guard let object = call.object, let name = object["methodName"]?.string else {
                results.append(Fault("Missing methodName.").json)
                continue
            }
            guard name != "system.multicall" else {
                results.append(Fault("Recursive system.multicall forbidden.").json)
                continue
            }
            do { results.append([try await self.call(name, object["params"]?.array ?? [])]) } catch {
                results.append(error.json)
            }
        }
        return .array(results)
    }

    /// Stops the daemon, as SIGTERM would (running downloads pause with their exact offsets).
    func stopDaemon() async { await shutdown() }

    // MARK: Gids

    /// The download a gid names; aria2's "GID … is not found" when none does.
    func id(of gid: String) async throws(Fault) -> DownloadID {
        guard Aria2Status.isGID(gid) else { throw Fault("Bad GID \(gid)") }
        if let id = gids.withLock({ $0[gid] }) { return id }
        // Not seen yet (added through the REST API, by an earlier daemon or by another worker): asked of the manager.
        guard let id = try? await manager.download(brief: gid) else { throw Fault("GID \(gid) is not found") }
        register([id])
        return id
    }

    /// Remembers the gids of `ids`.
    func register(_ ids: [DownloadID]) {
        gids.withLock { table in
            for id in ids { table[Aria2Status.gid(of: id)] = id }
        }
    }

    /// The download a gid names, as it is now.
    func snapshot(_ gid: String) async throws(Fault) -> DownloadSnapshot {
        let id = try await id(of: gid)
        do { return try await manager.snapshot(id) } catch { throw Fault("GID \(gid) is not found") }
    }

    // MARK: Parameters

    /// The parameters of a call after the token, read with aria2's messages for a missing or mistyped one.
    struct Parameters {
        let values: [JSONValue]

        init(_ values: [JSONValue]) { self.values = values }

        func string(_ index: Int) throws(Fault) -> String {
            guard index < values.count else { throw Fault("The parameter at \(index) is required but missing.") }
            guard let text = values[index].string else { throw Fault("The parameter at \(index) has wrong type.") }
            return text
        }

        func integer(_ index: Int) throws(Fault) -> Int {
            guard index < values.count else { throw Fault("The parameter at \(index) is required but missing.") }
            guard let number = values[index].integer, let value = Int(exactly: number) else {
                throw Fault("The parameter at \(index) has wrong type.")
            }
            return value
        }

        func optionalInteger(_ index: Int) throws(Fault) -> Int? {
            guard index < values.count, values[index] != .null else { return nil }
            return try integer(index)
        }

        func object(_ index: Int) throws(Fault) -> [String: JSONValue] {
            guard index < values.count else { return [:] }
            guard let object = values[index].object else { throw Fault("The parameter at \(index) has wrong type.") }
            return object
        }

        func strings(_ index: Int) throws(Fault) -> [String] {
            guard index < values.count else { return [] }
            guard let list = values[index].array else { throw Fault("The parameter at \(index) has wrong type.") }
            var result: [String] = []
            for value in list {
                guard let text = value.string else { throw Fault("The parameter at \(index) has wrong type.") }
                result.append(text)
            }
            return result
        }
    }
}
