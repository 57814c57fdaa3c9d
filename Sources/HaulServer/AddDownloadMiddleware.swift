import HTTPTypes
import Haul
import HaulAPI
import HaulCore
import HaulWire
import Hummingbird
import NIOCore

/// `POST /api/v1/downloads`, the most frequent write, answered here: the body read with `AddDownloadJSON`, checked by
/// the same code as the generated route (`APIHandler.request(from:index:defaults:)`), added with one wait for the
/// manager, and answered with `DownloadJSON`. Through the generated route an add cost four times a bare request of
/// the same HTTP server: Foundation's decoder and encoder, three waits for the manager, and the layers in between.
///
/// Everything unusual goes on to the generated route, which answers it as the OpenAPI document says: another content
/// type, an `Accept` that does not take JSON, a body the strict reader does not take (nulls, unknown fields, wrong
/// types, malformed JSON). Errors of the checks and of the manager are the same `APIError`s the route would throw.
struct AddDownloadMiddleware: RouterMiddleware {
    typealias Context = HaulRequestContext
    let handler: APIHandler

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        guard request.method == .post, request.uri.path == "/api/v1/downloads", request.uri.query == nil,
            let type = request.headers[.contentType], Self.isJSON(type),
            DownloadJSON.isAccepted(request.headers[.accept])
        else {
            return try await next(request, context)
        }
        if let length = request.headers[.contentLength].flatMap(Int.init), length > BodyMiddleware.limit {
            throw APIError(
                .contentTooLarge, "payloadTooLarge", "the body is \(length) bytes, over \(BodyMiddleware.limit)")
        }
        var request = request
        let buffer: ByteBuffer
        do { buffer = try await request.collectBody(upTo: BodyMiddleware.limit) } catch {
            throw APIError(.contentTooLarge, "payloadTooLarge", "the body is over \(BodyMiddleware.limit) bytes")
        }
        guard let body = buffer.withUnsafeReadableBytes({ AddDownloadJSON.parse($0) }) else {
            request.body = .init(buffer: buffer)
            return try await next(request, context)
        }
        return try await handler.add(consume body)
    }

    /// Whether a Content-Type names JSON (`application/json`, any parameters).
    static func isJSON(_ type: String) -> Bool {
        var type = type
        return type.withUTF8 { bytes in
            // The media type: up to a ';', spaces and tabs around it.
            var start = 0
            var end = bytes.firstIndex(of: UInt8(ascii: ";")) ?? bytes.count
            while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
            while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
            let expected = Self.json
            guard end - start == expected.count else { return false }
            for index in 0..<expected.count {
                let byte = bytes[start + index]
                let lowered = byte >= 0x41 && byte <= 0x5A ? byte + 0x20 : byte
                if lowered != expected[index] { return false }
            }
            return true
        }
    }

    private static let json = Array("application/json".utf8)
}

extension APIHandler {
    /// Adds one download and answers as the generated route does: 201 with the download's JSON and its `Location`
    /// for a new one, 200 with the existing one; the errors are the route's.
    func addOne(_ item: Components.Schemas.AddDownload, defaults: ManagerSettings) async throws(APIError) -> (
        status: HTTPResponse.Status, location: String?, json: [UInt8]
    ) {
        let request = try request(from: item, index: nil, defaults: defaults)
        let added: (added: DownloadManager.Added, download: DownloadManager.Snapshot, commit: DownloadStore.Commit)
        do {
            added = try await manager.addOneDeferringCommit(request)
            try await manager.committed(added.commit, rollingBack: [added.added])
        } catch {
            throw APIError(error)
        }
        let bytes = DownloadJSON.bytes(of: added.download)
        return added.added.isNew
            ? (.created, "/api/v1/downloads/\(added.added.id)", bytes) : (.ok, nil, bytes)
    }

    /// Adds what a parsed body asks for and answers as the generated route does: 201 with the download and its
    /// `Location` for a new one, 200 with the existing one, 200 with the list for a list.
    func add(_ body: consuming AddDownloadJSON.Body) async throws -> Response {
        let defaults = manager.settingsNow
        switch consume body {
        case .one(let item):
            let answer = try await addOne(item, defaults: defaults)
            var headers: HTTPFields = [.contentType: "application/json; charset=utf-8"]
            if let location = answer.location { headers[.location] = location }
            return Response(
                status: answer.status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: answer.json)))
        case .list(var items):
            var requests: [DownloadRequest] = []
            requests.reserveCapacity(items.count)
            for (index, item) in items.enumerated() {
                requests.append(try request(from: item, index: index, defaults: defaults))
            }
            // The parsed items are not needed any more: freed before the manager makes the records (10,000 of
            // them held about 3 MiB at the daemon's peak).
            items = []
            let added: [DownloadManager.Added]
            let commit: DownloadStore.Commit
            do { (added, commit) = try await manager.addDeferringCommit(requests) } catch {
                throw APIError(error.error, index: error.index)
            }
            do { try await manager.committed(commit, rollingBack: added) } catch { throw APIError(error) }
            let ids = added.map(\.id)
            let manager = manager
            return Response(
                status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
                body: ResponseBody { writer in
                    try await DownloadJSON.list(ids: ids, nextCursor: nil) { chunk in
                        await manager.snapshots(ofExisting: chunk).map(Components.Schemas.Download.init)
                    } emit: { bytes in
                        try await writer.write(ByteBuffer(bytes: bytes))
                    }
                    try await writer.finish(nil)
                })
        }
    }
}
