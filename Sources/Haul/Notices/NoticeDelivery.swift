import AsyncHTTPClient
import Crypto
import Foundation
import HaulCore
import Logging
import NIOCore
import NIOHTTP1

#if canImport(Glibc)
    import Glibc
#endif

/// How one notice reaches a hook or a webhook.
enum NoticeDelivery {
    /// The facts a hook finds in its environment beside the notice's JSON on its standard input.
    struct HookContext: Sendable {
        var eventID: String
        var download: DownloadSnapshot
        var event: PendingNotice.Event
    }

    /// Runs `hook` with `body` on its standard input and `context` in its environment, its output going to `logger`
    /// line by line, stopped after `timeout` (its process group: a shell's children too). Returns the exit status (a
    /// signal's number plus 128), or throws when it could not be started. Never ends early for the calling task's
    /// cancellation: a hook once started runs to its end or its timeout, so that a shutdown does not count an
    /// interrupted hook as heard.
    static func run(
        _ hook: Hook, body: [UInt8], context: HookContext, timeout: Duration, logger: Logger
    ) async throws(DownloadError) -> Int32 {
        try await execute(hook, body: body, context: context, timeout: timeout, logger: logger).status
    }

    /// `run`, returning the hook's output lines too (a link refresh prints the new URL).
    static func execute(
        _ hook: Hook, body: [UInt8], context: HookContext, timeout: Duration, logger: Logger
    ) async throws(DownloadError) -> (status: Int32, lines: [String]) {
        guard let program = executable(hook.arguments[0]) else {
            throw DownloadError(.invalidArgument, "the hook program '\(hook.arguments[0])' is not found in PATH")
        }
        var environment = ProcessInfo.processInfo.environment
        // Haul's own secrets stay Haul's: the daemon's token and the shared store's password.
        for secret in hiddenVariables { environment[secret] = nil }
        environment["HAUL_EVENT_ID"] = context.eventID
        environment["HAUL_EVENT"] = context.event.type
        environment["HAUL_ID"] = context.download.id.rawValue
        environment["HAUL_URL"] = context.download.url
        environment["HAUL_PATH"] = context.download.path ?? ""
        environment["HAUL_STATE"] = context.download.state.rawValue
        let child: HookChild
        do { child = try HookChild(program: program, arguments: hook.arguments, environment: environment) } catch {
            throw DownloadError(.invalidArgument, "the hook '\(hook)' cannot be started: \(error.message)")
        }
        let name = "hook \(hook.arguments[0]) (\(context.download.id.brief))"
        // Reading and writing on threads of their own: a hook that never reads its input, or writes much, must not
        // stall the other.
        let output = Task.detached {
            await withCheckedContinuation { continuation in
                Thread { continuation.resume(returning: child.lines(loggingTo: logger, as: name)) }.start()
            }
        }
        Thread { child.write(body) }.start()
        let watchdog = Task.detached {
            try await Task.sleep(for: timeout)
            logger.error("\(name) ran longer than \(timeout.spoken): stopping it")
            child.signal(SIGTERM)
            try await Task.sleep(for: .seconds(5))
            child.signal(SIGKILL)
        }
        let status = await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: child.waitForExit()) }.start()
        }
        watchdog.cancel()
        return (status, await output.value)
    }

    /// The variables of Haul's environment a hook does not get: they hold the daemon's token or a store's password.
    static let hiddenVariables = ["HAUL_TOKEN", "HAUL_STORE", "PGPASSWORD"]

    /// The path of `program`: itself when it has a slash, else the first executable of that name in `PATH`.
    static func executable(_ program: String) -> String? {
        if program.contains("/") { return program }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for folder in path.split(separator: ":") where !folder.isEmpty {
            let candidate = "\(folder)/\(program)"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }

    /// Posts `body` to `webhook`, signed; throws unless the answer is 2xx. Like a hook, never ends early for the
    /// calling task's cancellation.
    static func post(
        _ body: [UInt8], to webhook: Webhook, id: String, timeout: Duration, now: Date = Date()
    ) async throws(DownloadError) {
        var request = HTTPClientRequest(url: webhook.url)
        request.method = .POST
        for (name, value) in signedHeaders(body, key: webhook.key, id: id, timestamp: now) {
            request.headers.add(name: name, value: value)
        }
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "user-agent", value: "haul/\(HaulVersion.current)")
        request.body = .bytes(ByteBuffer(bytes: body))
        let seconds = Int64(timeout.components.seconds)
        let attempt = Task.detached { () throws -> UInt in
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(max(1, seconds)))
            _ = try? await response.body.collect(upTo: 1 << 16)
            return response.status.code
        }
        let status: UInt
        do { status = try await attempt.value } catch {
            throw DownloadError(.connectionFailed, "the webhook \(webhook.url) cannot be reached: \(error)")
        }
        guard (200..<300).contains(status) else {
            throw DownloadError(.httpStatus, "the webhook \(webhook.url) answered \(status)", status: Int(status))
        }
    }

    /// The Standard Webhooks headers of `body`: its id, the time, and `v1,` with the base64 HMAC-SHA256 of
    /// `id.timestamp.body` under `key`.
    static func signedHeaders(_ body: [UInt8], key: [UInt8], id: String, timestamp: Date) -> [(String, String)] {
        let seconds = String(Int64(timestamp.timeIntervalSince1970))
        var signed = Array("\(id).\(seconds).".utf8)
        signed.append(contentsOf: body)
        let mac = HMAC<SHA256>.authenticationCode(for: signed, using: SymmetricKey(data: key))
        return [
            ("webhook-id", id), ("webhook-timestamp", seconds),
            ("webhook-signature", "v1," + Data(mac).base64EncodedString()),
        ]
    }

    /// The notice as JSON, the same for hooks and webhooks: `{"type", "id", "timestamp", "data"}`, `data` being the
    /// download.
    static func body(of notice: PendingNotice, download: [UInt8]) -> [UInt8] {
        var out = Array("{\"type\":\"\(notice.event.type)\",\"id\":\"".utf8)
        out.append(contentsOf: notice.id.utf8)
        out.append(contentsOf: "\",\"timestamp\":\"".utf8)
        out.append(contentsOf: notice.at.formatted(.iso8601).utf8)
        out.append(contentsOf: "\",\"data\":".utf8)
        out.append(contentsOf: download)
        out.append(UInt8(ascii: "}"))
        return out
    }
}
