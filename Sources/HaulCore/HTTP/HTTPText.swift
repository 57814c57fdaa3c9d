/// Small text helpers for HTTP fields, over UTF-8: Foundation's `trimmingCharacters(in:)` goes through
/// `CharacterSet` and grapheme breaking, and was a few percent of every API request and every response head.
extension StringProtocol {
    /// The text without leading and trailing spaces and tabs (RFC 9110's optional whitespace).
    public var trimmingHTTPSpace: String {
        // On the UTF-8 view's own indices: no copy of the bytes (a header value is trimmed several times a
        // response). Spaces and tabs are single bytes, so the ends found are scalar boundaries.
        let bytes = self.utf8
        var start = bytes.startIndex
        while start < bytes.endIndex, bytes[start] == 0x20 || bytes[start] == 0x09 {
            start = bytes.index(after: start)
        }
        // One pass forward (a StringProtocol's UTF-8 view only goes forward): the end is past the last other byte.
        var end = start
        var index = start
        while index < bytes.endIndex {
            let next = bytes.index(after: index)
            if bytes[index] != 0x20, bytes[index] != 0x09 { end = next }
            index = next
        }
        if start == bytes.startIndex, end == bytes.endIndex { return String(self) }
        return String(self[start..<end])
    }

    /// Whether the text equals `lowercased` (which is in lower case) ignoring ASCII case.
    public func equalsIgnoringASCIICase(_ lowercased: String) -> Bool {
        self.utf8.elementsEqual(lowercased.utf8, by: byteMatchesIgnoringASCIICase)
    }

    /// Whether the text, a comma-separated list (RFC 9110 §5.6.1), has an element equal to `lowercased` (which is in
    /// lower case) ignoring ASCII case and the spaces around it; over the UTF-8 bytes, with no array or copies made.
    public func listContainsIgnoringASCIICase(_ lowercased: String) -> Bool {
        let bytes = self.utf8
        let isSpace = { (byte: UInt8) in byte == 0x20 || byte == 0x09 }
        var index = bytes.startIndex
        while true {
            // One element, forward only (a StringProtocol's UTF-8 view goes no other way): its first and past its
            // last byte that is not a space.
            var first: Self.UTF8View.Index?
            var past = index
            while index != bytes.endIndex, bytes[index] != UInt8(ascii: ",") {
                let next = bytes.index(after: index)
                if !isSpace(bytes[index]) {
                    if first == nil { first = index }
                    past = next
                }
                index = next
            }
            if let first,
                bytes[first..<past].elementsEqual(lowercased.utf8, by: byteMatchesIgnoringASCIICase)
            {
                return true
            }
            guard index != bytes.endIndex else { return false }
            index = bytes.index(after: index)
        }
    }

    /// Whether `lowercased` (which is in lower case, and not empty) occurs in the text ignoring ASCII case, with no
    /// lowercased copy made.
    public func containsIgnoringASCIICase(_ lowercased: String) -> Bool {
        let bytes = self.utf8
        var start = bytes.startIndex
        while start != bytes.endIndex {
            var index = start
            var matched = true
            for wanted in lowercased.utf8 {
                guard index != bytes.endIndex else { return false }
                let byte = bytes[index]
                guard byteMatchesIgnoringASCIICase(byte, wanted) else {
                    matched = false
                    break
                }
                index = bytes.index(after: index)
            }
            if matched { return true }
            start = bytes.index(after: start)
        }
        return false
    }
}

/// The same helpers on a field's bytes, for a value read through `String.withUTF8` (no string is made): the daemon
/// reads `Authorization`, `Prefer` and `Content-Type` of every request this way.
extension Slice where Base == UnsafeBufferPointer<UInt8> {
    /// The bytes without leading and trailing spaces and tabs (RFC 9110's optional whitespace).
    @inlinable
    public var trimmingHTTPSpace: Self {
        var trimmed = self
        while let first = trimmed.first, first == 0x20 || first == 0x09 { trimmed.removeFirst() }
        while let last = trimmed.last, last == 0x20 || last == 0x09 { trimmed.removeLast() }
        return trimmed
    }

    /// Whether the bytes equal `lowercased` (which is in lower case) ignoring ASCII case.
    @inlinable
    public func equalsIgnoringASCIICase(_ lowercased: some Collection<UInt8>) -> Bool {
        count == lowercased.count
            && zip(self, lowercased).allSatisfy(byteMatchesIgnoringASCIICase)
    }
}

extension String {
    /// Whether the text ends in `lowercased` (which is in lower case) ignoring ASCII case.
    public func hasSuffixIgnoringASCIICase(_ lowercased: String) -> Bool {
        let (bytes, wanted) = (utf8, lowercased.utf8)
        return bytes.count >= wanted.count
            && bytes.suffix(wanted.count).elementsEqual(wanted, by: byteMatchesIgnoringASCIICase)
    }
}

/// Whether `byte` is `lowercased` (a byte in lower case) ignoring ASCII case: the comparison of every helper here.
@inlinable
public func byteMatchesIgnoringASCIICase(_ byte: UInt8, _ lowercased: UInt8) -> Bool {
    byte == lowercased || (byte >= 0x41 && byte <= 0x5A && byte + 0x20 == lowercased)
}

/// Whether two header names are equal ignoring ASCII case (RFC 9110 field names are case-insensitive ASCII).
/// Compared in the strings' own bytes where they have them (every header a request or an answer carries is looked up
/// by name this way, several times a response).
@inlinable
public func headerNamesEqual(_ a: String, _ b: String) -> Bool {
    guard a.utf8.count == b.utf8.count else { return false }
    let compared = a.utf8.withContiguousStorageIfAvailable { x in
        b.utf8.withContiguousStorageIfAvailable { y in
            for index in x.indices where !namesByteMatch(x[index], y[index]) { return false }
            return true
        }
    }
    if let compared, let compared { return compared }
    return a.utf8.elementsEqual(b.utf8, by: namesByteMatch)
}

/// Whether two bytes of header names are equal ignoring ASCII case.
@inlinable
func namesByteMatch(_ x: UInt8, _ y: UInt8) -> Bool {
    x == y || (x | 0x20 == y | 0x20 && (x | 0x20) >= 0x61 && (x | 0x20) <= 0x7A)
}
