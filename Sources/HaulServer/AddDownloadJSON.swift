import HaulAPI

/// Reads the body of `POST /api/v1/downloads` (one `AddDownload` object, or a list of them) straight from its bytes,
/// for the add fast path (`AddDownloadMiddleware`). Foundation's `JSONDecoder` behind the generated route builds a
/// tree of the whole body first and was a fifth of the time of adding a list of 10,000.
///
/// It reads only what it can read exactly as the generated decoder would: plain JSON with known fields of the right
/// types. Anything else (a null, an unknown or repeated field, a number with a fraction where an integer belongs, a
/// value of the wrong type, invalid UTF-8, malformed JSON) gives nil, and the request goes on to the generated route,
/// which answers it as the document says, with the error naming the field. So the fast path never decides an error.
enum AddDownloadJSON {
    /// A parsed body.
    enum Body: Equatable {
        case one(Components.Schemas.AddDownload)
        case list([Components.Schemas.AddDownload])
    }

    /// The body in `bytes`, or nil when the generated route must read it.
    static func parse(_ bytes: UnsafeRawBufferPointer) -> Body? {
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

/// A reader of JSON tokens over bytes (RFC 8259), for the hand-written decoders: each method skips the whitespace
/// before its token and returns nil, consuming nothing it can promise, when the next token is not what it reads.
struct JSONScanner {
    private let bytes: UnsafeRawBufferPointer
    private(set) var index = 0
    private static let trueWord = Array("true".utf8)
    private static let falseWord = Array("false".utf8)

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    private mutating func skipSpace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    /// The next byte after whitespace, nil at the end.
    mutating func peek() -> UInt8? {
        skipSpace()
        return index < bytes.count ? bytes[index] : nil
    }

    mutating func advance() { index += 1 }

    /// Whether only whitespace is left.
    var isAtEnd: Bool {
        mutating get {
            skipSpace()
            return index == bytes.count
        }
    }

    /// Consumes `byte` when it comes next.
    mutating func take(_ byte: UInt8) -> Bool {
        guard peek() == byte else { return false }
        index += 1
        return true
    }

    /// A string, unescaped; nil for invalid UTF-8, a raw control character, a bad escape or a lone surrogate.
    mutating func string() -> String? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = index
        // The common case: no escape, so the bytes are the string.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
                index += 1
                return String(validating: slice, as: UTF8.self)
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { return nil }
            index += 1
        }
        var utf8 = Array(bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(validating: utf8, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard index < bytes.count else { return nil }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(escape)
                case UInt8(ascii: "b"): utf8.append(0x08)
                case UInt8(ascii: "f"): utf8.append(0x0C)
                case UInt8(ascii: "n"): utf8.append(0x0A)
                case UInt8(ascii: "r"): utf8.append(0x0D)
                case UInt8(ascii: "t"): utf8.append(0x09)
                case UInt8(ascii: "u"):
                    guard var scalar = hex4() else { return nil }
                    if (0xD800..<0xDC00).contains(scalar) {
                        // A high surrogate must be followed by an escaped low one.
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                            bytes[index + 1] == UInt8(ascii: "u")
                        else { return nil }
                        index += 2
                        guard let low = hex4(), (0xDC00..<0xE000).contains(low) else { return nil }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { return nil }
                    utf8.append(contentsOf: String(Character(unicode)).utf8)
                default:
                    return nil
                }
            default:
                if byte < 0x20 { return nil }
                utf8.append(byte)
            }
        }
        return nil
    }

    private mutating func hex4() -> UInt32? {
        guard index + 4 <= bytes.count else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    /// An integer written without fraction or exponent (`-12`), nil when it overflows Int64 or is not one.
    mutating func integer() -> Int64? {
        skipSpace()
        let start = index
        var negative = false
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") {
            negative = true
            index += 1
        }
        let digitsStart = index
        var value: Int64 = 0
        while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
            let digit = Int64(bytes[index] - UInt8(ascii: "0"))
            let (times, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) =
                negative ? times.subtractingReportingOverflow(digit) : times.addingReportingOverflow(digit)
            guard !overflow1, !overflow2 else {
                index = start
                return nil
            }
            value = sum
            index += 1
        }
        let digits = index - digitsStart
        // JSON allows no leading zero, and a fraction or exponent makes it a number this does not read.
        guard digits > 0, !(digits > 1 && bytes[digitsStart] == UInt8(ascii: "0")),
            index == bytes.count || ![UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E")].contains(bytes[index])
        else {
            index = start
            return nil
        }
        return value
    }

    /// A JSON number, as a Double.
    mutating func number() -> Double? {
        skipSpace()
        let start = index
        func digits() -> Int {
            let from = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            return index - from
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        let integerStart = index
        let integerDigits = digits()
        guard integerDigits > 0, !(integerDigits > 1 && bytes[integerStart] == UInt8(ascii: "0")) else {
            index = start
            return nil
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else {
                index = start
                return nil
            }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard digits() > 0 else {
                index = start
                return nil
            }
        }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        guard let value = Double(text), value.isFinite else {
            index = start
            return nil
        }
        return value
    }

    /// `true` or `false`.
    mutating func bool() -> Bool? {
        skipSpace()
        func literal(_ word: [UInt8]) -> Bool {
            guard index + word.count <= bytes.count else { return false }
            for offset in 0..<word.count where bytes[index + offset] != word[offset] { return false }
            index += word.count
            return true
        }
        if literal(Self.trueWord) { return true }
        if literal(Self.falseWord) { return false }
        return nil
    }
}
