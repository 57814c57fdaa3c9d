import Foundation

/// A parsed `Content-Range` header (RFC 9110 §14.4) for the `bytes` unit.
public enum ContentRange: Equatable, Sendable {
    /// `bytes first-last/total`, total nil when the server sent `*`.
    case satisfied(first: Int64, last: Int64, total: Int64?)
    /// `bytes */total`, as sent with 416.
    case unsatisfied(total: Int64)

    /// The largest length Haul accepts anywhere (1 EiB); larger values are treated as garbage.
    public static let maximumLength: Int64 = 1 << 60

    /// Parses the header value; nil for anything malformed: another unit, last before first, last past the total,
    /// numbers that overflow, signs, or stray characters.
    public init?(_ value: String) {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst("bytes ".count).trimmingCharacters(in: .whitespaces)
        let halves = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard halves.count == 2 else { return nil }
        let rangePart = halves[0]
        let totalPart = halves[1]
        if rangePart == "*" {
            guard let total = Self.number(totalPart) else { return nil }
            self = .unsatisfied(total: total)
            return
        }
        let bounds = rangePart.split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = Self.number(bounds[0]), let last = Self.number(bounds[1]), last >= first
        else { return nil }
        var total: Int64?
        if totalPart != "*" {
            guard let value = Self.number(totalPart), last < value else { return nil }
            total = value
        }
        self = .satisfied(first: first, last: last, total: total)
    }

    /// A non-negative decimal with digits only, no larger than `maximumLength`.
    static func number(_ text: Substring) -> Int64? {
        // Over the UTF-8 bytes: a Character's `isNumber` asks Unicode's tables, and every response's length comes
        // through here. A value past a tenth of the largest is refused before it is multiplied: it cannot overflow.
        let bytes = text.utf8
        guard !bytes.isEmpty, bytes.count <= 19 else { return nil }
        var value: Int64 = 0
        for byte in bytes {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), value <= maximumLength / 10 else { return nil }
            value = value * 10 + Int64(byte - UInt8(ascii: "0"))
        }
        return value <= maximumLength ? value : nil
    }

    /// Number of bytes the satisfied range covers.
    public var length: Int64? {
        if case .satisfied(let first, let last, _) = self { return last - first + 1 }
        return nil
    }
}
