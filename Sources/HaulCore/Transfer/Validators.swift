import Foundation

/// What identifies one version of a remote file: its ETag and Last-Modified, and whether they are strong.
public struct Validators: Hashable, Sendable, Codable {
    /// The entity tag, when the server sent one.
    public var etag: EntityTag?
    /// The raw `Last-Modified` value, when the server sent one.
    public var lastModified: String?
    /// Whether `Last-Modified` is strong: at least 60 s older than the response's `Date` (RFC 9110 §8.8.2.2).
    public var isLastModifiedStrong: Bool

    /// The smallest gap between Last-Modified and Date for Last-Modified to count as strong.
    public static let lastModifiedStrengthSeconds: Int64 = 60

    /// Makes validators from their parts.
    public init(etag: EntityTag? = nil, lastModified: String? = nil, isLastModifiedStrong: Bool = false) {
        self.etag = etag
        self.lastModified = lastModified
        self.isLastModifiedStrong = isLastModifiedStrong
    }

    /// Reads the validators of a response from its headers (`ETag`, `Last-Modified`, `Date`).
    public init(etag etagValue: String?, lastModified lastModifiedValue: String?, date: String?) {
        etag = etagValue.flatMap(EntityTag.init)
        let modified = lastModifiedValue.flatMap(HTTPDate.parse)
        lastModified = modified == nil ? nil : lastModifiedValue
        if let modified, let dateValue = date, let now = HTTPDate.parse(dateValue) {
            isLastModifiedStrong = now - modified >= Self.lastModifiedStrengthSeconds
        } else {
            isLastModifiedStrong = false
        }
    }

    /// No validator at all.
    public var isEmpty: Bool { etag == nil && lastModified == nil }

    /// The value to send in `If-Range`: a strong ETag, else a strong Last-Modified, else nil (RFC 9110 §13.1.5
    /// forbids weak validators there).
    public var ifRangeValue: String? {
        if let etag, !etag.isWeak { return etag.description }
        if etag == nil, let lastModified, isLastModifiedStrong { return lastModified }
        return nil
    }

    /// Whether these validators are strong enough to resume without checking an overlap of bytes.
    public var isStrong: Bool { ifRangeValue != nil }

    /// Whether `other` (a later response) describes a different version than `self`. A validator that either side
    /// lacks is not evidence of change; one present on both sides that differs is.
    public func isChanged(comparedTo other: Validators) -> Bool {
        if let old = etag, let new = other.etag, !old.weaklyMatches(new) { return true }
        if let old = lastModified, let new = other.lastModified,
            HTTPDate.parse(old) != HTTPDate.parse(new)
        {
            return true
        }
        return false
    }
}
