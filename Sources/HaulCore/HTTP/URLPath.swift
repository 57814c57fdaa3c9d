import Foundation

extension URL {
    /// `path`, as Foundation gives it (percent escapes decoded, trailing slashes dropped), read straight from the URL's
    /// text when its path has no percent escape, which is nearly every URL: Foundation's `path` parses and decodes
    /// each time it is asked, and every download's answer is named and typed by its path.
    public var decodedPath: String {
        var text = absoluteString
        // The bytes of the text, by offset: indexing a `String`'s UTF-8 view checks each index, which cost this
        // more than the rest of naming a download.
        let raw = text.withUTF8 { bytes -> String? in
            let (slash, colon) = (UInt8(ascii: "/"), UInt8(ascii: ":"))
            let endsPath = { (byte: UInt8) in byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#") }
            // The authority starts after the first "://".
            var start = 0
            while start + 2 < bytes.count,
                !(bytes[start] == colon && bytes[start + 1] == slash && bytes[start + 2] == slash)
            {
                start += 1
            }
            guard start + 2 < bytes.count else { return nil }
            start += 3
            while start < bytes.count, bytes[start] != slash, !endsPath(bytes[start]) { start += 1 }
            var end = start
            while end < bytes.count, !endsPath(bytes[end]) {
                if bytes[end] == UInt8(ascii: "%") { return nil }
                end += 1
            }
            while end - start > 1, bytes[end - 1] == slash { end -= 1 }
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
        }
        return raw ?? path
    }
}
