import Foundation
import Haul
import HaulAPI

#if canImport(Glibc)
    import Glibc
#endif

/// Writes the API's `Download` as JSON straight into bytes: the same object the generated `Codable` conformance
/// writes (a test decodes both with the generated decoder and compares them field by field), several times faster
/// and without the intermediate tree Foundation's `JSONEncoder` builds (which also formats dates through ICU): a list
/// of tens of thousands is written in chunks as it is fetched, holding one chunk.
package enum DownloadJSON {
    package static func append(_ download: Components.Schemas.Download, to out: inout [UInt8]) {
        var object = ObjectWriter(&out)
        object.string("id", download.id, &out)
        object.string("url", download.url, &out)
        object.string("path", download.path, &out)
        object.string("directory", download.directory, &out)
        object.string("state", download.state.rawValue, &out)
        object.string("priority", download.priority.rawValue, &out)
        object.number("position", download.position, &out)
        object.integer("receivedBytes", download.receivedBytes, &out)
        object.integer("totalBytes", download.totalBytes, &out)
        object.number("bytesPerSecond", download.bytesPerSecond, &out)
        object.number("etaSeconds", download.etaSeconds, &out)
        object.integer("connections", Int64(download.connections), &out)
        if let segments = download.segments {
            object.key("segments", &out)
            out.append(UInt8(ascii: "["))
            for (index, segment) in segments.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                var inner = ObjectWriter(&out)
                inner.integer("start", segment.start, &out)
                inner.integer("end", segment.end, &out)
                inner.integer("offset", segment.offset, &out)
                inner.close(&out)
            }
            out.append(UInt8(ascii: "]"))
        }
        if let mirrors = download.mirrors {
            object.key("mirrors", &out)
            append(mirrors, to: &out)
        }
        object.key("after", &out)
        out.append(UInt8(ascii: "["))
        for (index, id) in download.after.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            JSONText.appendString(id, to: &out)
        }
        out.append(UInt8(ascii: "]"))
        if let error = download.error {
            object.key("error", &out)
            var inner = ObjectWriter(&out)
            inner.string("code", error.code, &out)
            inner.string("message", error.message, &out)
            inner.integer("httpStatus", error.httpStatus.map(Int64.init), &out)
            inner.close(&out)
        }
        object.bool("resumable", download.resumable, &out)
        object.integer("limitRate", download.limitRate, &out)
        object.date("createdAt", download.createdAt, &out)
        object.date("completedAt", download.completedAt, &out)
        object.string("origin", download.origin.rawValue, &out)
        object.key("options", &out)
        let options = download.options
        var inner = ObjectWriter(&out)
        inner.integer("connections", Int64(options.connections), &out)
        inner.integer("minSplitSize", options.minSplitSize, &out)
        inner.string("checksum", options.checksum, &out)
        inner.key("headers", &out)
        var headers = ObjectWriter(&out)
        for (name, value) in options.headers.additionalProperties.sorted(by: { $0.key < $1.key }) {
            headers.string(name, value, &out)
        }
        headers.close(&out)
        inner.string("userAgent", options.userAgent, &out)
        inner.number("timeoutSeconds", options.timeoutSeconds, &out)
        inner.integer("retries", Int64(options.retries), &out)
        inner.bool("overwrite", options.overwrite, &out)
        inner.bool("continuePartial", options.continuePartial, &out)
        if let mirrors = options.mirrors {
            inner.key("mirrors", &out)
            out.append(UInt8(ascii: "["))
            for (index, url) in mirrors.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONText.appendString(url, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        }
        inner.close(&out)
        object.string("sha256", download.sha256, &out)
        // Always there: null while no worker runs it.
        object.key("worker", &out)
        if let worker = download.worker {
            JSONText.appendString(worker, to: &out)
        } else {
            out.append(contentsOf: "null".utf8)
        }
        object.close(&out)
    }

    /// One download's JSON, on its own (reading one, adding one).
    package static func bytes(of snapshot: DownloadManager.Snapshot) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(1024)
        append(Components.Schemas.Download(snapshot), to: &bytes)
        return bytes
    }

    /// Whether an `Accept` value (nil: none sent) takes the JSON these answers are: the fast paths answer only
    /// those, and leave the rest to the generated routes' content negotiation.
    package static func isAccepted(_ accept: String?) -> Bool {
        accept.map { $0.contains("application/json") || $0.contains("*/*") } ?? true
    }

    /// A `progress` event's data, as the generated `Codable` conformance writes it (the most frequent event while
    /// downloads run; `JSONEncoder` spent tens of microseconds on each).
    package static func append(_ progress: Components.Schemas.Progress, to out: inout [UInt8]) {
        var object = ObjectWriter(&out)
        object.string("id", progress.id, &out)
        object.integer("receivedBytes", progress.receivedBytes, &out)
        object.integer("totalBytes", progress.totalBytes, &out)
        object.number("bytesPerSecond", progress.bytesPerSecond, &out)
        object.number("etaSeconds", progress.etaSeconds, &out)
        object.integer("connections", Int64(progress.connections), &out)
        if let mirrors = progress.mirrors {
            object.key("mirrors", &out)
            append(mirrors, to: &out)
        }
        object.close(&out)
    }

    /// A list of servers' states.
    static func append(_ mirrors: [Components.Schemas.Mirror], to out: inout [UInt8]) {
        out.append(UInt8(ascii: "["))
        for (index, mirror) in mirrors.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            var inner = ObjectWriter(&out)
            inner.string("url", mirror.url, &out)
            inner.string("state", mirror.state.rawValue, &out)
            inner.string("reason", mirror.reason, &out)
            inner.integer("connections", Int64(mirror.connections), &out)
            inner.integer("receivedBytes", mirror.receivedBytes, &out)
            inner.number("bytesPerSecond", mirror.bytesPerSecond, &out)
            inner.close(&out)
        }
        out.append(UInt8(ascii: "]"))
    }

    /// `{"downloads":[…],"nextCursor":…}` for the downloads of `ids`, fetched `batch` at a time with `fetch` and
    /// written in chunks of about `chunkSize` bytes: memory stays flat however long the list.
    package static func list<ID>(
        ids: [ID], nextCursor: String?, chunkSize: Int = 64 << 10, batch: Int = 256,
        fetch: ([ID]) async throws -> [Components.Schemas.Download],
        emit: ([UInt8]) async throws -> Void
    ) async throws {
        var chunk = Array("{\"downloads\":[".utf8)
        chunk.reserveCapacity(chunkSize + 4096)
        var isFirst = true
        var start = 0
        while start < ids.count {
            let end = min(start + batch, ids.count)
            for download in try await fetch(Array(ids[start..<end])) {
                if !isFirst { chunk.append(UInt8(ascii: ",")) }
                isFirst = false
                append(download, to: &chunk)
                if chunk.count >= chunkSize {
                    try await emit(chunk)
                    chunk.removeAll(keepingCapacity: true)
                }
            }
            start = end
        }
        chunk.append(UInt8(ascii: "]"))
        if let nextCursor {
            chunk.append(contentsOf: ",\"nextCursor\":".utf8)
            JSONText.appendString(nextCursor, to: &chunk)
        }
        chunk.append(UInt8(ascii: "}"))
        try await emit(chunk)
    }
}

/// One JSON object being written into `out`: keys in the order given, a field whose value is nil left out (as the
/// generated encoder leaves it out).
package struct ObjectWriter {
    private var isFirst = true

    package init(_ out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
    }

    package mutating func key(_ name: String, _ out: inout [UInt8]) {
        if !isFirst { out.append(UInt8(ascii: ",")) }
        isFirst = false
        JSONText.appendString(name, to: &out)
        out.append(UInt8(ascii: ":"))
    }

    package mutating func string(_ name: String, _ value: String?, _ out: inout [UInt8]) {
        guard let value else { return }
        key(name, &out)
        JSONText.appendString(value, to: &out)
    }

    package mutating func integer(_ name: String, _ value: Int64?, _ out: inout [UInt8]) {
        guard let value else { return }
        key(name, &out)
        JSONText.appendInteger(value, to: &out)
    }

    package mutating func number(_ name: String, _ value: Double?, _ out: inout [UInt8]) {
        guard let value else { return }
        key(name, &out)
        JSONText.appendNumber(value, to: &out)
    }

    package mutating func bool(_ name: String, _ value: Bool?, _ out: inout [UInt8]) {
        guard let value else { return }
        key(name, &out)
        out.append(contentsOf: (value ? "true" : "false").utf8)
    }

    package mutating func date(_ name: String, _ value: Date?, _ out: inout [UInt8]) {
        guard let value else { return }
        key(name, &out)
        JSONText.appendDate(value, to: &out)
    }

    package func close(_ out: inout [UInt8]) {
        out.append(UInt8(ascii: "}"))
    }
}

/// JSON scalars, as Foundation's encoder writes them (RFC 8259 strings, ISO 8601 dates in UTC to the second).
package enum JSONText {
    private static let hex = Array("0123456789abcdef".utf8)

    package static func appendString(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most strings need no escape: copied whole, from the string's own storage when it has one.
        let copied = text.utf8.withContiguousStorageIfAvailable { bytes -> Bool in
            for byte in bytes where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                return false
            }
            out.append(contentsOf: bytes)
            return true
        }
        if copied == true {
            out.append(UInt8(ascii: "\""))
            return
        }
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0x0F)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// A finite number: integral values without a fraction (as `JSONEncoder` writes `2.0` as `2`), others in
    /// Swift's shortest round-trip form.
    package static func appendNumber(_ value: Double, to out: inout [UInt8]) {
        guard value.isFinite else {
            out.append(UInt8(ascii: "0"))
            return
        }
        if value == value.rounded(), abs(value) < 1e15 {
            appendInteger(Int64(value), to: &out)
        } else {
            out.append(contentsOf: value.description.utf8)
        }
    }

    /// An integer in decimal, written digit by digit (no `String` made for it).
    package static func appendInteger(_ value: Int64, to out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        // The magnitude as unsigned, so that Int64.min has one.
        var magnitude = value.magnitude
        if magnitude < 10 {
            out.append(UInt8(ascii: "0") + UInt8(magnitude))
            return
        }
        var digits: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            while magnitude > 0 {
                buffer[31 - count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            }
            out.append(contentsOf: buffer[(32 - count)...])
        }
    }

    /// `2026-11-23T01:08:05Z`: what the generated code's ISO 8601 transcoder writes.
    package static func appendDate(_ date: Date, to out: inout [UInt8]) {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) {
            out.append(UInt8(ascii: "0") + UInt8(value / 10))
            out.append(UInt8(ascii: "0") + UInt8(value % 10))
        }
        out.append(UInt8(ascii: "\""))
        let year = Int32(parts.tm_year) + 1900
        two(year / 100)
        two(year % 100)
        out.append(UInt8(ascii: "-"))
        two(parts.tm_mon + 1)
        out.append(UInt8(ascii: "-"))
        two(parts.tm_mday)
        out.append(UInt8(ascii: "T"))
        two(parts.tm_hour)
        out.append(UInt8(ascii: ":"))
        two(parts.tm_min)
        out.append(UInt8(ascii: ":"))
        two(parts.tm_sec)
        out.append(contentsOf: "Z\"".utf8)
    }
}
