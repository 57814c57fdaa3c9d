import Foundation

extension URL {
    /// `path`, as Foundation gives it (percent escapes decoded, trailing slashes dropped), read straight from the URL's
    /// text when its path has no percent escape, which is nearly every URL: Foundation's `path` parses and decodes
    /// each time it is asked, and every download's answer is named and typed by its path.
    public var decodedPath: String {
        let text = absoluteString.utf8
        let slash = UInt8(ascii: "/")
        // The authority starts after the first "://" (found by hand: the generic `firstRange(of:)` is slow).
        var authority: String.UTF8View.Index?
        var index = text.startIndex
        while index != text.endIndex, authority == nil {
            let next = text.index(after: index)
            if text[index] == UInt8(ascii: ":"), text[next...].starts(with: [slash, slash]) {
                authority = text.index(next, offsetBy: 2)
            }
            index = next
        }
        guard let authority else { return path }
        let isQueryOrFragment = { (byte: UInt8) in byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#") }
        let afterHost = text[authority...].drop { $0 != slash && !isQueryOrFragment($0) }
        var raw = afterHost.prefix { !isQueryOrFragment($0) }
        if raw.contains(UInt8(ascii: "%")) { return path }
        while raw.count > 1, raw.last == slash { raw = raw.dropLast() }
        return String(Substring(raw))
    }
}
