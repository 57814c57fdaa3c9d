import Foundation

/// The status and headers of an HTTP response, free of any networking library, with the derived facts the
/// decisions need.
public struct ResponseHead: Sendable, Equatable {
    /// The status code.
    public var status: Int
    /// Header fields in the order received, names as sent.
    public var headers: [(name: String, value: String)]
    /// The start of an error answer's body (a 4xx), when the transport read it: a presigned URL's host says there
    /// that the link expired (`LinkExpiry`).
    public var errorText: String?

    /// Makes a head from its parts.
    public init(status: Int, headers: [(name: String, value: String)] = []) {
        self.status = status
        self.headers = headers
    }

    public static func == (lhs: ResponseHead, rhs: ResponseHead) -> Bool {
        lhs.status == rhs.status && lhs.headers.map(\.name) == rhs.headers.map(\.name)
            && lhs.headers.map(\.value) == rhs.headers.map(\.value)
    }

    /// Every value of a header, case-insensitively by name.
    public func values(_ name: String) -> [String] {
        headers.filter { headerNamesEqual($0.name, name) }.map(\.value)
    }

    /// The media type of `Content-Type`, lowercased, without its parameters and spaces (`text/plain` of
    /// `Text/Plain; charset=utf-8`); nil without the header.
    public var mediaType: String? {
        guard let type = value("Content-Type") else { return nil }
        var media = Substring(type).utf8.prefix { $0 != UInt8(ascii: ";") }
        let isSpace: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        while let first = media.first, isSpace(first) { media = media.dropFirst() }
        while let last = media.last, isSpace(last) { media = media.dropLast() }
        return String(decoding: media.map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }, as: UTF8.self)
    }

    /// The first value of a header.
    public func value(_ name: String) -> String? {
        for header in headers where headerNamesEqual(header.name, name) { return header.value }
        return nil
    }

    /// The announced body length. `.invalid` when the header is malformed or repeated with different values
    /// (RFC 9112 §6.3), `.absent` when missing or when chunked framing overrides it.
    public enum ContentLength: Equatable, Sendable {
        case absent
        case length(Int64)
        case invalid(String)
    }

    /// The body length this response announces.
    public var contentLength: ContentLength {
        if isChunked { return .absent }
        // No copies for the usual head: one Content-Length of digits.
        var only: String?
        var count = 0
        for header in headers where headerNamesEqual(header.name, "Content-Length") {
            only = header.value
            count += 1
        }
        guard let only else { return .absent }
        if count == 1, !only.utf8.contains(UInt8(ascii: ",")),
            let length = ContentRange.number(Substring(only.trimmingHTTPSpace))
        {
            return .length(length)
        }
        let raw = values("Content-Length").flatMap { $0.split(separator: ",") }.map(\.trimmingHTTPSpace)
        guard !raw.isEmpty else { return .absent }
        let parsed = raw.map { ContentRange.number(Substring($0)) }
        guard let first = parsed.first, let length = first, parsed.allSatisfy({ $0 == length }) else {
            return .invalid("Content-Length \(raw.joined(separator: ", ")) is not one non-negative length")
        }
        return .length(length)
    }

    /// Whether the body uses chunked transfer coding (which wins over Content-Length).
    public var isChunked: Bool {
        headers.contains {
            headerNamesEqual($0.name, "Transfer-Encoding") && $0.value.containsIgnoringASCIICase("chunked")
        }
    }

    /// The parsed `Content-Range`, nil when absent or malformed.
    public var contentRange: ContentRange? { value("Content-Range").flatMap(ContentRange.init) }

    /// The validators this response carries.
    public var validators: Validators {
        Validators(etag: value("ETag"), lastModified: value("Last-Modified"), date: value("Date"))
    }

    /// Whether the server declared byte ranges (`Accept-Ranges: bytes`).
    public var acceptsByteRanges: Bool {
        headers.contains {
            headerNamesEqual($0.name, "Accept-Ranges") && $0.value.listContainsIgnoringASCIICase("bytes")
        }
    }

    /// Whether the server said `Accept-Ranges: none`.
    public var refusesRanges: Bool {
        headers.contains {
            headerNamesEqual($0.name, "Accept-Ranges") && $0.value.trimmingHTTPSpace.equalsIgnoringASCIICase("none")
        }
    }

    /// A content coding other than identity, if the server applied one.
    public var contentEncoding: String? {
        let codings = values("Content-Encoding").flatMap { $0.split(separator: ",") }.map {
            $0.trimmingHTTPSpace.lowercased()
        }.filter { !$0.isEmpty && $0 != "identity" }
        return codings.isEmpty ? nil : codings.joined(separator: ", ")
    }

    /// Whether the body is `multipart/byteranges`.
    public var isMultipart: Bool {
        value("Content-Type")?.lowercased().hasPrefix("multipart/byteranges") ?? false
    }

    /// `Retry-After` as a duration, relative to the response's `Date` when given as a date.
    public var retryAfter: Duration? {
        guard let raw = value("Retry-After") else { return nil }
        return RetryPolicy.retryAfter(raw, now: value("Date").flatMap(HTTPDate.parse))
    }
}
