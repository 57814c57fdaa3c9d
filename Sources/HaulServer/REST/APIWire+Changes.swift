import Foundation
import HTTPTypes
import Haul
import HaulAPI
import HaulWire
import Hummingbird
import NIOCore
import NIOFoundationCompat

/// The operations whose bodies may send a field as `null` (`PATCH /downloads/{id}`, `PATCH /settings`, and the
/// moves, which refuse one): their bodies are decoded once into the generated types with the fields sent as null
/// (`WithNulls`), which the generated routes cannot tell from fields left out, and handed to the operation's one
/// implementation in `APIHandler`.
extension APIWire {
    /// `PATCH /api/v1/downloads/{id}`.
    func updateDownload(id: String, body: ByteBuffer, contentType: String?, accept: String?)
        async throws(APIError) -> Answer
    {
        try Self.checkAccept(accept)
        let update = try Self.decode(Components.Schemas.DownloadUpdate.self, body: body, contentType: contentType)
        let download = try await api.update(id, update.value, nulls: update.nulls)
        return Self.answer(download)
    }

    /// `POST /api/v1/downloads/{id}/move`.
    func moveDownload(id: String, body: ByteBuffer, contentType: String?, accept: String?)
        async throws(APIError) -> Answer
    {
        try Self.checkAccept(accept)
        let move = try Self.decode(Components.Schemas.Move.self, body: body, contentType: contentType)
        return Self.answer(try await api.move(id, move.value, nulls: move.nulls))
    }

    /// `PATCH /api/v1/settings`.
    func updateSettings(body: ByteBuffer, contentType: String?, accept: String?) async throws(APIError) -> Answer {
        try Self.checkAccept(accept)
        let update = try Self.decode(Components.Schemas.SettingsUpdate.self, body: body, contentType: contentType)
        let settings = try await api.updateSettings(update.value, nulls: update.nulls)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        do {
            return Answer(status: .ok, body: .bytes(Array(try encoder.encode(settings))))
        } catch {
            throw APIError(.internalServerError, "internal", "the settings could not be written: \(error)")
        }
    }

    /// A JSON body read once: the generated type, and the fields sent as null.
    static func decode<Value: Decodable>(_ type: Value.Type, body: ByteBuffer, contentType: String?)
        throws(APIError) -> WithNulls<Value>
    {
        guard let contentType, isJSON(contentType) else {
            throw APIError(.unsupportedMediaType, "unsupportedMediaType", "send the body as application/json")
        }
        do {
            return try JSONDecoder().decode(WithNulls<Value>.self, from: Data(buffer: body))
        } catch {
            throw APIError.from(error, body: body)
        }
    }

    /// A download as the answer.
    static func answer(_ download: Components.Schemas.Download) -> Answer {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(1024)
        DownloadJSON.append(download, to: &bytes)
        return Answer(status: .ok, body: .bytes(bytes))
    }
}
