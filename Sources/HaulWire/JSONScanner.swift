#if canImport(Glibc)
    import Glibc
#endif

/// A reader of JSON tokens over bytes (RFC 8259), for the hand-written decoders: each method skips the whitespace
/// before its token and returns nil, consuming nothing it can promise, when the next token is not what it reads.
package struct JSONScanner {
    private let bytes: UnsafeRawBufferPointer
    package private(set) var index = 0
    private static let trueWord = Array("true".utf8)
    private static let falseWord = Array("false".utf8)

    package init(_ bytes: UnsafeRawBufferPointer) {
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
    package mutating func peek() -> UInt8? {
        skipSpace()
        return index < bytes.count ? bytes[index] : nil
    }

    package mutating func advance() { index += 1 }

    /// Whether only whitespace is left.
    package var isAtEnd: Bool {
        mutating get {
            skipSpace()
            return index == bytes.count
        }
    }

    /// Consumes `byte` when it comes next.
    package mutating func take(_ byte: UInt8) -> Bool {
        guard peek() == byte else { return false }
        index += 1
        return true
    }

    /// The bytes of a string that is plain ASCII without escapes, as the names of the fields the hand-written readers
    /// know are; nil for any other string (the reader then leaves the text to Foundation's decoder). Matching a name by
    /// its bytes spares making a `String` of each of a download's 25 names and hashing it, for every event. The bytes
    /// are the scanner's, valid while its buffer is.
    package mutating func name() -> UnsafeRawBufferPointer? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = index
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return UnsafeRawBufferPointer(rebasing: bytes[start..<(index - 1)])
            }
            guard byte >= 0x20, byte < 0x80, byte != UInt8(ascii: "\\") else { return nil }
            index += 1
        }
        return nil
    }

    /// Whether `name` (from `name()`) is `word`.
    package static func matches(_ name: UnsafeRawBufferPointer, _ word: StaticString) -> Bool {
        name.count == word.utf8CodeUnitCount
            && (name.count == 0 || memcmp(name.baseAddress!, word.utf8Start, name.count) == 0)
    }

    /// A string, unescaped; nil for invalid UTF-8, a raw control character, a bad escape or a lone surrogate.
    package mutating func string() -> String? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = index
        // Bytes above 0x7F seen: text that is all ASCII needs no check. `String(validating:as:)` is generic over the
        // encoding and looks up its conformances at run time on every call; `String(decoding:as:)` of ASCII is the
        // same string.
        var high: UInt8 = 0
        // The common case: no escape, so the bytes are the string.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
                index += 1
                return high < 0x80 ? String(decoding: slice, as: UTF8.self) : String(validating: slice, as: UTF8.self)
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { return nil }
            high |= byte
            index += 1
        }
        var utf8 = Array(bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return high < 0x80 ? String(decoding: utf8, as: UTF8.self) : String(validating: utf8, as: UTF8.self)
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
                    if unicode.value >= 0x80 { high = 0xFF }
                default:
                    return nil
                }
            default:
                if byte < 0x20 { return nil }
                high |= byte
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
    package mutating func integer() -> Int64? {
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
    package mutating func number() -> Double? {
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
    package mutating func bool() -> Bool? {
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

    /// `null`.
    package mutating func null() -> Bool {
        skipSpace()
        guard index + 4 <= bytes.count, bytes[index] == UInt8(ascii: "n"), bytes[index + 1] == UInt8(ascii: "u"),
            bytes[index + 2] == UInt8(ascii: "l"), bytes[index + 3] == UInt8(ascii: "l")
        else { return false }
        index += 4
        return true
    }

    /// Skips one value of any kind, checked as strictly as the readers above (at most `depth` levels of nesting);
    /// false when it is not valid JSON.
    package mutating func skipValue(depth: Int = 32) -> Bool {
        guard depth > 0 else { return false }
        switch peek() {
        case UInt8(ascii: "\""): return string() != nil
        case UInt8(ascii: "{"):
            index += 1
            if take(UInt8(ascii: "}")) { return true }
            while true {
                guard string() != nil, take(UInt8(ascii: ":")), skipValue(depth: depth - 1) else { return false }
                if take(UInt8(ascii: ",")) { continue }
                return take(UInt8(ascii: "}"))
            }
        case UInt8(ascii: "["):
            index += 1
            if take(UInt8(ascii: "]")) { return true }
            while true {
                guard skipValue(depth: depth - 1) else { return false }
                if take(UInt8(ascii: ",")) { continue }
                return take(UInt8(ascii: "]"))
            }
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return bool() != nil
        case UInt8(ascii: "n"): return null()
        default: return number() != nil
        }
    }
}
