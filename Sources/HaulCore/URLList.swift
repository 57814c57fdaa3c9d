import Foundation

/// The URLs of an input file (`haul get -i FILE`, `haul add -i FILE`): one a line; blank lines and lines starting with
/// `#` skipped, spaces, tabs and a carriage return around a URL trimmed; each URL kept once, in first-seen order. A line
/// that is not an http, https or ftp URL with a host is an error that names its line, so nothing of a file with a typo is
/// added.
public enum URLList {
    /// The URLs of `text`, the contents of an input file.
    public static func parse(_ text: String) throws(DownloadError) -> [String] {
        var urls: [String] = []
        var seen = Set<String>()
        for (number, raw) in lines(of: text).enumerated() {
            let line = String(trim(raw))
            if line.isEmpty || line.hasPrefix("#") { continue }
            try check(line, line: number + 1)
            if seen.insert(line).inserted { urls.append(line) }
        }
        return urls
    }

    /// The lines of `text`, ended by a line feed or a carriage return and line feed (a file written on Windows): Swift
    /// reads "\r\n" as one character, which a split at "\n" alone does not split.
    public static func lines(of text: String) -> [Substring] {
        text.split(omittingEmptySubsequences: false) { $0 == "\n" || $0 == "\r\n" }
    }

    /// Throws when `url` is not an http, https or ftp URL with a host; the message names `line` when given.
    public static func check(_ url: String, line: Int? = nil) throws(DownloadError) {
        guard isDownloadable(url) else {
            let place = line.map { " (line \($0))" } ?? ""
            throw DownloadError(.invalidArgument, "'\(url)'\(place) is not an http, https or ftp URL")
        }
    }

    /// Whether `url` is one a download may have (`DownloadRules.checkURL`).
    public static func isDownloadable(_ url: String) -> Bool {
        (try? DownloadRules.checkURL(url)) != nil
    }

    /// `text` without the white space around it: spaces, tabs and other Unicode space separators (Foundation's
    /// `whitespaces`), and carriage returns. Read scalar by scalar, with ASCII decided without the character set:
    /// `trimmingCharacters(in:)` bridges every line to `NSString`.
    public static func trim(_ text: Substring) -> Substring {
        var scalars = text.unicodeScalars[...]
        while let first = scalars.first, isTrimmed(first) { scalars.removeFirst() }
        while let last = scalars.last, isTrimmed(last) { scalars.removeLast() }
        return Substring(scalars)
    }

    private static func isTrimmed(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x20, 0x09, 0x0D: true
        case 0..<0x80: false
        default: trimmed.contains(scalar)
        }
    }

    private static let trimmed = CharacterSet.whitespaces.union(CharacterSet(charactersIn: "\r"))
}
