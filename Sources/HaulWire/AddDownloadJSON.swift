import HaulAPI

/// Reads the body of `POST /api/v1/downloads` (one `AddDownload` object, or a list of them) straight from its bytes:
/// the codec of the add operation (`APIWire`). Foundation's `JSONDecoder` builds a tree of the whole body first, which
/// for a list of thousands costs more than checking them.
///
/// It reads only what it can read exactly as the generated decoder would: plain JSON with known fields of the right
/// types. Anything else (a null, an unknown or repeated field, a number with a fraction where an integer belongs, a
/// value of the wrong type, invalid UTF-8, malformed JSON) gives nil, and the body is read by Foundation's decoder
/// into the generated types, whose errors name the field. So this reader never decides an error.
public enum AddDownloadJSON {
    /// A parsed body.
    package enum Body: Equatable {
        case one(Components.Schemas.AddDownload)
        case list([Components.Schemas.AddDownload])
    }

    /// The body in `bytes`, or nil when the generated route must read it.
    package static func parse(_ bytes: UnsafeRawBufferPointer) -> Body? {
        var scanner = JSONScanner(bytes)
        let body: Body
        switch scanner.peek() {
        case UInt8(ascii: "{"):
            guard let item = addDownload(&scanner) else { return nil }
            body = .one(item)
        case UInt8(ascii: "["):
            scanner.advance()
            var items: [Components.Schemas.AddDownload] = []
            // An empty list is rare; the generated route answers it.
            if scanner.peek() == UInt8(ascii: "]") { return nil }
            while true {
                guard let item = addDownload(&scanner) else { return nil }
                items.append(item)
                if scanner.take(UInt8(ascii: ",")) { continue }
                guard scanner.take(UInt8(ascii: "]")) else { return nil }
                break
            }
            body = .list(items)
        default:
            return nil
        }
        return scanner.isAtEnd ? body : nil
    }

    /// The body for a list of `items`, as the command line's `haul add` sends it: the fields that are set, in the
    /// order of the document; nil when an item sets a field this writer does not write (TLS, proxy, credentials,
    /// cookies and any the document gains later), which `JSONEncoder` then writes. Foundation's `JSONEncoder` builds a
    /// tree of the whole list before the request can go out.
    public static func encode(_ items: [Components.Schemas.AddDownload]) -> [UInt8]? {
        guard items.allSatisfy(isPlain) else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(items.count * 96)
        out.append(UInt8(ascii: "["))
        for (index, item) in items.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            append(item, to: &out)
        }
        out.append(UInt8(ascii: "]"))
        return out
    }

    /// Whether `item` sets only the fields `append` writes: the same item rebuilt from those fields alone is equal.
    private static func isPlain(_ item: Components.Schemas.AddDownload) -> Bool {
        var plain = Components.Schemas.AddDownload(url: item.url)
        plain.directory = item.directory
        plain.filename = item.filename
        plain.priority = item.priority
        plain.after = item.after
        plain.connections = item.connections
        plain.minSplitSize = item.minSplitSize
        plain.checksum = item.checksum
        plain.headers = item.headers
        plain.limitRate = item.limitRate
        plain.paused = item.paused
        plain.overwrite = item.overwrite
        plain.continuePartial = item.continuePartial
        plain.userAgent = item.userAgent
        plain.timeoutSeconds = item.timeoutSeconds
        plain.retries = item.retries
        plain.computeSha256 = item.computeSha256
        return plain == item
    }

    private static func append(_ item: Components.Schemas.AddDownload, to out: inout [UInt8]) {
        var first = true
        func key(_ name: String) {
            out.append(UInt8(ascii: first ? "{" : ","))
            first = false
            JSONText.appendString(name, to: &out)
            out.append(UInt8(ascii: ":"))
        }
        func string(_ name: String, _ value: String?) {
            guard let value else { return }
            key(name)
            JSONText.appendString(value, to: &out)
        }
        func integer(_ name: String, _ value: Int64?) {
            guard let value else { return }
            key(name)
            JSONText.appendInteger(value, to: &out)
        }
        func bool(_ name: String, _ value: Bool?) {
            guard let value else { return }
            key(name)
            out.append(contentsOf: (value ? "true" : "false").utf8)
        }
        string("url", item.url)
        string("directory", item.directory)
        string("filename", item.filename)
        string("priority", item.priority?.rawValue)
        if let after = item.after {
            key("after")
            out.append(UInt8(ascii: "["))
            for (index, id) in after.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONText.appendString(id, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        }
        integer("connections", item.connections.map(Int64.init))
        integer("minSplitSize", item.minSplitSize)
        string("checksum", item.checksum)
        if let headers = item.headers {
            key("headers")
            out.append(UInt8(ascii: "{"))
            for (index, (name, value)) in headers.additionalProperties.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONText.appendString(name, to: &out)
                out.append(UInt8(ascii: ":"))
                JSONText.appendString(value, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
        integer("limitRate", item.limitRate)
        bool("paused", item.paused)
        bool("overwrite", item.overwrite)
        bool("continuePartial", item.continuePartial)
        string("userAgent", item.userAgent)
        if let seconds = item.timeoutSeconds {
            key("timeoutSeconds")
            JSONText.appendNumber(seconds, to: &out)
        }
        integer("retries", item.retries.map(Int64.init))
        bool("computeSha256", item.computeSha256)
        // `url` is required, so the object is open here.
        out.append(UInt8(ascii: "}"))
    }

    /// The field names, in the order of the document (a bit each, to find a repeated one).
    private static let fields: [String: Int] = [
        "url": 0, "directory": 1, "filename": 2, "priority": 3, "after": 4, "connections": 5, "minSplitSize": 6,
        "checksum": 7, "headers": 8, "limitRate": 9, "paused": 10, "overwrite": 11, "continuePartial": 12,
        "userAgent": 13, "timeoutSeconds": 14, "retries": 15, "computeSha256": 16,
    ]

    private static func addDownload(_ scanner: inout JSONScanner) -> Components.Schemas.AddDownload? {
        guard scanner.take(UInt8(ascii: "{")) else { return nil }
        var item = Components.Schemas.AddDownload(url: "")
        var seen = 0
        if !scanner.take(UInt8(ascii: "}")) {
            while true {
                guard let name = scanner.string(), scanner.take(UInt8(ascii: ":")), let field = fields[name],
                    seen & (1 << field) == 0
                else { return nil }
                seen |= 1 << field
                switch field {
                case 0: guard let value = scanner.string() else { return nil }; item.url = value
                case 1: guard let value = scanner.string() else { return nil }; item.directory = value
                case 2: guard let value = scanner.string() else { return nil }; item.filename = value
                case 3:
                    guard let value = scanner.string(), let priority = Components.Schemas.Priority(rawValue: value)
                    else { return nil }
                    item.priority = priority
                case 4:
                    guard scanner.take(UInt8(ascii: "[")) else { return nil }
                    var ids: [String] = []
                    if !scanner.take(UInt8(ascii: "]")) {
                        while true {
                            guard let id = scanner.string() else { return nil }
                            ids.append(id)
                            if scanner.take(UInt8(ascii: ",")) { continue }
                            guard scanner.take(UInt8(ascii: "]")) else { return nil }
                            break
                        }
                    }
                    item.after = ids
                case 5:
                    guard let value = scanner.integer(), let int = Int(exactly: value) else { return nil }
                    item.connections = int
                case 6: guard let value = scanner.integer() else { return nil }; item.minSplitSize = value
                case 7: guard let value = scanner.string() else { return nil }; item.checksum = value
                case 8:
                    guard scanner.take(UInt8(ascii: "{")) else { return nil }
                    var headers: [String: String] = [:]
                    if !scanner.take(UInt8(ascii: "}")) {
                        while true {
                            guard let name = scanner.string(), headers[name] == nil, scanner.take(UInt8(ascii: ":")),
                                let value = scanner.string()
                            else { return nil }
                            headers[name] = value
                            if scanner.take(UInt8(ascii: ",")) { continue }
                            guard scanner.take(UInt8(ascii: "}")) else { return nil }
                            break
                        }
                    }
                    item.headers = .init(additionalProperties: headers)
                case 9: guard let value = scanner.integer() else { return nil }; item.limitRate = value
                case 10: guard let value = scanner.bool() else { return nil }; item.paused = value
                case 11: guard let value = scanner.bool() else { return nil }; item.overwrite = value
                case 12: guard let value = scanner.bool() else { return nil }; item.continuePartial = value
                case 13: guard let value = scanner.string() else { return nil }; item.userAgent = value
                case 14: guard let value = scanner.number() else { return nil }; item.timeoutSeconds = value
                case 15:
                    guard let value = scanner.integer(), let int = Int(exactly: value) else { return nil }
                    item.retries = int
                default: guard let value = scanner.bool() else { return nil }; item.computeSha256 = value
                }
                if scanner.take(UInt8(ascii: ",")) { continue }
                guard scanner.take(UInt8(ascii: "}")) else { return nil }
                break
            }
        }
        // `url` is required.
        return seen & 1 == 1 ? item : nil
    }
}
