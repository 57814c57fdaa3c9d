import AsyncHTTPClient
import Foundation
import HTTPTypes
import Haul
import HaulAPI
import HaulCore
import HaulWire
import OpenAPIAsyncHTTPClient
import OpenAPIRuntime

/// A failure talking to the daemon, with the daemon's own message when it gave one.
struct ClientError: Error, CustomStringConvertible {
    var description: String
    /// The HTTP status of the daemon's answer, when there was one.
    var status: Int?
    /// For a list of downloads: the index of the item the daemon refused.
    var index: Int?
}

/// The `haul` command's way to a daemon: its Unix socket (found through the state folder) or, with `--server`, its
/// TCP listener with the token. Built on the client generated from the same OpenAPI document as the daemon.
struct DaemonClient: Sendable {
    let api: Client
    private let http: HTTPClient
    /// The API's base URL and the token sent to it (nil through the socket), for the requests whose answers are read
    /// as `BriefDownload`s.
    private let baseURL: URL
    private let token: String?
    /// Whether it reaches the daemon through the local socket (the daemon runs on this machine as this user).
    let isLocal: Bool

    /// A client of the daemon that owns `stateDirectory`, through its socket (no token: the socket checks the user).
    init(socket path: String) {
        isLocal = true
        var configuration = HTTPClient.Configuration()
        // A daemon that stopped without removing its socket is told at once (see `clientConfiguration`).
        configuration.connectionPool.retryConnectionEstablishment = false
        http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        let encoded = path.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? path
        baseURL = URL(string: "http+unix://\(encoded)/api/v1")!
        token = nil
        api = Client(
            serverURL: baseURL,
            configuration: .init(dateTranscoder: APIDateTranscoder()),
            transport: AsyncHTTPClientTransport(configuration: .init(client: http, timeout: .seconds(60))),
            middlewares: [ErrorAnswers()])
    }

    /// A client of the daemon at `server` (its URL, as `serve.json` holds it), sending `token`; over HTTPS it
    /// trusts the certificates in the PEM file `caCertificates` too (`--server-cacert`).
    init(server: URL, token: String, trusting caCertificates: String? = nil) throws(DownloadError) {
        isLocal = false
        http = HTTPClient(
            eventLoopGroupProvider: .singleton,
            configuration: try LiveTransport.clientConfiguration(trusting: caCertificates))
        baseURL = server.appendingPathComponent("api/v1")
        self.token = token
        api = Client(
            serverURL: baseURL,
            configuration: .init(dateTranscoder: APIDateTranscoder()),
            transport: AsyncHTTPClientTransport(configuration: .init(client: http, timeout: .seconds(60))),
            middlewares: [ErrorAnswers(), BearerToken(token: token)])
    }

    func shutdown() async {
        try? await http.shutdown()
    }

    // MARK: Calls

    /// Adds `items` in one request (a JSON list, one transaction), or in parts when the list is too long for one
    /// (`inParts`), and returns the daemon's downloads in order.
    ///
    /// The request body is the generated `AddDownload` type's encoding, but the answer is read as `BriefDownload`s,
    /// HaulWire's codec for what the commands use of a download, as the event stream is: the generated client checks
    /// every field of every answered download, which for a list of a thousand is most of `haul add -i`'s work.
    func add(_ items: [Components.Schemas.AddDownload]) async throws -> [BriefDownload] {
        try await inParts(items, minimal: false) { status, body in
            do {
                guard status == 200 else { throw ClientError(description: "the daemon answered \(status)") }
                return try BriefSnapshot.decode(body, with: Self.briefDecoder).downloads
            } catch {
                throw ClientError(description: "the daemon's answer to adding downloads cannot be read: \(error)")
            }
        }
    }

    /// Adds `items` as `add` does, and returns only their ids, in order (`Prefer: return=minimal`).
    func addReturningIDs(_ items: [Components.Schemas.AddDownload]) async throws -> [String] {
        try await inParts(items, minimal: true) { status, body in
            guard status == 200, let answer = try? JSONDecoder().decode(Components.Schemas.AddedIDs.self, from: body)
            else {
                throw ClientError(description: "the daemon's answer to adding downloads cannot be read (\(status))")
            }
            return answer.ids
        }
    }

    /// Posts `items` in one request, or, when their body would pass the most a request takes
    /// (`APILimits.requestBody`), in consecutive parts that each fit; each part is added whole or not at all, as one
    /// list is. Returns what `read` makes of every answer, in order. A part refused names the item by its index in
    /// the whole list, and says how many before it were added.
    private func inParts<T>(
        _ items: [Components.Schemas.AddDownload], minimal: Bool, read: (Int, Data) throws -> [T]
    ) async throws -> [T] {
        var done: [T] = []
        for (range, body) in try Self.bodies(items[...]) {
            do {
                let (status, answer) = try await post(body, minimal: minimal)
                done += try read(status, answer)
            } catch let error as ClientError where range.lowerBound > 0 {
                let added = "; the \(range.lowerBound) before it in the list were added (`haul ls` lists them)"
                throw ClientError(
                    description: error.description + added, status: error.status,
                    index: error.index.map { $0 + range.lowerBound })
            }
        }
        return done
    }

    /// The encoded bodies of `items`: one, or halves (and their halves) until each fits in a request. An item too
    /// large alone goes alone, and the daemon's 413 says so.
    private static func bodies(_ items: ArraySlice<Components.Schemas.AddDownload>) throws
        -> [(Range<Int>, [UInt8])]
    {
        let list = Array(items)
        let body = try AddDownloadJSON.encode(list) ?? Array(JSONEncoder().encode(list))
        guard body.count > APILimits.requestBody, items.count > 1 else { return [(items.indices, body)] }
        let middle = items.startIndex + items.count / 2
        return try bodies(items[..<middle]) + bodies(items[middle...])
    }

    /// Posts one encoded list of downloads to add; the status and body of a successful answer.
    private func post(_ encoded: [UInt8], minimal: Bool) async throws -> (Int, Data) {
        var request = HTTPClientRequest(url: baseURL.appendingPathComponent("downloads").absoluteString)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        if minimal { request.headers.add(name: "Prefer", value: "return=minimal") }
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        request.body = .bytes(encoded)
        // The answer grows with the list, about 1.1 KB a download: the longest list the daemon takes (8 MiB of
        // body, about 150,000 short URLs) is answered in under 256 MiB.
        return try await send(request, upTo: 256 << 20)
    }

    /// GETs `path` (beneath the API's base, with its query); the body of a successful answer.
    private func get(_ path: String) async throws -> Data {
        var request = HTTPClientRequest(url: baseURL.absoluteString + "/" + path)
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        // A list of every download takes about 450 bytes a download: two million fit.
        return try await send(request, upTo: 1 << 30).1
    }

    /// Sends `request`; the status and the body (at most `limit` bytes) of a successful answer, or the daemon's
    /// error as a `ClientError`, as `ErrorAnswers` makes it for the generated client.
    private func send(_ request: HTTPClientRequest, upTo limit: Int) async throws -> (Int, Data) {
        let (status, type, body) = try await call { () async throws -> (Int, String?, Data) in
            let response = try await http.execute(request, timeout: .seconds(60))
            let bytes = try await response.body.collect(upTo: limit)
            return (Int(response.status.code), response.headers.first(name: "Content-Type"), Data(buffer: bytes))
        }
        if status >= 400 { throw ErrorAnswers.error(status: status, contentType: type, body: body) }
        return (status, body)
    }

    private static let briefDecoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()

    /// The downloads in `states` (all when nil), in queue order, read as `BriefDownload`s as `add`'s answer is: the
    /// generated client took 2.3 s to check every field of a hundred thousand downloads.
    func list(states: [Components.Schemas.State]? = nil) async throws -> [BriefDownload] {
        let body = try await get(
            "downloads" + (states.map { "?state=" + $0.map(\.rawValue).joined(separator: ",") } ?? ""))
        do { return try BriefSnapshot.decode(body, with: Self.briefDecoder).downloads } catch {
            throw ClientError(description: "the daemon's list of downloads cannot be read: \(error)")
        }
    }

    /// Waits up to `timeout` seconds for `ids` (every download, when nil) to stop: whether they have, and the named
    /// downloads as they are then.
    func wait(for ids: [String]?, timeout: Int) async throws -> Components.Schemas.WaitResult {
        let output = try await call { try await api.waitForDownloads(query: .init(download: ids, timeout: timeout)) }
        guard case .ok(let ok) = output, case .json(let result) = ok.body else { throw Self.failure(output) }
        return result
    }

    /// Runs a command on one download (`pause`, `resume`, `cancel`, `retry`) and returns it after.
    func command(_ name: String, _ id: String) async throws -> Components.Schemas.Download {
        let path = Operations.PauseDownload.Input.Path(id: id)
        let download: Components.Schemas.Download?
        let output: any Sendable
        switch name {
        case "pause":
            let result = try await call { try await api.pauseDownload(path: .init(id: path.id)) }
            (download, output) = (try? result.ok.body.json, result)
        case "resume":
            let result = try await call { try await api.resumeDownload(path: .init(id: path.id)) }
            (download, output) = (try? result.ok.body.json, result)
        case "cancel":
            let result = try await call { try await api.cancelDownload(path: .init(id: path.id)) }
            (download, output) = (try? result.ok.body.json, result)
        default:
            let result = try await call { try await api.retryDownload(path: .init(id: path.id)) }
            (download, output) = (try? result.ok.body.json, result)
        }
        guard let download else { throw Self.failure(output) }
        return download
    }

    /// Pauses every queued, running or waiting download (`all`), or queues every paused one again; the counts after.
    func commandAll(_ name: String) async throws -> Components.Schemas.Stats {
        if name == "pause" {
            let output = try await call { try await api.pauseAll() }
            guard case .ok(let ok) = output, case .json(let stats) = ok.body else { throw Self.failure(output) }
            return stats
        }
        let output = try await call { try await api.resumeAll() }
        guard case .ok(let ok) = output, case .json(let stats) = ok.body else { throw Self.failure(output) }
        return stats
    }

    /// Gives download `id` the new link `url` (`PATCH` with `url`) and returns it after.
    func replaceURL(of id: String, with url: String) async throws -> Components.Schemas.Download {
        let output = try await call {
            try await api.updateDownload(path: .init(id: id), body: .json(.init(url: url)))
        }
        guard let download = try? output.ok.body.json else { throw Self.failure(output) }
        return download
    }

    func delete(_ id: String, deletingFile: Bool) async throws {
        let output = try await call {
            try await api.deleteDownload(path: .init(id: id), query: .init(deleteFile: deletingFile))
        }
        guard case .noContent = output else { throw Self.failure(output) }
    }

    /// The workers of the daemon's fleet (the daemon alone, without a shared store).
    func workers() async throws -> [Components.Schemas.Worker] {
        let output = try await call { try await api.listWorkers() }
        guard case .ok(let ok) = output, case .json(let body) = ok.body else { throw Self.failure(output) }
        return body.workers
    }

    func clean() async throws -> Int {
        let output = try await call { try await api.clean() }
        guard case .ok(let ok) = output, case .json(let body) = ok.body else { throw Self.failure(output) }
        return body.removed
    }

    /// The event stream, from after `lastEventID` (nil: from a snapshot); its snapshots hold only the downloads in
    /// `states` (all when nil).
    func events(after lastEventID: String?, states: [Components.Schemas.State]? = nil) async throws -> HTTPBody {
        let output = try await call {
            try await api.streamEvents(query: .init(state: states), headers: .init(lastEventID: lastEventID))
        }
        guard case .ok(let ok) = output, case .textEventStream(let body) = ok.body else { throw Self.failure(output) }
        return body
    }

    /// What an id is made of (a UUID's characters), left as it is in a path.
    private static let idCharacters = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-"))

    /// Download `id` (a whole id) as it is now; nil when the daemon has no such download (it was removed).
    func download(_ id: String) async throws -> BriefDownload? {
        let body: Data
        do {
            body = try await get(
                "downloads/" + (id.addingPercentEncoding(withAllowedCharacters: Self.idCharacters) ?? id))
        } catch let error as ClientError where error.status == 404 {
            return nil
        }
        do { return try BriefDownload.decode(String(decoding: body, as: UTF8.self), with: Self.briefDecoder) } catch {
            throw ClientError(description: "the daemon's answer for download \(id) cannot be read: \(error)")
        }
    }

    /// The downloads named by each of `names` (a whole id, or its start or its end as `haul ls` shows it); one
    /// matching none or several is an error.
    func resolve(_ names: [String]) async throws -> [BriefDownload] {
        // A whole id is asked for alone: it needs no list of every download.
        var whole: [String: BriefDownload] = [:]
        for name in names where UUID(uuidString: name) != nil {
            guard let download = try await download(name.lowercased()) else {
                throw ClientError(description: "no download with id \(name)")
            }
            whole[name] = download
        }
        let all = whole.count == names.count ? [] : try await list()
        return try names.map { name in
            if let download = whole[name] { return download }
            let matches = all.filter { Format.id($0.id, matches: name) }
            guard matches.count == 1 else {
                throw ClientError(
                    description: matches.isEmpty
                        ? "no download with id \(name)" : "id \(name) matches \(matches.count) downloads")
            }
            return matches[0]
        }
    }

    /// Runs `body`, turning a failure to reach the daemon into a message that says so.
    private func call<T>(_ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch let error as ClientError { throw error } catch let error
            as OpenAPIRuntime.ClientError
        {
            // The generated client wraps what a middleware throws: the daemon's own error answer (`ErrorAnswers`).
            if let answer = error.underlyingError as? ClientError { throw answer }
            throw unreached(error.underlyingError)
        } catch {
            throw unreached(error)
        }
    }

    /// A call that got no answer, told as what happened and what to do.
    private func unreached(_ error: any Error) -> ClientError {
        if let timeout = error as? HTTPClientError, timeout == .deadlineExceeded || timeout == .readTimeout {
            // Reached, but slow: a command on a very long queue may still be under way.
            return ClientError(
                description: "the daemon did not answer within 60 s; it may still be doing what was asked "
                    + "(`haul ls` shows the downloads as they are)")
        }
        if isLocal, LiveTransport.errno(of: error) == ENOENT {
            // The state folder's lock is held (this client was made for that), so a haul serve runs: it opens its
            // socket once it has read its queue, and removes it as it stops.
            return ClientError(
                description: "haul serve holds this state folder but has not opened its socket (it is starting or "
                    + "stopping): try again in a moment")
        }
        return ClientError(description: "cannot reach the daemon: " + reason(error))
    }

    /// Why the daemon could not be reached, in the engine's plain words for a network failure (a refused
    /// connection, an unverified certificate), else the error's own text.
    private func reason(_ error: any Error) -> String {
        let place = isLocal ? "its socket" : HostAndPort.shown(baseURL.host ?? "", port: baseURL.port)
        switch LiveTransport.classify(error, connecting: true) {
        case .other:
            return Self.shorten("\(error)")
        case .certificateRejected(let detail):
            return "the TLS certificate of \(place) \(detail ?? "could not be verified") (--server-cacert FILE trusts "
                + "the daemon's own certificate or the CA that signed it)"
        case .certificateInvalid(let problem, let now):
            return "the TLS certificate of \(place) \(problem.detail(now: now))"
                + (problem == .untrusted ? " (--server-cacert FILE trusts it)" : "")
        case let failure:
            return failure.message(host: place)
        }
    }

    private static func shorten(_ text: String) -> String {
        if let range = text.range(of: "underlying error: ") { return String(text[range.upperBound...]) }
        return text
    }

    /// An answer the generated output holds but the command did not expect (the daemon's errors are thrown by
    /// `ErrorAnswers` before they get here).
    static func failure(_ output: Any) -> ClientError {
        ClientError(description: "the daemon answered unexpectedly: \(output)")
    }
}

/// Turns every error answer of the daemon into a `ClientError` with its status and message (the document's
/// `ErrorResponse`), so a call either returns what it asked for or throws what the daemon said.
struct ErrorAnswers: ClientMiddleware {
    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        let (response, answer) = try await next(request, body, baseURL)
        guard response.status.kind == .clientError || response.status.kind == .serverError else {
            return (response, answer)
        }
        var bytes = Data()
        if let answer { bytes = try await Data(collecting: answer, upTo: 1 << 20) }
        throw Self.error(
            status: response.status.code, contentType: response.headerFields[.contentType], body: bytes)
    }

    /// The error answer `body` as a `ClientError`: the API's `ErrorResponse` says what went wrong; another answer
    /// (a TLS daemon asked over http://, a proxy, another server at that address) is quoted by its first line of text.
    static func error(status: Int, contentType: String?, body: Data) -> ClientError {
        guard let error = try? JSONDecoder().decode(Components.Schemas.ErrorResponse.self, from: body) else {
            let line = String(decoding: body.prefix(200), as: UTF8.self).split(whereSeparator: \.isNewline).first
            let text = line.map { $0.trimmingCharacters(in: .whitespaces) }.flatMap { $0.isEmpty ? nil : $0 }
            let isText = contentType?.hasPrefix("text/plain") == true
            return ClientError(
                description: "the daemon answered \(status)" + (isText ? text.map { ": \($0)" } ?? "" : ""),
                status: status)
        }
        return ClientError(description: error.error.message, status: status, index: error.error.index)
    }
}

/// Adds `Authorization: Bearer TOKEN` to every request.
struct BearerToken: ClientMiddleware {
    let token: String

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        var request = request
        request.headerFields[.authorization] = "Bearer \(token)"
        return try await next(request, body, baseURL)
    }
}

/// The daemon's event stream as the engine's events, reconnecting with the last id when the connection drops (a
/// daemon that restarted answers with a fresh snapshot).
struct RemoteEvents: Sendable {
    let client: DaemonClient
    /// Event names not decoded at all (a command that draws no progress skips `progress`: decoding every one took
    /// a quarter of `haul watch`'s time).
    var skipping: Set<String> = []
    /// The states of the downloads the snapshots hold (all when nil).
    var states: [Components.Schemas.State]? = nil

    /// Reads events, giving them to `handle` until it returns false: all those of one chunk of the stream at once, so
    /// that a burst of events crosses to the handler (and from it to the terminal output) once, not once an event.
    /// Gives up when the daemon cannot be reached again for `patience` (a daemon restarting, by hand or by its
    /// service manager, is back well within it), trying every quarter of a second and then, after a few tries, every
    /// two seconds.
    func follow(
        patience: Duration = .seconds(60), clock: any Clock<Duration> = ContinuousClock(),
        _ handle: ([DownloadEvent]) async -> Bool
    ) async throws {
        var lastID: String?
        var failures = 0
        var waited = Duration.zero
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        while true {
            let body: HTTPBody
            do {
                body = try await client.events(after: lastID, states: states)
                failures = 0
                waited = .zero
            } catch {
                failures += 1
                let pause: Duration = failures <= 8 ? .milliseconds(250) : .seconds(2)
                if waited + pause > patience { throw error }
                waited += pause
                try await clock.sleep(for: pause)
                continue
            }
            do {
                // Read with HaulCore's reader, not swift-openapi-runtime's, which is quadratic in the size of a
                // chunk (see `ServerSentEventParser`).
                var parser = ServerSentEventParser()
                for try await chunk in body {
                    var decoded: [DownloadEvent] = []
                    // Taken one by one, so that each event's text (a snapshot's is tens of megabytes) goes once read.
                    var completed = try parser.feed(chunk)
                    completed.reverse()
                    while let event = completed.popLast() {
                        if let id = event.id { lastID = id }
                        guard let name = event.event, !skipping.contains(name),
                            let one = try? Self.decode(name, event.data, decoder)
                        else { continue }
                        decoded.append(one)
                    }
                    if !decoded.isEmpty, !(await handle(decoded)) { return }
                }
            } catch {
                // The stream broke: reconnect with the last id.
            }
            if Task.isCancelled { return }
        }
    }

    /// The event `name` with `text` as its data; the three frequent kinds are read from the text in place.
    static func decode(_ name: String, _ text: String, _ decoder: JSONDecoder) throws -> DownloadEvent? {
        switch name {
        case "snapshot":
            let snapshot = try BriefSnapshot.decode(text, with: decoder)
            return .snapshot(
                ManagerSnapshot(
                    downloads: snapshot.downloads.map(\.snapshot), stats: DownloadStats(bytesPerSecond: 0, counts: [:]),
                    settings: ManagerSettings()))
        case "added":
            return .added(try BriefDownload.decode(text, with: decoder).snapshot)
        case "changed":
            return .changed(try BriefDownload.decode(text, with: decoder).snapshot)
        case "progress":
            return .progress(try BriefProgress.decode(text, with: decoder).progress)
        default:
            return try decodeRare(name, Data(text.utf8), decoder)
        }
    }

    /// The kinds of event that come a few times a run, read by Foundation's decoder; nil for a kind not known here.
    private static func decodeRare(_ name: String, _ data: Data, _ decoder: JSONDecoder) throws -> DownloadEvent? {
        switch name {
        case "retrying":
            let retrying = try decoder.decode(Components.Schemas.Retrying.self, from: data)
            return .retrying(
                DownloadID(retrying.id),
                error: DownloadError(
                    DownloadError.Code(named: retrying.error.code) ?? .invalidResponse, retrying.error.message,
                    status: retrying.error.httpStatus),
                // The daemon's number, kept within what a Duration of milliseconds holds.
                delay: .milliseconds(Int64(min(max(0, retrying.delaySeconds), 9e15) * 1000)))
        case "restarted":
            let restarted = try decoder.decode(Components.Schemas.Restarted.self, from: data)
            return .restarted(DownloadID(restarted.id), reason: restarted.reason)
        case "removed":
            return .removed(DownloadID(try decoder.decode(Components.Schemas.Removed.self, from: data).id))
        default:
            return nil
        }
    }
}
