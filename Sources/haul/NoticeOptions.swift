import ArgumentParser
import Foundation
import Haul
import HaulCore
import HaulWire

/// The flags of hooks and webhooks, for `haul get` and `haul serve` (and their keys in the config file). They are
/// never settable through the API or the aria2 RPC.
struct NoticeOptions: ParsableArguments {
    @Option(
        name: .customLong("on-complete"),
        help: ArgumentHelp(
            "Run CMD when a download completes (repeatable): the download's JSON on its input, HAUL_ID, HAUL_PATH, "
                + "HAUL_URL, HAUL_STATE and HAUL_EVENT_ID in its environment. No shell: write sh -c '…' for one.",
            valueName: "CMD"))
    var onComplete: [String] = []

    @Option(
        name: .customLong("on-error"),
        help: ArgumentHelp("Run CMD when a download fails for good (repeatable), as --on-complete.", valueName: "CMD"))
    var onError: [String] = []

    @Option(
        name: .customLong("webhook"),
        help: ArgumentHelp(
            "POST each completion and failure to URL (repeatable), signed as Standard Webhooks sign with "
                + "--webhook-secret-file, retried with backoff.", valueName: "URL"))
    var webhooks: [String] = []

    @Option(
        help: ArgumentHelp(
            "The webhooks' secret: a file holding whsec_ and the key in base64.", valueName: "FILE"))
    var webhookSecretFile: String?

    @Option(help: ArgumentHelp("How long a hook may run before it is stopped (default 60s).", valueName: "DURATION"))
    var hookTimeout: String?

    @Option(
        name: .customLong("refresh-command"),
        help: ArgumentHelp(
            "When a download's link expires, run CMD and go on from the URL it prints (its last line that is one), "
                + "keeping the bytes held: a cloud CLI signing the object again. As --on-complete for its input and "
                + "environment; once per expiry.", valueName: "CMD"))
    var refreshCommand: String?

    var isEmpty: Bool { onComplete.isEmpty && onError.isEmpty && webhooks.isEmpty && refreshCommand == nil }

    /// Fills what the command line left unset from `config`'s keys.
    mutating func merge(_ config: ConfigFile?) throws {
        guard let config else { return }
        if onComplete.isEmpty, let entry = config.entry("on-complete") { onComplete = entry.values }
        if onError.isEmpty, let entry = config.entry("on-error") { onError = entry.values }
        if webhooks.isEmpty, let entry = config.entry("webhook") { webhooks = entry.values }
        if webhookSecretFile == nil, let entry = config.entry("webhook-secret-file") {
            webhookSecretFile = entry.values.first
        }
        if hookTimeout == nil, let entry = config.entry("hook-timeout") { hookTimeout = entry.values.first }
        if refreshCommand == nil, let entry = config.entry("refresh-command") { refreshCommand = entry.values.first }
        for key in ["on-complete", "on-error", "webhook", "webhook-secret-file", "hook-timeout", "refresh-command"] {
            guard let entry = config.entry(key) else { continue }
            do { _ = try notices() } catch let error as ValidationError {
                throw config.refusal(entry, error.message)
            }
        }
    }

    func validate() throws { _ = try notices() }

    /// The hooks and webhooks as the manager takes them; the notice's `data` is the API's `Download`.
    func notices() throws -> Notices {
        var notices = Notices()
        do {
            notices.onComplete = try onComplete.map { text throws(DownloadError) in try Hook(commandLine: text) }
            notices.onError = try onError.map { text throws(DownloadError) in try Hook(commandLine: text) }
            notices.refreshLink = try refreshCommand.map { text throws(DownloadError) in try Hook(commandLine: text) }
        } catch { throw ValidationError(error.message) }
        for hook in notices.onComplete + notices.onError { try Self.checkRunnable(hook, kind: "hook") }
        if let refresh = notices.refreshLink { try Self.checkRunnable(refresh, kind: "refresh command's") }
        if let hookTimeout {
            guard let timeout = HaulCommand.Serve.parseDuration(hookTimeout) else {
                throw ValidationError("--hook-timeout '\(hookTimeout)' is not a duration such as 60s or 5m")
            }
            notices.hookTimeout = timeout
        }
        if !webhooks.isEmpty {
            guard let file = webhookSecretFile else {
                throw ValidationError("--webhook needs --webhook-secret-file: webhooks are always signed")
            }
            guard let data = FileManager.default.contents(atPath: file) else {
                throw ValidationError("--webhook-secret-file: cannot read \(file)")
            }
            let secret = String(decoding: data, as: UTF8.self)
            do {
                notices.webhooks = try webhooks.map { url throws(DownloadError) in try Webhook(url: url, secret: secret)
                }
            } catch { throw ValidationError(error.message) }
        }
        notices.downloadJSON = { DownloadJSON.bytes(of: $0) }
        return notices
    }

    /// Refuses a hook whose program cannot be run: a path that is no executable file, or a name found in no folder
    /// of `PATH` (where the hook's process looks it up). Checked when the flags are read, so that a mistyped program
    /// fails before the first download instead of after each one.
    static func checkRunnable(_ hook: Hook, kind: String) throws {
        let program = hook.arguments[0]
        let candidates =
            program.contains("/")
            ? [program]
            : (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin")
                .split(separator: ":", omittingEmptySubsequences: false)
                .map { ($0.isEmpty ? "." : String($0)) + "/" + program }
        let isRunnable = candidates.contains { path in
            var status = stat()
            return stat(path, &status) == 0 && status.st_mode & S_IFMT == S_IFREG && access(path, X_OK) == 0
        }
        guard isRunnable else {
            let place = program.contains("/") ? "is not an executable file" : "is not found in any folder of PATH"
            throw ValidationError("the \(kind) program '\(program)' \(place)")
        }
    }
}
