import Foundation
import Haul
import HaulAPI
import HaulCore

/// The part of a download in the event stream (and in the answer to an add) that the command line's output uses.
/// Events are read with this instead of the generated `Download` (which checks every field and refuses unknown ones),
/// since every download sends several events. A reader that ignores the rest keeps working when the document adds
/// fields.
///
/// `read(_:)` reads it straight from the bytes with `JSONScanner`; Foundation's `JSONDecoder` (`decode(_:)`) is the
/// fallback for anything the scanner does not take (escapes it refuses, deeper nesting). Whatever `haul watch` spends
/// reading events is taken from the downloads it follows on the same machine.
public struct BriefDownload: Decodable, Equatable, Sendable {
    public struct Failure: Decodable, Equatable, Sendable {
        public var code: String
        public var message: String
        public var httpStatus: Int?
    }

    public var id: String
    public var url: String
    public var path: String?
    public var directory: String?
    public var state: String
    public var receivedBytes: Int64
    public var totalBytes: Int64?
    public var connections: Int
    public var error: Failure?
    public var sha256: String?

    /// The engine's snapshot of it, with what the brief form does not hold left at defaults.
    public var snapshot: DownloadSnapshot {
        DownloadSnapshot(
            id: DownloadID(id), url: url, path: path, directory: directory,
            state: DownloadState(rawValue: state) ?? .failed, priority: .normal, position: 0,
            receivedBytes: receivedBytes, totalBytes: totalBytes, bytesPerSecond: 0, secondsRemaining: nil,
            connections: connections, segments: nil, after: [],
            error: error.map {
                DownloadError(DownloadError.Code(named: $0.code) ?? .invalidResponse, $0.message, status: $0.httpStatus)
            },
            isResumable: nil, createdAt: Date(timeIntervalSince1970: 0), completedAt: nil, options: DownloadOptions(),
            rateLimit: nil, origin: .api, sha256: sha256)
    }

    /// One download's JSON text (an event's data, read in place): read by the scanner, else by `decoder`.
    public static func decode(_ text: String, with decoder: JSONDecoder) throws -> BriefDownload {
        var text = text
        if let brief = text.withUTF8({ read(UnsafeRawBufferPointer($0)) }) { return brief }
        return try decoder.decode(BriefDownload.self, from: Data(text.utf8))
    }

    /// The download in `bytes`, which hold nothing else, or nil when the scanner does not take them.
    package static func read(_ bytes: UnsafeRawBufferPointer) -> BriefDownload? {
        var scanner = JSONScanner(bytes)
        guard let brief = read(&scanner), scanner.isAtEnd else { return nil }
        return brief
    }

    /// A download object at the scanner, or nil (the scanner then stands anywhere inside it) when it is not one the
    /// scanner reads exactly as `JSONDecoder` would: a field of the wrong type, a repeated field, a missing one.
    package static func read(_ scanner: inout JSONScanner) -> BriefDownload? {
        guard scanner.take(UInt8(ascii: "{")) else { return nil }
        var id: String?
        var url: String?
        var state: String?
        var receivedBytes: Int64?
        var connections: Int?
        var brief = BriefDownload(id: "", url: "", state: "", receivedBytes: 0, connections: 0)
        var seen: UInt16 = 0
        if !scanner.take(UInt8(ascii: "}")) {
            while true {
                guard let name = scanner.name(), scanner.take(UInt8(ascii: ":")) else { return nil }
                let field = Field(name)
                if field != .other {
                    // JSONDecoder takes the last of a repeated key; rare enough to leave to it.
                    guard seen & field.rawValue == 0 else { return nil }
                    seen |= field.rawValue
                }
                switch field {
                case .id:
                    guard let value = scanner.string() else { return nil }
                    id = value
                case .url:
                    guard let value = scanner.string() else { return nil }
                    url = value
                case .state:
                    guard let value = scanner.string() else { return nil }
                    state = value
                case .receivedBytes:
                    guard let value = scanner.integer() else { return nil }
                    receivedBytes = value
                case .connections:
                    guard let value = scanner.integer().flatMap({ Int(exactly: $0) }) else { return nil }
                    connections = value
                case .path:
                    guard let value = optionalString(&scanner) else { return nil }
                    brief.path = value
                case .directory:
                    guard let value = optionalString(&scanner) else { return nil }
                    brief.directory = value
                case .sha256:
                    guard let value = optionalString(&scanner) else { return nil }
                    brief.sha256 = value
                case .totalBytes:
                    if !scanner.null() {
                        guard let value = scanner.integer() else { return nil }
                        brief.totalBytes = value
                    }
                case .error:
                    if !scanner.null() {
                        guard let failure = readFailure(&scanner) else { return nil }
                        brief.error = failure
                    }
                case .other:
                    guard scanner.skipValue() else { return nil }
                }
                if scanner.take(UInt8(ascii: ",")) { continue }
                guard scanner.take(UInt8(ascii: "}")) else { return nil }
                break
            }
        }
        guard let id, let url, let state, let receivedBytes, let connections else { return nil }
        brief.id = id
        brief.url = url
        brief.state = state
        brief.receivedBytes = receivedBytes
        brief.connections = connections
        return brief
    }

    /// The fields read, a bit each (to find a repeated one), told apart by their names' bytes.
    private enum Field: UInt16 {
        case other = 0
        case id = 1
        case url = 2
        case state = 4
        case receivedBytes = 8
        case connections = 16
        case path = 32
        case directory = 64
        case sha256 = 128
        case totalBytes = 256
        case error = 512

        init(_ name: UnsafeRawBufferPointer) {
            let field: Field
            let word: StaticString
            switch (name.count, name.first) {
            case (2, UInt8(ascii: "i")): (field, word) = (.id, "id")
            case (3, UInt8(ascii: "u")): (field, word) = (.url, "url")
            case (5, UInt8(ascii: "s")): (field, word) = (.state, "state")
            case (13, UInt8(ascii: "r")): (field, word) = (.receivedBytes, "receivedBytes")
            case (11, UInt8(ascii: "c")): (field, word) = (.connections, "connections")
            case (4, UInt8(ascii: "p")): (field, word) = (.path, "path")
            case (9, UInt8(ascii: "d")): (field, word) = (.directory, "directory")
            case (6, UInt8(ascii: "s")): (field, word) = (.sha256, "sha256")
            case (10, UInt8(ascii: "t")): (field, word) = (.totalBytes, "totalBytes")
            case (5, UInt8(ascii: "e")): (field, word) = (.error, "error")
            default:
                self = .other
                return
            }
            self = JSONScanner.matches(name, word) ? field : .other
        }
    }

    /// A string or null: `.some(nil)` for null, nil when it is neither.
    private static func optionalString(_ scanner: inout JSONScanner) -> String?? {
        if scanner.null() { return .some(nil) }
        guard let value = scanner.string() else { return nil }
        return .some(value)
    }

    private static func readFailure(_ scanner: inout JSONScanner) -> Failure? {
        guard scanner.take(UInt8(ascii: "{")) else { return nil }
        var code: String?
        var message: String?
        var httpStatus: Int?
        var seen: UInt8 = 0
        if !scanner.take(UInt8(ascii: "}")) {
            while true {
                guard let name = scanner.name(), scanner.take(UInt8(ascii: ":")) else { return nil }
                let bit: UInt8 =
                    JSONScanner.matches(name, "code")
                    ? 1 : JSONScanner.matches(name, "message") ? 2 : JSONScanner.matches(name, "httpStatus") ? 4 : 0
                guard seen & bit == 0 else { return nil }
                seen |= bit
                switch bit {
                case 1:
                    guard let value = scanner.string() else { return nil }
                    code = value
                case 2:
                    guard let value = scanner.string() else { return nil }
                    message = value
                case 4:
                    if !scanner.null() {
                        guard let value = scanner.integer().flatMap({ Int(exactly: $0) }) else { return nil }
                        httpStatus = value
                    }
                default:
                    guard scanner.skipValue() else { return nil }
                }
                if scanner.take(UInt8(ascii: ",")) { continue }
                guard scanner.take(UInt8(ascii: "}")) else { return nil }
                break
            }
        }
        guard let code, let message else { return nil }
        return Failure(code: code, message: message, httpStatus: httpStatus)
    }
}

/// The downloads of a `snapshot` event or of the answer to adding a list, read as `BriefDownload`s.
public struct BriefSnapshot: Decodable, Equatable, Sendable {
    public var downloads: [BriefDownload]

    /// An object with a `downloads` list as text (an event's data, read in place): read by the scanner, else by
    /// `decoder`.
    public static func decode(_ text: String, with decoder: JSONDecoder) throws -> BriefSnapshot {
        var text = text
        if let snapshot = text.withUTF8({ read(UnsafeRawBufferPointer($0)) }) { return snapshot }
        return try decoder.decode(BriefSnapshot.self, from: Data(text.utf8))
    }

    /// An object with a `downloads` list: read by the scanner, else by `decoder`.
    public static func decode(_ data: Data, with decoder: JSONDecoder) throws -> BriefSnapshot {
        if let snapshot = data.withUnsafeBytes({ read($0) }) { return snapshot }
        return try decoder.decode(BriefSnapshot.self, from: data)
    }

    package static func read(_ bytes: UnsafeRawBufferPointer) -> BriefSnapshot? {
        var scanner = JSONScanner(bytes)
        guard scanner.take(UInt8(ascii: "{")) else { return nil }
        var downloads: [BriefDownload]?
        if !scanner.take(UInt8(ascii: "}")) {
            while true {
                guard let name = scanner.name(), scanner.take(UInt8(ascii: ":")) else { return nil }
                if JSONScanner.matches(name, "downloads") {
                    guard downloads == nil, scanner.take(UInt8(ascii: "[")) else { return nil }
                    var list: [BriefDownload] = []
                    if !scanner.take(UInt8(ascii: "]")) {
                        while true {
                            guard let download = BriefDownload.read(&scanner) else { return nil }
                            list.append(download)
                            if scanner.take(UInt8(ascii: ",")) { continue }
                            guard scanner.take(UInt8(ascii: "]")) else { return nil }
                            break
                        }
                    }
                    downloads = list
                } else {
                    guard scanner.skipValue() else { return nil }
                }
                if scanner.take(UInt8(ascii: ",")) { continue }
                guard scanner.take(UInt8(ascii: "}")) else { return nil }
                break
            }
        }
        guard let downloads, scanner.isAtEnd else { return nil }
        return BriefSnapshot(downloads: downloads)
    }
}

/// A `progress` event's data as the command line reads it, straight from the bytes with `JSONScanner`; Foundation's
/// `JSONDecoder` of the generated `Progress` is the fallback for anything the scanner does not take exactly as that
/// decoder would (an unknown or repeated field, a number it reads otherwise). Following 1000 small files, decoding
/// progress events with `JSONDecoder` was an eighth of `haul watch`'s CPU time.
public struct BriefProgress: Equatable, Sendable {
    public var id: String
    public var receivedBytes: Int64
    public var totalBytes: Int64?
    public var bytesPerSecond: Double
    public var etaSeconds: Double?
    public var connections: Int

    /// The engine's progress.
    public var progress: DownloadProgress {
        DownloadProgress(
            id: DownloadID(id), receivedBytes: receivedBytes, totalBytes: totalBytes, bytesPerSecond: bytesPerSecond,
            secondsRemaining: etaSeconds, connections: connections)
    }

    /// One progress event's data (read in place): read by the scanner, else by `decoder`.
    public static func decode(_ text: String, with decoder: JSONDecoder) throws -> BriefProgress {
        var text = text
        if let brief = text.withUTF8({ read(UnsafeRawBufferPointer($0)) }) { return brief }
        let progress = try decoder.decode(Components.Schemas.Progress.self, from: Data(text.utf8))
        return BriefProgress(
            id: progress.id, receivedBytes: progress.receivedBytes, totalBytes: progress.totalBytes,
            bytesPerSecond: progress.bytesPerSecond, etaSeconds: progress.etaSeconds,
            connections: progress.connections)
    }

    /// The progress in `bytes`, which hold nothing else, or nil when the scanner does not take them.
    package static func read(_ bytes: UnsafeRawBufferPointer) -> BriefProgress? {
        var scanner = JSONScanner(bytes)
        guard let brief = read(&scanner), scanner.isAtEnd else { return nil }
        return brief
    }

    /// A progress object at the scanner, or nil when it is not one the scanner reads exactly as the generated
    /// decoder would (which refuses unknown fields: the document allows none).
    package static func read(_ scanner: inout JSONScanner) -> BriefProgress? {
        guard scanner.take(UInt8(ascii: "{")) else { return nil }
        var id: String?
        var receivedBytes: Int64?
        var totalBytes: Int64?
        var bytesPerSecond: Double?
        var etaSeconds: Double?
        var connections: Int?
        var seen: UInt8 = 0
        if !scanner.take(UInt8(ascii: "}")) {
            while true {
                guard let name = scanner.name(), scanner.take(UInt8(ascii: ":")), let bit = Self.bit(of: name),
                    seen & bit == 0
                else { return nil }
                seen |= bit
                switch bit {
                case 1:
                    guard let value = scanner.string() else { return nil }
                    id = value
                case 2:
                    guard let value = scanner.integer() else { return nil }
                    receivedBytes = value
                case 4:
                    if !scanner.null() {
                        guard let value = scanner.integer() else { return nil }
                        totalBytes = value
                    }
                case 8:
                    guard let value = scanner.number() else { return nil }
                    bytesPerSecond = value
                case 16:
                    if !scanner.null() {
                        guard let value = scanner.number() else { return nil }
                        etaSeconds = value
                    }
                default:
                    guard let value = scanner.integer().flatMap({ Int(exactly: $0) }) else { return nil }
                    connections = value
                }
                if scanner.take(UInt8(ascii: ",")) { continue }
                guard scanner.take(UInt8(ascii: "}")) else { return nil }
                break
            }
        }
        guard let id, let receivedBytes, let bytesPerSecond, let connections else { return nil }
        return BriefProgress(
            id: id, receivedBytes: receivedBytes, totalBytes: totalBytes, bytesPerSecond: bytesPerSecond,
            etaSeconds: etaSeconds, connections: connections)
    }

    /// The fields the document defines, a bit each (to find a repeated one).
    private static let fields: [(name: StaticString, bit: UInt8)] = [
        ("id", 1), ("receivedBytes", 2), ("totalBytes", 4), ("bytesPerSecond", 8), ("etaSeconds", 16),
        ("connections", 32),
    ]

    /// The bit of a field the document defines, nil for any other name.
    private static func bit(of name: UnsafeRawBufferPointer) -> UInt8? {
        fields.first { JSONScanner.matches(name, $0.name) }?.bit
    }
}
