import Foundation

/// An `ETag` value (RFC 9110 §8.8.3): an opaque tag, strong or weak.
public struct EntityTag: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The quoted opaque tag, e.g. `"abc"`.
    public var opaqueTag: String
    /// Whether the tag was sent with the `W/` prefix.
    public var isWeak: Bool

    /// Parses a header value; nil when it is not `"…"` or `W/"…"`. Unquoted tags (a common server bug) are accepted
    /// as weak, so they are never used for `If-Range`.
    public init?(_ value: String) {
        // Foundation's trimming only where the value is not plain ASCII: for ASCII it trims spaces and tabs, as this
        // does without building a character set for every response.
        var text =
            value.utf8.allSatisfy { $0 < 0x80 }
            ? value.trimmingHTTPSpace : value.trimmingCharacters(in: .whitespaces)
        var weak = false
        if text.hasPrefix("W/") || text.hasPrefix("w/") {
            weak = true
            text.removeFirst(2)
        }
        // Visible ASCII only (RFC 9110's etagc without obs-text): a tag is sent back in If-Range, and a control
        // character there would make the request invalid.
        guard !text.isEmpty, !text.utf8.contains(UInt8(ascii: ",")),
            text.unicodeScalars.allSatisfy({ (0x21...0x7E).contains($0.value) })
        else {
            return nil
        }
        if text.utf8.count >= 2, text.utf8.first == UInt8(ascii: "\""), text.utf8.last == UInt8(ascii: "\"") {
            opaqueTag = text
            isWeak = weak
        } else {
            opaqueTag = "\"\(text.replacingOccurrences(of: "\"", with: ""))\""
            isWeak = true
        }
    }

    /// Makes a tag from its parts.
    public init(opaqueTag: String, isWeak: Bool) {
        self.opaqueTag = opaqueTag
        self.isWeak = isWeak
    }

    /// The header form.
    public var description: String { isWeak ? "W/\(opaqueTag)" : opaqueTag }

    /// Weak comparison (RFC 9110 §8.8.3.2): the opaque tags match, whatever the weakness.
    public func weaklyMatches(_ other: EntityTag) -> Bool { opaqueTag == other.opaqueTag }
}
