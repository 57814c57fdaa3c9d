import Foundation
import HTTPTypes
import Haul
import HaulAPI
import HaulCore
import HaulWire
import Hummingbird
import NIOCore

/// The three most frequent operations (reading one download, adding, listing) with HaulWire's codec in place of the
/// generated one, and the three whose bodies may hold a null (`APIWire+Changes`): the request read by `AddDownloadJSON` (Foundation's decoder for what it declines), the operation's
/// one implementation in `APIHandler` called, and the answer written by `DownloadJSON`. Foundation's `JSONEncoder`
/// was most of a read's time, and listing 20,000 through it held a tree of tens of MiB.
///
/// The router serves these three operations here instead of through the generated routes (`RouteTable` registers
/// these in their place), and the network door's pipeline fast path (`FastDoor`) calls the same functions.
struct APIWire: Sendable {
    let api: APIHandler

    /// An answer: status, headers, and the body as bytes or as a page of downloads written as they are fetched.
    struct Answer: Sendable {
        enum Body: Sendable {
            case bytes([UInt8])
            case page(ids: [DownloadID], nextCursor: String?)
        }

        var status: HTTPResponse.Status
        var location: String?
        var preferenceApplied: String?
        var body: Body

        /// The content type of every answer of the three.
        static let contentType = "application/json; charset=utf-8"
    }

    /// `GET /api/v1/downloads/{id}`.
    func getDownload(id: String, accept: String?) async throws(APIError) -> Answer {
        try Self.checkAccept(accept)
        let output: Operations.GetDownload.Output
        // The Accept header is checked above; the handler reads none (the default list is an array made per read).
        do { output = try await api.getDownload(.init(path: .init(id: id), headers: .init(accept: []))) } catch {
            throw APIError.from(error, body: nil)
        }
        guard case .ok(let ok) = output, case .json(let download) = ok.body else {
            throw APIError(.internalServerError, "internal", "getDownload answered \(output)")
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(1024)
        DownloadJSON.append(download, to: &bytes)
        return Answer(status: .ok, body: .bytes(bytes))
    }

    /// `POST /api/v1/downloads` with its body read: what `AddDownloadJSON` declines is read by Foundation's decoder
    /// into the generated types, whose errors name the item and field.
    func addDownloads(body: ByteBuffer, contentType: String?, accept: String?, prefer: String?)
        async throws(APIError) -> Answer
    {
        try Self.checkAccept(accept)
        guard let contentType, Self.isJSON(contentType) else {
            throw APIError(.unsupportedMediaType, "unsupportedMediaType", "send the body as application/json")
        }
        let payload: Operations.AddDownloads.Input.Body.JsonPayload
        var nulls: [NullField] = []
        switch body.withUnsafeReadableBytes({ AddDownloadJSON.parse($0) }) {
        case .one(let item): payload = .AddDownload(item)
        case .list(let items): payload = .case2(items)
        case nil:
            // What the fast reader declines (a null among them) is read by Foundation's decoder, once.
            let decoded = try Self.decode(
                Operations.AddDownloads.Input.Body.JsonPayload.self, body: body, contentType: contentType)
            payload = decoded.value
            nulls = decoded.nulls
        }
        return try await addDownloads(consume payload, nulls: nulls, accept: nil, prefer: prefer)
    }

    /// `POST /api/v1/downloads` with its body parsed.
    func addDownloads(
        _ payload: consuming Operations.AddDownloads.Input.Body.JsonPayload, nulls: [NullField] = [],
        accept: String?, prefer: String?
    )
        async throws(APIError) -> Answer
    {
        try Self.checkAccept(accept)
        let minimal = APIHandler.prefersMinimal(prefer)
        let applied = minimal ? "return=minimal" : nil
        switch try await api.add(consume payload, nulls: nulls) {
        case .one(let added, let snapshot):
            var bytes: [UInt8] = []
            if minimal {
                bytes = Array(#"{"id":"#.utf8)
                JSONText.appendString(added.id.rawValue, to: &bytes)
                bytes.append(UInt8(ascii: "}"))
            } else {
                bytes = DownloadJSON.bytes(of: snapshot)
            }
            return Answer(
                status: added.isNew ? .created : .ok,
                location: added.isNew ? "/api/v1/downloads/\(added.id)" : nil, preferenceApplied: applied,
                body: .bytes(bytes))
        case .list(let ids):
            guard minimal else { return Answer(status: .ok, body: .page(ids: ids, nextCursor: nil)) }
            var bytes = Array(#"{"ids":["#.utf8)
            bytes.reserveCapacity(ids.count * 40 + 16)
            for (index, id) in ids.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                JSONText.appendString(id.rawValue, to: &bytes)
            }
            bytes.append(contentsOf: "]}".utf8)
            return Answer(status: .ok, preferenceApplied: applied, body: .bytes(bytes))
        }
    }

    /// `GET /api/v1/downloads` with its query: `state` (comma-separated), `limit`, `cursor`; other names are
    /// ignored, and a name given twice counts once (the first).
    func listDownloads(query: [(name: String, value: String)], accept: String?) async throws(APIError) -> Answer {
        try Self.checkAccept(accept)
        var states: [Components.Schemas.State]?
        var limit: Int?
        var cursor: String?
        var seen: Set<String> = []
        for (name, value) in query where seen.insert(name).inserted {
            switch name {
            case "state":
                // An empty value is no state at all, which `downloadsPage` refuses as such.
                var parsed: [Components.Schemas.State] = []
                for text in value.split(separator: ",", omittingEmptySubsequences: false) where !value.isEmpty {
                    guard let state = Components.Schemas.State(rawValue: String(text)) else {
                        throw APIError.invalidField(
                            "state",
                            "'\(text)' is not a state; the states are "
                                + Components.Schemas.State.allCases.map(\.rawValue).joined(separator: ", "))
                    }
                    parsed.append(state)
                }
                states = parsed
            case "limit":
                guard let number = Int(value) else { throw APIError.invalidField("limit", "must be an integer") }
                limit = number
            case "cursor":
                cursor = value
            default:
                continue
            }
        }
        let page = try await api.downloadsPage(states: states, limit: limit, cursor: cursor)
        return Answer(status: .ok, body: .page(ids: page.ids, nextCursor: page.nextCursor))
    }

    /// An `Accept` that does not take JSON gets the 400 the generated routes give.
    static func checkAccept(_ accept: String?) throws(APIError) {
        guard !DownloadJSON.isAccepted(accept) else { return }
        throw APIError(
            .badRequest, "badRequest", "the Accept header '\(accept ?? "")' does not take application/json")
    }

    /// Whether a Content-Type names JSON (`application/json`, any parameters).
    static func isJSON(_ type: String) -> Bool {
        var type = type
        return type.withUTF8 { bytes in
            // The media type: up to a ';', spaces and tabs around it.
            bytes[..<(bytes.firstIndex(of: UInt8(ascii: ";")) ?? bytes.count)].trimmingHTTPSpace
                .equalsIgnoringASCIICase(Self.json)
        }
    }

    private static let json = Array("application/json".utf8)

    // MARK: The router's routes

    /// Registers the three operations on `router`, at the generated routes' paths, with their `method`.
    func register(_ method: HTTPRequest.Method, _ path: String, on router: Router<HaulRequestContext>) -> Bool {
        let wire = self
        switch (method, path) {
        case (.get, "/api/v1/downloads/{id}"):
            router.on(RouterPath(path), method: method) { request, context -> Response in
                let id = Self.downloadID(in: context)
                return try await wire.respond(wire.getDownload(id: id, accept: request.headers[.accept]))
            }
        case (.post, "/api/v1/downloads"):
            router.on(RouterPath(path), method: method) { request, _ -> Response in
                let body = try await Self.body(of: request)
                return try await wire.respond(
                    wire.addDownloads(
                        body: body, contentType: request.headers[.contentType], accept: request.headers[.accept],
                        prefer: request.headers[.prefer]))
            }
        case (.patch, "/api/v1/downloads/{id}"):
            router.on(RouterPath(path), method: method) { request, context -> Response in
                let id = Self.downloadID(in: context)
                let body = try await Self.body(of: request)
                return try await wire.respond(
                    wire.updateDownload(
                        id: id, body: body, contentType: request.headers[.contentType],
                        accept: request.headers[.accept]))
            }
        case (.post, "/api/v1/downloads/{id}/move"):
            router.on(RouterPath(path), method: method) { request, context -> Response in
                let id = Self.downloadID(in: context)
                let body = try await Self.body(of: request)
                return try await wire.respond(
                    wire.moveDownload(
                        id: id, body: body, contentType: request.headers[.contentType],
                        accept: request.headers[.accept]))
            }
        case (.patch, "/api/v1/settings"):
            router.on(RouterPath(path), method: method) { request, _ -> Response in
                let body = try await Self.body(of: request)
                return try await wire.respond(
                    wire.updateSettings(
                        body: body, contentType: request.headers[.contentType], accept: request.headers[.accept]))
            }
        case (.get, "/api/v1/downloads"):
            router.on(RouterPath(path), method: method) { request, _ -> Response in
                let query = request.uri.queryParameters.map { (String($0.key), String($0.value)) }
                return try await wire.respond(wire.listDownloads(query: query, accept: request.headers[.accept]))
            }
        default:
            return false
        }
        return true
    }

    /// The `{id}` of a route's path, percent-decoded.
    static func downloadID(in context: HaulRequestContext) -> String {
        context.parameters.get("id").map { $0.removingPercentEncoding ?? $0 } ?? ""
    }

    /// A request's body: the body middleware has collected it already (at most 8 MiB), so this takes what it holds.
    static func body(of request: Request) async throws -> ByteBuffer {
        var request = request
        return try await request.collectBody(upTo: BodyMiddleware.limit)
    }

    /// A chunk of a page's downloads as the API shows them; a download removed since the page was chosen is left
    /// out.
    func downloads(_ ids: [DownloadID]) async -> [Components.Schemas.Download] {
        await api.manager.snapshots(ofExisting: ids).map(Components.Schemas.Download.init)
    }

    /// The answer as Hummingbird's response; a page is written in chunks as its downloads are fetched.
    func respond(_ answer: Answer) -> Response {
        var headers: HTTPFields = [.contentType: Answer.contentType]
        if let location = answer.location { headers[.location] = location }
        if let applied = answer.preferenceApplied { headers[.preferenceApplied] = applied }
        switch answer.body {
        case .bytes(let bytes):
            return Response(status: answer.status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
        case .page(let ids, let nextCursor):
            let wire = self
            return Response(
                status: answer.status, headers: headers,
                body: ResponseBody { writer in
                    try await DownloadJSON.list(ids: ids, nextCursor: nextCursor) { chunk in
                        await wire.downloads(chunk)
                    } emit: { bytes in
                        try await writer.write(ByteBuffer(bytes: bytes))
                    }
                    try await writer.finish(nil)
                })
        }
    }
}

extension HTTPField.Name {
    /// RFC 7240's request header.
    static let prefer = HTTPField.Name("Prefer")!
    /// RFC 7240's answer header.
    static let preferenceApplied = HTTPField.Name("Preference-Applied")!
}
