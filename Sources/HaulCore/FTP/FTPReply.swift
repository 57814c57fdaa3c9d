import Foundation

/// One reply of an FTP server (RFC 959 §4.2): a three-digit code and its text, one line or several.
public struct FTPReply: Sendable, Equatable {
    /// The code, 100 to 599.
    public var code: Int
    /// The text of each line, without the code and its separator on the first and last lines.
    public var lines: [String]

    /// Makes a reply.
    public init(code: Int, lines: [String]) {
        self.code = code
        self.lines = lines
    }

    /// The text of all lines, joined with spaces and trimmed.
    public var text: String {
        lines.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
    }

    /// `1xx`: the command started; another reply follows.
    public var isPreliminary: Bool { code / 100 == 1 }
    /// `2xx`: done.
    public var isCompletion: Bool { code / 100 == 2 }
    /// `3xx`: the server waits for the next command of a sequence (`PASS` after `USER`, `RETR` after `REST`).
    public var isIntermediate: Bool { code / 100 == 3 }
    /// `4xx`: failed this time; the same command may work later.
    public var isTransient: Bool { code / 100 == 4 }

    /// The reply as a server wrote it, shortened for messages: `550 Failed to open file.`
    public var shown: String {
        let text = self.text
        return text.isEmpty ? "\(code)" : "\(code) \(text.count > 200 ? String(text.prefix(200)) + "…" : text)"
    }
}

/// Cuts a control connection's bytes into replies. A multi-line reply starts with `CODE-` and ends with a line
/// starting `CODE ` (same code); lines between may start with anything. Lines end in CRLF or a bare LF (servers
/// differ). Bounded: a line longer than `maximumLineLength` or a reply of more than `maximumLines` lines is an
/// error, so a hostile server cannot make Haul hold unbounded text.
public struct FTPReplyParser: Sendable {
    /// The longest line accepted, in bytes.
    public static let maximumLineLength = 8192
    /// The most lines one reply may have.
    public static let maximumLines = 1000

    private var line: [UInt8] = []
    private var pending: (code: Int, lines: [String])?

    /// A parser with nothing read.
    public init() {}

    /// Whether bytes of an unfinished reply are held.
    public var isMidReply: Bool { !line.isEmpty || pending != nil }

    /// Reads `bytes` and returns the replies they complete, in order.
    public mutating func feed(_ bytes: some Sequence<UInt8>) throws(DownloadError) -> [FTPReply] {
        var replies: [FTPReply] = []
        for byte in bytes {
            if byte == UInt8(ascii: "\n") {
                if line.last == UInt8(ascii: "\r") { line.removeLast() }
                let text = String(decoding: line, as: UTF8.self)
                line.removeAll(keepingCapacity: true)
                if let reply = try take(text) { replies.append(reply) }
            } else {
                guard line.count < Self.maximumLineLength else {
                    throw Self.malformed("a reply line longer than \(Self.maximumLineLength) bytes")
                }
                line.append(byte)
            }
        }
        return replies
    }

    private mutating func take(_ text: String) throws(DownloadError) -> FTPReply? {
        let scalars = Array(text.utf8)
        let code = Self.code(scalars)
        if var open = pending {
            if let code, code == open.code, scalars.count == 3 || scalars[3] == UInt8(ascii: " ") {
                open.lines.append(String(text.dropFirst(4)))
                pending = nil
                return FTPReply(code: code, lines: open.lines)
            }
            guard open.lines.count < Self.maximumLines else {
                throw Self.malformed("a reply of more than \(Self.maximumLines) lines")
            }
            open.lines.append(text)
            pending = open
            return nil
        }
        guard let code else {
            throw Self.malformed("'\(text.prefix(80))' where a reply code was expected")
        }
        if scalars.count > 3, scalars[3] == UInt8(ascii: "-") {
            pending = (code, [String(text.dropFirst(4))])
            return nil
        }
        guard scalars.count == 3 || scalars[3] == UInt8(ascii: " ") else {
            throw Self.malformed("'\(text.prefix(80))' where a reply code was expected")
        }
        return FTPReply(code: code, lines: [String(text.dropFirst(4))])
    }

    /// The code of a line that starts with three digits, the first 1 to 5.
    private static func code(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 3, (UInt8(ascii: "1")...UInt8(ascii: "5")).contains(bytes[0]) else { return nil }
        var value = 0
        for byte in bytes[0..<3] {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }

    private static func malformed(_ what: String) -> DownloadError {
        DownloadError(.invalidResponse, "the FTP server sent \(what)", isRetryable: true)
    }
}

/// Readers of the values some replies carry.
extension FTPReply {
    /// The port of a `229 Entering Extended Passive Mode (|||PORT|)` reply (RFC 2428 §3): the delimiter is any
    /// printable character, the same four times; network and address are empty.
    public var extendedPassivePort: Int? {
        guard code == 229, let open = text.firstIndex(of: "("), let close = text.lastIndex(of: ")"), open < close
        else { return nil }
        let inside = Array(text[text.index(after: open)..<close].utf8)
        guard inside.count >= 5, let delimiter = inside.first, (33...126).contains(delimiter),
            inside[1] == delimiter, inside[2] == delimiter, inside.last == delimiter
        else { return nil }
        let digits = inside[3..<(inside.count - 1)]
        guard !digits.isEmpty, digits.count <= 5, digits.allSatisfy({ (48...57).contains($0) }),
            let port = Int(String(decoding: digits, as: UTF8.self)), (1...65535).contains(port)
        else { return nil }
        return port
    }

    /// The address and port of a `227 Entering Passive Mode (h1,h2,h3,h4,p1,p2)` reply (RFC 959 §4.1.2): the six
    /// numbers may stand with or without parentheses, anywhere in the text.
    public var passiveAddress: (host: String, port: Int)? {
        guard code == 227 else { return nil }
        let bytes = Array(text.utf8)
        var index = 0
        while index < bytes.count {
            guard (48...57).contains(bytes[index]) else {
                index += 1
                continue
            }
            if let (numbers, _) = Self.sixNumbers(bytes, from: index) {
                guard numbers[0..<4].allSatisfy({ $0 <= 255 }), numbers[4] <= 255, numbers[5] <= 255 else {
                    return nil
                }
                let port = numbers[4] * 256 + numbers[5]
                guard port > 0 else { return nil }
                return (numbers[0..<4].map(String.init).joined(separator: "."), port)
            }
            while index < bytes.count, (48...57).contains(bytes[index]) { index += 1 }
        }
        return nil
    }

    private static func sixNumbers(_ bytes: [UInt8], from start: Int) -> ([Int], Int)? {
        var numbers: [Int] = []
        var index = start
        while numbers.count < 6 {
            var value = 0
            var digits = 0
            while index < bytes.count, (48...57).contains(bytes[index]), digits < 4 {
                value = value * 10 + Int(bytes[index] - 48)
                digits += 1
                index += 1
            }
            guard digits > 0, digits <= 3 else { return nil }
            numbers.append(value)
            if numbers.count < 6 {
                guard index < bytes.count, bytes[index] == UInt8(ascii: ",") else { return nil }
                index += 1
            }
        }
        return (numbers, index)
    }

    /// The size of a `213 SIZE` reply (RFC 3659 §4): digits only, no larger than 1 EiB.
    public var size: Int64? {
        guard code == 213 else { return nil }
        return ContentRange.number(Substring(text))
    }

    /// The modification time of a `213 MDTM` reply (RFC 3659 §3): `YYYYMMDDHHMMSS`, optionally with a fraction of
    /// a second, in UTC, as seconds since 1970 and the digits as sent (the fraction too, so a change within a second
    /// shows when the server tells it).
    public var modificationTime: (seconds: Int64, digits: String)? {
        guard code == 213 else { return nil }
        let value = text
        let parts = value.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count <= 2, parts[0].utf8.count == 14, parts[0].utf8.allSatisfy({ (48...57).contains($0) })
        else { return nil }
        if parts.count == 2 {
            guard (1...9).contains(parts[1].utf8.count), parts[1].utf8.allSatisfy({ (48...57).contains($0) }) else {
                return nil
            }
        }
        let digits = Array(parts[0].utf8).map { Int($0 - 48) }
        func number(_ range: Range<Int>) -> Int { range.reduce(0) { $0 * 10 + digits[$1] } }
        let (year, month, day) = (number(0..<4), number(4..<6), number(6..<8))
        let (hour, minute, second) = (number(8..<10), number(10..<12), number(12..<14))
        guard (1...12).contains(month),
            let seconds = HTTPDate.parseISO8601UTC(
                String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ", year, month, day, hour, minute, second))
        else { return nil }
        return (seconds, value)
    }
}
