import Foundation

/// One request header a user adds (`--header 'Name: value'`, the API's `headers`).
public struct RequestHeader: Codable, Sendable, Equatable {
    /// The field name.
    public var name: String
    /// The field value.
    public var value: String

    /// Makes a header.
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// Parses `Name: value` (spaces around either trimmed); the error names what is wrong: no colon, a name that is
    /// not an HTTP token (RFC 9110 §5.1), a value with a line break or another control character but tab.
    public init(parsing text: String) throws(DownloadError) {
        guard let colon = text.firstIndex(of: ":") else {
            throw DownloadError(.invalidArgument, "header '\(text)' is not 'Name: value'")
        }
        let name = text[..<colon].trimmingCharacters(in: .whitespaces)
        let value = text[text.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        guard Self.isValidName(name) else {
            throw DownloadError(.invalidArgument, "header name '\(name)' is not a valid HTTP field name")
        }
        guard Self.isValidValue(value) else {
            throw DownloadError(
                .invalidArgument, "header '\(name)' has a line break or another control character in its value")
        }
        self.name = name
        self.value = value
    }

    /// Whether `name` is a non-empty HTTP token: ASCII letters, digits and ``!#$%&'*+-.^_`|~``.
    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty
            && name.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"):
                    true
                default: "!#$%&'*+-.^_`|~".utf8.contains(byte)
                }
            }
    }

    /// Whether `value` can be sent as a header value: no control characters but tab (no line breaks, no NUL).
    public static func isValidValue(_ value: String) -> Bool {
        value.unicodeScalars.allSatisfy { $0 == "\t" || ($0.value >= 0x20 && $0.value != 0x7F) }
    }
}
