import Foundation

/// The URLs of an input file (`haul get -i FILE`, `haul add -i FILE`): one a line; blank lines and lines starting with
/// `#` skipped, spaces, tabs and a carriage return around a URL trimmed; each URL kept once, in first-seen order. A line
/// that is not an http, https or ftp URL with a host is an error that names its line, so nothing of a file with a typo is
/// added. As in aria2's input files, several URLs on one line separated by tabs are one file: the first is its URL, the
/// others its mirrors.
public enum URLList {
    /// One file of a list: its URL and its mirrors.
    public struct Entry: Sendable, Hashable {
        /// The URL.
        public var url: String
        /// Other URLs of the same file.
        public var mirrors: [String]
        /// The checksum the file must match (a Metalink's).
        public var checksum: Checksum?
        /// The hashes of its pieces (a Metalink's).
        public var pieces: Metalink.Pieces?
        /// Its name in the folder (a Metalink's), instead of the server's: a safe name, or safe folders and a name
        /// (`docs/read me.txt`, beneath the folder).
        public var name: String?
        /// Its length (a Metalink's).
        public var size: Int64?
        /// `url` as parsed when the list was read and checked (`entries(_:)`), so a caller need not parse it again;
        /// nil for an entry made from its text alone.
        public var parsedURL: URL?

        /// Makes an entry.
        public init(
            url: String, mirrors: [String] = [], checksum: Checksum? = nil, pieces: Metalink.Pieces? = nil,
            name: String? = nil
        ) {
            self.url = url
            self.mirrors = mirrors
            self.checksum = checksum
            self.pieces = pieces
            self.name = name
        }

        /// Equal when their fields are; `parsedURL` is `url` parsed, not a fact of its own.
        public static func == (left: Entry, right: Entry) -> Bool {
            left.url == right.url && left.mirrors == right.mirrors && left.checksum == right.checksum
                && left.pieces == right.pieces && left.name == right.name && left.size == right.size
        }

        public func hash(into hasher: inout Hasher) {
            hasher.combine(url)
            hasher.combine(mirrors)
            hasher.combine(checksum)
            hasher.combine(pieces)
            hasher.combine(name)
            hasher.combine(size)
        }

        /// The download of one file of a Metalink.
        public init(_ plan: Metalink.File.Plan) {
            self.init(
                url: plan.url, mirrors: plan.mirrors, checksum: plan.checksum, pieces: plan.pieces, name: plan.path)
            size = plan.size
        }
    }

    /// The URLs of `text`, the contents of an input file (a line's mirrors left out).
    public static func parse(_ text: String) throws(DownloadError) -> [String] {
        try entries(text).map(\.url)
    }

    /// The files of `text`, the contents of an input file, each with its mirrors. A list with lines that are not
    /// downloadable URLs is refused naming each of them (the first `shownProblems`), so one fix is enough.
    public static func entries(_ text: String) throws(DownloadError) -> [Entry] {
        var entries: [Entry] = []
        var seen = Set<String>()
        var problems: [String] = []
        for (number, raw) in lines(of: text).enumerated() {
            let line = trim(raw)
            if line.isEmpty || line.utf8.first == UInt8(ascii: "#") { continue }
            let urls = split(line, at: 0x09).map { String(trim($0)) }.filter { !$0.isEmpty }
            var parsed: URL?
            do throws(DownloadError) {
                parsed = try urls.first.map { url throws(DownloadError) in try checked(url, line: number + 1) }
                for url in urls.dropFirst() { try check(url, line: number + 1) }
            } catch {
                problems.append(error.message)
                continue
            }
            guard problems.isEmpty, let url = urls.first, seen.insert(url).inserted else { continue }
            var entry = Entry(url: url, mirrors: DownloadRules.distinctMirrors(Array(urls.dropFirst()), of: url))
            entry.parsedURL = parsed
            entries.append(entry)
        }
        guard problems.count <= 1 else {
            var message = "\(problems.count) lines of the list are not URLs to download; nothing was added:"
            for problem in problems.prefix(shownProblems) { message += "\n  " + problem }
            if problems.count > shownProblems { message += "\n  and \(problems.count - shownProblems) more" }
            throw DownloadError(.invalidArgument, message)
        }
        if let problem = problems.first { throw DownloadError(.invalidArgument, problem) }
        return entries
    }

    /// How many of a list's bad lines an error names.
    static let shownProblems = 20

    /// The lines of `text`, ended by a line feed or a carriage return and line feed (a file written on Windows).
    public static func lines(of text: String) -> [Substring] {
        split(Substring(text), at: 0x0A).map { line in
            line.utf8.last == 0x0D ? line[..<line.utf8.index(before: line.utf8.endIndex)] : line
        }
    }

    /// The parts of `text` between the ASCII control character `separator` (a line feed or a tab), empty ones too.
    /// Found in the UTF-8 bytes: splitting the characters finds each grapheme's end first, which cost a list of
    /// thousands of URLs more than everything else reading it did. A control character is a grapheme of its own (a
    /// carriage return and line feed are one together, and `lines(of:)` takes the carriage return off), so the
    /// parts are the same.
    static func split(_ text: Substring, at separator: UInt8) -> [Substring] {
        let bytes = text.utf8
        // The separators' offsets, found in the contiguous bytes: indexing the UTF-8 view checks each index, which
        // cost more than the rest of reading a list.
        let offsets =
            bytes.withContiguousStorageIfAvailable { buffer in buffer.indices.filter { buffer[$0] == separator } }
            ?? Array(bytes.enumerated().lazy.filter { $0.element == separator }.map(\.offset))
        if offsets.isEmpty { return [text] }
        var parts: [Substring] = []
        parts.reserveCapacity(offsets.count + 1)
        var (start, startOffset) = (bytes.startIndex, 0)
        for offset in offsets {
            let end = bytes.index(start, offsetBy: offset - startOffset)
            parts.append(text[start..<end])
            (start, startOffset) = (bytes.index(after: end), offset + 1)
        }
        parts.append(text[start..<bytes.endIndex])
        return parts
    }

    /// Throws when `url` is not an http, https or ftp URL with a host; the message names `line` when given.
    public static func check(_ url: String, line: Int? = nil) throws(DownloadError) {
        _ = try checked(url, line: line)
    }

    /// `url` parsed, when it is an http, https or ftp URL with a host (`check(_:line:)`).
    static func checked(_ url: String, line: Int?) throws(DownloadError) -> URL {
        do { return try DownloadRules.checkedURL(url) } catch {
            let place = line.map { " (line \($0))" } ?? ""
            throw DownloadError(.invalidArgument, "'\(url)'\(place) \(error.problem)")
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
