#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Rules that sort downloads into folders beneath the download folder, as IDM's, Gopeed's and AB Download Manager's
/// categories do: `PATTERN=FOLDER`, given with `--sort` (repeatable), in the config file's `sort`, or in the API's
/// settings. The first rule that matches a download decides; a download no rule matches stays in the folder it was
/// added to. PATTERN is one of:
///
/// - a file name pattern (`*.iso`, `*.tar.gz`, `report-??.pdf`): matched against the name the download takes;
/// - a MIME type pattern (`video/*`, `application/pdf`): matched against the first answer's `Content-Type`;
/// - a URL pattern, one with `://` (`*://cdn.example.com/*`, `https://example.com/music/*`): matched against the URL
///   the download was added with.
///
/// Patterns are shell globs (`*`, `?`, `[…]`), without case; `*` in a URL pattern crosses `/`. FOLDER is relative to
/// the download's folder (`ISO`, `Media/Videos`): never absolute, never with `.` or `..` parts. A rule is applied when
/// the first answer's head arrives, before the part file is made; only downloads into a folder are sorted (one given a
/// file name, `-o`, is where it was asked to be).
public struct SortRules: Sendable, Equatable {
    /// One rule.
    public struct Rule: Sendable, Equatable {
        public enum Kind: Sendable, Equatable {
            case name, mimeType, url
        }

        public var kind: Kind
        public var pattern: String
        public var folder: String
        /// The rule as written.
        public var text: String
    }

    public var rules: [Rule]

    /// No rules.
    public init() { rules = [] }

    /// The rules of `texts`, in order; the error names the rule that is wrong and why.
    public init(parsing texts: [String]) throws(DownloadError) {
        rules = []
        for text in texts { rules.append(try Self.rule(text)) }
    }

    static func rule(_ text: String) throws(DownloadError) -> Rule {
        func refuse(_ why: String) -> DownloadError {
            DownloadError(.invalidArgument, "sort rule '\(text)': \(why)")
        }
        guard let equals = text.lastIndex(of: "=") else { throw refuse("give PATTERN=FOLDER, such as *.iso=ISO") }
        let pattern = String(text[..<equals]).trimmingSpaces
        let folder = String(text[text.index(after: equals)...]).trimmingSpaces
        guard !pattern.isEmpty else { throw refuse("the pattern before = is empty") }
        guard !folder.isEmpty else { throw refuse("the folder after = is empty") }
        guard text.utf8.count <= DownloadRules.longestName, !text.utf8.contains(0) else {
            throw refuse("too long, or holds a NUL byte")
        }
        guard !folder.hasPrefix("/") else { throw refuse("the folder must be relative to the download folder") }
        let parts = folder.split(separator: "/", omittingEmptySubsequences: false)
        guard !parts.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }) else {
            throw refuse("the folder may not have empty, . or .. parts")
        }
        let kind: Rule.Kind
        if pattern.contains("://") {
            kind = .url
        } else if pattern.contains("/") {
            guard Self.isMIMEPattern(pattern) else {
                throw refuse("'\(pattern)' is neither a file name nor a MIME type")
            }
            kind = .mimeType
        } else {
            kind = .name
        }
        return Rule(kind: kind, pattern: pattern, folder: folder, text: text)
    }

    /// `type/subtype`, each a MIME token or a pattern of token characters.
    private static func isMIMEPattern(_ pattern: String) -> Bool {
        let parts = pattern.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return false }
        let token = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$&^_.+-*?")
        return parts.allSatisfy { !$0.isEmpty && $0.allSatisfy(token.contains) }
    }

    /// The folder the first matching rule names for a download named `name`, answered with `contentType`, added with
    /// `url`; nil when no rule matches.
    public func folder(name: String, contentType: String?, url: String) -> String? {
        guard !rules.isEmpty else { return nil }
        let mediaType = contentType.map { String($0.prefix { $0 != ";" }).trimmingSpaces.lowercased() }
        for rule in rules {
            let subject: String?
            switch rule.kind {
            case .name: subject = name
            case .mimeType: subject = mediaType
            case .url: subject = url
            }
            if let subject, Self.matches(rule.pattern, subject) { return rule.folder }
        }
        return nil
    }

    /// Whether the glob `pattern` matches all of `text`, without case.
    static func matches(_ pattern: String, _ text: String) -> Bool {
        fnmatch(pattern.lowercased(), text.lowercased(), 0) == 0
    }
}

extension String {
    /// Without spaces and tabs at either end.
    fileprivate var trimmingSpaces: String {
        var text = Substring(self)
        while text.first == " " || text.first == "\t" { text.removeFirst() }
        while text.last == " " || text.last == "\t" { text.removeLast() }
        return String(text)
    }
}
