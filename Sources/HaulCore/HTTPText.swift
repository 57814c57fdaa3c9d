/// Small text helpers for HTTP fields, over UTF-8: Foundation's `trimmingCharacters(in:)` goes through
/// `CharacterSet` and grapheme breaking, and was a few percent of every API request and every response head.
extension StringProtocol {
    /// The text without leading and trailing spaces and tabs (RFC 9110's optional whitespace).
    public var trimmingHTTPSpace: String {
        let bytes = Array(self.utf8)
        var start = 0
        var end = bytes.count
        while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
        while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
        if start == 0, end == bytes.count { return String(self) }
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }

    /// Whether the text equals `lowercased` (which is in lower case) ignoring ASCII case.
    public func equalsIgnoringASCIICase(_ lowercased: String) -> Bool {
        self.utf8.elementsEqual(lowercased.utf8) { x, y in
            x == y || (x >= 0x41 && x <= 0x5A && x + 0x20 == y)
        }
    }
}

/// Whether two header names are equal ignoring ASCII case (RFC 9110 field names are case-insensitive ASCII).
@inlinable
public func headerNamesEqual(_ a: String, _ b: String) -> Bool {
    a.utf8.count == b.utf8.count
        && a.utf8.elementsEqual(b.utf8) { x, y in
            x == y || (x | 0x20 == y | 0x20 && (x | 0x20) >= 0x61 && (x | 0x20) <= 0x7A)
        }
}
