import Foundation
import GRDB
import HaulCore

/// What Haul tells the world when a download ends: programs it runs (hooks) and URLs it posts to (webhooks), each
/// given the same JSON. They are set by whoever starts the manager (the command line or the daemon's config file),
/// never through the API: a "run a program" setting reachable over HTTP is how qBittorrent's CVE-2023-30801 was
/// exploited.
///
/// A notice is stored with the download's end, in the same write, and forgotten only once every hook and webhook has
/// had it: a process that dies between an end and its notice delivers it at its next start. A hook therefore runs at
/// least once per end, and exactly once unless the process dies between the hook's exit and the store's record of
/// it; `HAUL_EVENT_ID` is the same at every delivery of one notice, so a hook can tell a repeat.
public struct Notices: Sendable {
    /// Programs run when a download completes, one after the other.
    public var onComplete: [Hook] = []
    /// Programs run when a download fails for good (not when it is paused, cancelled or retried).
    public var onError: [Hook] = []
    /// URLs told of both ends.
    public var webhooks: [Webhook] = []
    /// Run when a download's link expires; the URL it prints replaces the link (`DownloadManager+Links`).
    public var refreshLink: Hook?
    /// How long a hook may run before it is stopped (SIGTERM, then SIGKILL 5 s later).
    public var hookTimeout: Duration = .seconds(60)
    /// The waits between a webhook's failed attempts, the last repeated until `webhookAttempts` ran out.
    public var webhookBackoff: [Duration] = [.seconds(5), .seconds(30), .seconds(300), .seconds(1800), .seconds(7200)]
    /// The attempts of one webhook at one notice before it is given up (logged as an error).
    public var webhookAttempts = 8
    /// How long one webhook attempt may take.
    public var webhookTimeout: Duration = .seconds(10)
    /// The JSON of the download that the notice carries as its `data` (the API's `Download` in `haul`; by default a
    /// summary without options, which may hold credentials).
    public var downloadJSON: @Sendable (DownloadSnapshot) -> [UInt8] = Notices.summary

    public init() {}

    /// The names of what hears `event`: `hook` for the hooks together, `webhook URL` for each webhook.
    func sinks(for event: PendingNotice.Event) -> [String] {
        let hooks = event == .completed ? onComplete : onError
        return (hooks.isEmpty ? [] : [PendingNotice.hookSink]) + webhooks.map { PendingNotice.webhookSink($0.url) }
    }

    /// The id, URL, path, state, sizes and error of a download, as JSON.
    public static func summary(_ download: DownloadSnapshot) -> [UInt8] {
        var object: [String: Any] = [
            "id": download.id.rawValue, "url": download.url, "state": download.state.rawValue,
            "receivedBytes": download.receivedBytes,
        ]
        object["path"] = download.path
        object["totalBytes"] = download.totalBytes
        if let error = download.error { object["error"] = ["code": error.code.description, "message": error.message] }
        return Array((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8))
    }
}

/// A program to run, as its arguments (the first names the program, looked up in `PATH` when it has no slash). No
/// shell comes between: `sh -c '…'` is written out when one is wanted.
public struct Hook: Sendable, Equatable, CustomStringConvertible {
    public var arguments: [String]

    public init(arguments: [String]) throws(DownloadError) {
        guard let program = arguments.first, !program.isEmpty else {
            throw DownloadError(.invalidArgument, "a hook needs a program to run")
        }
        self.arguments = arguments
    }

    /// Splits `commandLine` into words as a shell would split a simple command: blanks separate, single quotes keep
    /// everything, double quotes keep all but `\"` and `\\`, a backslash outside quotes escapes the next character.
    /// Nothing is expanded (no variables, globs or pipes).
    public init(commandLine: String) throws(DownloadError) {
        var words: [String] = []
        var word = ""
        var inWord = false
        var quote: Character?
        var escaped = false
        for character in commandLine {
            if escaped {
                if quote == "\"" && character != "\"" && character != "\\" { word.append("\\") }
                word.append(character)
                escaped = false
            } else if character == "\\" && quote != "'" {
                escaped = true
                inWord = true
            } else if let open = quote {
                if character == open { quote = nil } else { word.append(character) }
            } else if character == "'" || character == "\"" {
                quote = character
                inWord = true
            } else if character == " " || character == "\t" || character == "\n" {
                if inWord { words.append(word) }
                word = ""
                inWord = false
            } else {
                word.append(character)
                inWord = true
            }
        }
        if let quote { throw DownloadError(.invalidArgument, "the hook '\(commandLine)' has an unclosed \(quote)") }
        if escaped { throw DownloadError(.invalidArgument, "the hook '\(commandLine)' ends with a lone backslash") }
        if inWord { words.append(word) }
        try self.init(arguments: words)
    }

    public var description: String {
        arguments.map { argument in
            argument.isEmpty || argument.contains(where: { " \t\n'\"\\$`".contains($0) })
                ? "'" + argument.replacingOccurrences(of: "'", with: "'\\''") + "'" : argument
        }.joined(separator: " ")
    }
}

/// A URL told of each end by a POST of the notice's JSON, signed as Standard Webhooks sign (`webhook-id`,
/// `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256>` over `id.timestamp.body`).
public struct Webhook: Sendable, Equatable {
    public var url: String
    /// The signing key: the bytes of a `whsec_<base64>` secret.
    public var key: [UInt8]

    /// A webhook to `url` (http or https) signed with `secret`, as Standard Webhooks write it: `whsec_` and the key in
    /// base64 (the prefix may be left out).
    public init(url: String, secret: String) throws(DownloadError) {
        guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(),
            ["http", "https"].contains(scheme),
            parsed.host?.isEmpty == false
        else { throw DownloadError(.invalidURL, "the webhook '\(url)' is not an http or https URL") }
        let text = secret.trimmingCharacters(in: .whitespacesAndNewlines)
        let encoded = text.hasPrefix("whsec_") ? String(text.dropFirst(6)) : text
        guard let key = Data(base64Encoded: encoded), key.count >= 16 else {
            throw DownloadError(
                .invalidArgument,
                "the webhook secret is not 'whsec_' and at least 16 bytes in base64 (e.g. from: echo whsec_$(head -c 24 /dev/urandom | base64))"
            )
        }
        self.url = url
        self.key = Array(key)
    }
}

/// A download's notice not yet delivered everywhere, kept in its row (the `notice` column, as JSON).
public struct PendingNotice: Codable, Sendable, Equatable {
    public enum Event: String, Codable, Sendable {
        case completed, failed

        /// The notice's `type`, in Standard Webhooks' dotted style.
        public var type: String { "download.\(rawValue)" }
    }

    /// Stable across deliveries: the webhook's `webhook-id` and the hook's `HAUL_EVENT_ID`.
    public var id: String
    public var event: Event
    /// When the download ended.
    public var at: Date
    /// What has yet to hear it (`Notices.sinks(for:)`).
    public var pending: [String]
    /// Failed webhook attempts so far, by sink.
    public var attempts: [String: Int] = [:]
    /// The worker that ended the download and delivers the notice (in a fleet; the host's name otherwise).
    public var worker: String?

    public init(
        id: String, event: Event, at: Date, pending: [String], attempts: [String: Int] = [:], worker: String? = nil
    ) {
        self.id = id
        self.event = event
        self.at = at
        self.pending = pending
        self.attempts = attempts
        self.worker = worker
    }

    static let hookSink = "hook"
    static func webhookSink(_ url: String) -> String { "webhook " + url }
}

extension PendingNotice {
    /// The `notice` column's value: JSON text, or NULL.
    static func column(_ notice: PendingNotice?) throws(DownloadError) -> DatabaseValue {
        guard let notice else { return .null }
        // Dates as GRDB's decoder of JSON columns reads them.
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .millisecondsSince1970
        do { return String(decoding: try encoder.encode(notice), as: UTF8.self).databaseValue } catch {
            throw DownloadError(.store, "cannot encode a notice: \(error)", underlying: error)
        }
    }
}
