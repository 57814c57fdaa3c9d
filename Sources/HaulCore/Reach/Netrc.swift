/// A `.netrc` file, read as curl reads it: tokens separated by spaces, tabs and line breaks; `machine NAME`,
/// `default`, `login NAME`, `password SECRET`, `account X` (read and ignored), `macdef NAME` (its lines up to the
/// next blank line are skipped); a token may be quoted with `"` and use `\"`, `\\`, `\n`, `\r`, `\t` inside; a `#` at
/// the start of a token starts a comment to the end of the line.
public struct Netrc: Sendable, Equatable {
    /// One `machine` (or `default`) entry.
    public struct Entry: Sendable, Equatable {
        /// The host name; nil for `default`.
        public var machine: String?
        /// The login.
        public var login: String?
        /// The password.
        public var password: String?
    }

    /// The entries in file order.
    public var entries: [Entry]

    /// Parses a file's text. A keyword without its value is an error naming the line.
    public init(parsing text: String) throws(DownloadError) {
        var tokens = Self.tokens(text)[...]
        var entries: [Entry] = []
        func value(after keyword: String, line: Int) throws(DownloadError) -> String {
            guard let next = tokens.popFirst() else {
                throw DownloadError(.invalidArgument, ".netrc line \(line): '\(keyword)' has no value")
            }
            return next.text
        }
        while let token = tokens.popFirst() {
            switch token.text {
            case "machine":
                entries.append(Entry(machine: try value(after: "machine", line: token.line).lowercased()))
            case "default":
                entries.append(Entry(machine: nil))
            case "login":
                let login = try value(after: "login", line: token.line)
                if !entries.isEmpty { entries[entries.count - 1].login = login }
            case "password":
                let password = try value(after: "password", line: token.line)
                if !entries.isEmpty { entries[entries.count - 1].password = password }
            case "account":
                _ = try value(after: "account", line: token.line)
            case "macdef":
                _ = try value(after: "macdef", line: token.line)
                // The macro's body runs to the next empty line: drop the tokens of the lines up to it.
                let end = Self.macroEnd(text, afterLine: token.line)
                while let next = tokens.first, next.line <= end { tokens.removeFirst() }
            default:
                // curl skips what it does not know; so does Haul.
                continue
            }
        }
        self.entries = entries
    }

    /// The credentials for `host`: its `machine` entry (the first with `login` when one is given), else `default`.
    public func credentials(host: String, login: String? = nil) -> (login: String, password: String?)? {
        let host = host.lowercased()
        let fitting = entries.filter { entry in
            (login == nil || entry.login == login) && entry.login != nil
        }
        let entry = fitting.first { $0.machine == host } ?? fitting.first { $0.machine == nil }
        guard let entry, let name = entry.login else { return nil }
        return (name, entry.password)
    }

    private struct Token {
        var text: String
        var line: Int
    }

    private static func tokens(_ text: String) -> [Token] {
        var tokens: [Token] = []
        var line = 1
        var characters = Array(text.unicodeScalars)[...]
        while let character = characters.first {
            if character == "\n" {
                line += 1
                characters.removeFirst()
            } else if character == " " || character == "\t" || character == "\r" {
                characters.removeFirst()
            } else if character == "#" {
                while let next = characters.first, next != "\n" { characters.removeFirst() }
            } else if character == "\"" {
                characters.removeFirst()
                var value = String.UnicodeScalarView()
                let start = line
                while let next = characters.popFirst(), next != "\"" {
                    if next == "\\", let escaped = characters.popFirst() {
                        switch escaped {
                        case "n": value.append("\n")
                        case "r": value.append("\r")
                        case "t": value.append("\t")
                        default: value.append(escaped)
                        }
                    } else {
                        if next == "\n" { line += 1 }
                        value.append(next)
                    }
                }
                tokens.append(Token(text: String(value), line: start))
            } else {
                var value = String.UnicodeScalarView()
                while let next = characters.first, !(next == " " || next == "\t" || next == "\r" || next == "\n") {
                    value.append(next)
                    characters.removeFirst()
                }
                tokens.append(Token(text: String(value), line: line))
            }
        }
        return tokens
    }

    /// The last line of a `macdef` that starts on `line`: the line before the next empty one.
    private static func macroEnd(_ text: String, afterLine line: Int) -> Int {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        var number = line + 1
        while number <= lines.count, !lines[number - 1].trimmingSpaces.isEmpty { number += 1 }
        return number
    }
}
