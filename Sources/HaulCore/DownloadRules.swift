import Foundation

/// What a download and the manager's settings may be: every limit the API documents, as named constants, and the
/// one check of each. The engine checks every request with these (`DownloadManager`), and every edge (the REST API,
/// aria2's RPC, the command line) calls the same checks to word the refusal its own way: a `RuleViolation` names the
/// rule and the problem, and each edge names the field as its callers know it (`connections`, `-x/--connections`,
/// `split`).
public enum DownloadRules {
    /// The most connections a download may open (`-x`, `connections`, aria2's `split`).
    public static let connections = 1...16
    /// The smallest segment a split may leave (`--min-split-size`, `minSplitSize`): 1 MiB, as aria2's `-k`.
    public static let minimumSplitSize: Int64 = 1 << 20
    /// Downloads transferring at once (`-j`, `maxConcurrentDownloads`, aria2's `max-concurrent-downloads`).
    public static let concurrentDownloads = 1...1000
    /// Connections to one host across all downloads (`--max-connections-per-host`, `maxConnectionsPerHost`).
    public static let connectionsPerHost = 1...10_000
    /// Downloads of one host transferring at once (`--max-per-host`, `maxDownloadsPerHost`).
    public static let downloadsPerHost = 1...1000
    /// The longest idle time of a connection, in seconds (`timeoutSeconds`): a week.
    public static let longestTimeout: Double = 604_800
    /// Attempts without progress before a download fails (`retries`; aria2's `max-tries` 0 is the largest).
    public static let retries = 0...1_000_000
    /// Downloads in one page of a list (`limit`).
    public static let pageSize = 1...1_000_000
    /// The longest folder or file name a request may give, in bytes.
    public static let longestName = 4096
    /// The URL schemes Haul downloads: HTTP, HTTPS, FTP, FTP with `AUTH TLS` (`ftpes`) and FTP over TLS (`ftps`).
    public static let urlSchemes: [String] = ["https", "http", "ftps", "ftpes", "ftp"]

    /// A value outside its rule.
    public struct RuleViolation: Error, Sendable, Equatable, CustomStringConvertible {
        /// Which rule.
        public enum Rule: String, Sendable {
            case url, connections, minimumSplitSize, concurrentDownloads, connectionsPerHost, rate, timeout, retries,
                pageSize, nameLength, fileName, mirrors, pieces, downloadsPerHost, header
        }

        /// The rule broken.
        public var rule: Rule
        /// The problem, worded to follow the field's name (`must be between 1 and 16, not 40`).
        public var problem: String

        public var description: String { "\(rule.rawValue) \(problem)" }

        /// A violation of `rule`.
        public init(rule: Rule, problem: String) {
            self.rule = rule
            self.problem = problem
        }
    }

    /// A download's URL, as given: one of `urlSchemes` with a host, and nothing Foundation would have to mend
    /// (spaces, control characters).
    public static func checkURL(_ text: String) throws(RuleViolation) {
        _ = try checkedURL(text)
    }

    /// `text` parsed, when it is a URL a download may have (`checkURL(_:)`).
    /// A space or a control character is named: a pasted URL with a space is the common case, and it is an http URL
    /// in every other respect. It is refused, not encoded: the URL stored and requested is the one given.
    public static func checkedURL(_ text: String) throws(RuleViolation) -> URL {
        if let bad = text.unicodeScalars.first(where: { $0.value <= 0x20 || $0.value == 0x7F }) {
            let problem =
                bad == " "
                ? "contains a space (percent-encode it as %20)"
                : "contains a control character (U+\(String(format: "%04X", bad.value)))"
            throw RuleViolation(rule: .url, problem: problem)
        }
        guard let parsed = URL(string: text) else {
            throw RuleViolation(rule: .url, problem: "is not an http, https or ftp URL")
        }
        try checkURL(parsed)
        return parsed
    }

    /// A download's URL: one of `urlSchemes`, with a host.
    public static func checkURL(_ url: URL) throws(RuleViolation) {
        guard let scheme = url.scheme?.lowercased(), urlSchemes.contains(scheme) else {
            throw RuleViolation(rule: .url, problem: "is not an http, https or ftp URL")
        }
        guard url.host?.isEmpty == false else { throw RuleViolation(rule: .url, problem: "has no host") }
    }

    /// `count` connections for one download.
    public static func checkConnections(_ count: Int) throws(RuleViolation) {
        guard connections.contains(count) else {
            throw RuleViolation(
                rule: .connections,
                problem: "must be between \(connections.lowerBound) and \(connections.upperBound), not \(count)")
        }
    }

    /// A minimum split size in bytes.
    public static func checkMinimumSplitSize(_ bytes: Int64) throws(RuleViolation) {
        guard bytes >= minimumSplitSize else {
            throw RuleViolation(
                rule: .minimumSplitSize, problem: "must be at least \(minimumSplitSize) (1 MiB), not \(bytes)")
        }
    }

    /// A limit of downloads at once.
    public static func checkConcurrentDownloads(_ limit: Int) throws(RuleViolation) {
        guard concurrentDownloads.contains(limit) else {
            throw RuleViolation(
                rule: .concurrentDownloads,
                problem:
                    "must be between \(concurrentDownloads.lowerBound) and \(concurrentDownloads.upperBound), not \(limit)"
            )
        }
    }

    /// A limit of connections to one host across all downloads (nil: none).
    public static func checkConnectionsPerHost(_ limit: Int?) throws(RuleViolation) {
        guard let limit, !connectionsPerHost.contains(limit) else { return }
        throw RuleViolation(
            rule: .connectionsPerHost,
            problem:
                "must be between \(connectionsPerHost.lowerBound) and \(connectionsPerHost.upperBound), not \(limit)")
    }

    /// Downloads of one host at once (nil: no limit).
    public static func checkDownloadsPerHost(_ limit: Int?) throws(RuleViolation) {
        guard let limit, !downloadsPerHost.contains(limit) else { return }
        throw RuleViolation(
            rule: .downloadsPerHost,
            problem: "must be between \(downloadsPerHost.lowerBound) and \(downloadsPerHost.upperBound), not \(limit)")
    }

    /// A rate limit in bytes a second (nil: none).
    public static func checkRate(_ bytesPerSecond: Int64?) throws(RuleViolation) {
        if let bytesPerSecond, bytesPerSecond < 1 {
            throw RuleViolation(
                rule: .rate, problem: "must be a positive number of bytes a second, not \(bytesPerSecond)")
        }
    }

    /// An idle timeout in seconds.
    public static func checkTimeout(_ seconds: Double) throws(RuleViolation) {
        guard seconds > 0, seconds.isFinite else {
            throw RuleViolation(rule: .timeout, problem: "must be a positive number of seconds")
        }
        guard seconds <= longestTimeout else {
            throw RuleViolation(rule: .timeout, problem: "must be at most \(Int(longestTimeout)) (a week)")
        }
    }

    /// The most mirrors one download has.
    public static let mirrors = 16

    /// A download's mirrors: at most `mirrors`, each a URL `checkURL` takes.
    public static func checkMirrors(_ urls: [String]) throws(RuleViolation) {
        guard urls.count <= mirrors else {
            throw RuleViolation(rule: .mirrors, problem: "must be at most \(mirrors), not \(urls.count)")
        }
        for url in urls {
            do { try checkURL(url) } catch {
                throw RuleViolation(rule: .mirrors, problem: "'\(url)' \(error.problem)")
            }
        }
    }

    /// Piece hashes: a length of at least one byte, and each hash the hex of its algorithm's digest.
    public static func checkPieces(_ pieces: Metalink.Pieces) throws(RuleViolation) {
        guard pieces.length >= 1, !pieces.hashes.isEmpty else {
            throw RuleViolation(rule: .pieces, problem: "need a length of at least 1 byte and at least one hash")
        }
        let digits = pieces.algorithm.byteCount * 2
        if let bad = pieces.hashes.firstIndex(where: { $0.count != digits || !$0.allSatisfy(\.isHexDigit) }) {
            throw RuleViolation(
                rule: .pieces,
                problem: "hash \(bad) is not \(digits) hex digits, as \(pieces.algorithm.rawValue) is")
        }
    }

    /// `mirrors` as a download of `url` uses them: each once, in the order given, without `url` itself.
    public static func distinctMirrors(_ mirrors: [String], of url: String) -> [String] {
        // Nearly every download has none: no set to hash its URL into.
        if mirrors.isEmpty { return [] }
        var seen: Set<String> = [url]
        return mirrors.filter { seen.insert($0).inserted }
    }

    /// The request headers Haul sets itself, by lower-case name: it asks for the bytes it lacks, and for the version
    /// it holds, with them. A user's would have the server answer other bytes than those Haul asked for.
    public static let ownedHeaders = ["range", "if-range", "if-match", "if-unmodified-since"]

    /// A request header a user adds: a valid name and value (`RequestHeader.isValidName`, `isValidValue`), not one
    /// of `ownedHeaders`, and no `Accept-Encoding` but `identity` (Haul saves the file's own bytes, and its ranges
    /// count them, not the bytes of a compressed body).
    public static func checkHeader(_ header: RequestHeader) throws(RuleViolation) {
        guard RequestHeader.isValidName(header.name) else {
            throw RuleViolation(rule: .header, problem: "'\(header.name)' is not a valid HTTP field name")
        }
        guard RequestHeader.isValidValue(header.value) else {
            throw RuleViolation(
                rule: .header, problem: "'\(header.name)' has a line break or another control character in its value")
        }
        let name = header.name.lowercased()
        if ownedHeaders.contains(name) {
            throw RuleViolation(
                rule: .header,
                problem:
                    "'\(header.name)' is Haul's to set: it asks for the bytes it lacks, and for the version it holds, "
                    + "itself")
        }
        if name == "accept-encoding", header.value.lowercased() != "identity" {
            throw RuleViolation(
                rule: .header,
                problem:
                    "'Accept-Encoding: \(header.value)' would have the server send other bytes than the file's; Haul "
                    + "asks for identity, the file as it is")
        }
    }

    /// Attempts without progress.
    public static func checkRetries(_ count: Int) throws(RuleViolation) {
        guard retries.contains(count) else {
            throw RuleViolation(
                rule: .retries, problem: "must be between \(retries.lowerBound) and \(retries.upperBound)")
        }
    }

    /// The size of a page of a list.
    public static func checkPageSize(_ size: Int) throws(RuleViolation) {
        guard pageSize.contains(size) else {
            throw RuleViolation(
                rule: .pageSize, problem: "must be between \(pageSize.lowerBound) and \(pageSize.upperBound)")
        }
    }

    /// A folder or file name given by a request.
    public static func checkNameLength(_ name: String) throws(RuleViolation) {
        guard name.utf8.count <= longestName else {
            throw RuleViolation(rule: .nameLength, problem: "is longer than \(longestName) bytes")
        }
    }

    /// A file's name as a request gives it (`filename`; aria2's `out` less its folders): one name, neither a folder
    /// of its own (`.`, `..`) nor a path. A name that is one but would be unsafe to create as it is (a leading dot,
    /// a control character) is made safe as a server's is (`FileNameSanitizer`), over the network.
    public static func checkFileName(_ name: String) throws(RuleViolation) {
        if name.isEmpty { throw RuleViolation(rule: .fileName, problem: "must not be empty") }
        if name == "." || name == ".." {
            throw RuleViolation(rule: .fileName, problem: "'\(name)' names a folder, not a file")
        }
        if name.contains("/") {
            throw RuleViolation(
                rule: .fileName, problem: "'\(name)' holds '/': give the file's name, and its folder as the directory")
        }
    }
}

extension DownloadError {
    /// A request the engine refuses for breaking a rule, `subject` naming what broke it ("connections").
    public init(_ violation: DownloadRules.RuleViolation, subject: String) {
        self.init(.invalidArgument, "\(subject) \(violation.problem)")
    }
}
