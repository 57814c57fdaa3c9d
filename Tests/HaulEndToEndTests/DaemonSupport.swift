import AsyncHTTPClient
import Foundation
import HaulTesting
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A `haul serve` child process on a free port, with the workspace's state folder and its files folder as the
/// download folder.
final class DaemonProcess: @unchecked Sendable {
    let haul: HaulProcess
    let url: String
    let token: String
    let workspace: Workspace

    /// Starts the daemon and waits until its `serve.json` names it.
    init(
        _ workspace: Workspace, listen: String = "127.0.0.1:0", extra: [String] = [],
        environment: [String: String] = [:], launcher: [String] = []
    ) async throws {
        self.workspace = workspace
        let serveFile = workspace.state + "/serve.json"
        haul = try HaulProcess(
            ["serve", "--listen", listen, "--state-dir", workspace.state, "--download-dir", workspace.files]
                + extra, in: workspace, environment: environment, launcher: launcher)
        // In a suite that tears down what it starts, a daemon the test did not stop (it failed first) is killed.
        if Teardowns.current != nil {
            Teardowns.add { [haul] in
                guard haul.process.isRunning else { return }
                haul.signal(SIGKILL)
                _ = await haul.finish()
            }
        }
        let pid = haul.process.processIdentifier
        let started = await waitUntil(seconds: 60) { [haul] in
            guard haul.process.isRunning, let data = FileManager.default.contents(atPath: serveFile),
                let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
            else { return !haul.process.isRunning }
            return (object["pid"] as? Int) == Int(pid)
        }
        let data = FileManager.default.contents(atPath: serveFile) ?? Data()
        let object = (try? JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:]
        guard started, haul.process.isRunning, let url = object["url"] as? String,
            let token = object["token"] as? String
        else {
            let outcome = await haul.finish()
            throw DaemonStartFailure(message: "haul serve did not start: \(outcome.stderr)")
        }
        self.url = url
        self.token = token
    }

    struct DaemonStartFailure: Error, CustomStringConvertible {
        var message: String
        var description: String { message }
    }

    /// One API call; returns the status and the decoded JSON (nil for an empty body).
    @discardableResult
    func call(_ method: HTTPMethod, _ path: String, json: Any? = nil) async throws -> (status: Int, body: Any?) {
        var request = HTTPClientRequest(url: url + path)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(data: try JSONSerialization.data(withJSONObject: json)))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 64 << 20)
        let body = bytes.readableBytes == 0 ? nil : try JSONSerialization.jsonObject(with: Data(buffer: bytes))
        return (Int(response.status.code), body)
    }

    /// Adds the download of `url` and returns its id (201 expected).
    func add(_ url: URL) async throws -> String {
        let added = try await call(.POST, "/api/v1/downloads", json: ["url": url.absoluteString])
        #expect(added.status == 201)
        return try #require((added.body as? [String: Any])?["id"] as? String)
    }

    /// Adds the downloads of `urls` in one list and returns their ids.
    func add(_ urls: [URL]) async throws -> [String] {
        let added = try await call(.POST, "/api/v1/downloads", json: urls.map { ["url": $0.absoluteString] })
        #expect(added.status == 200)
        return ((added.body as? [String: Any])?["downloads"] as? [[String: Any]] ?? []).compactMap {
            $0["id"] as? String
        }
    }

    /// Adds the downloads of `urls` into `directory` in one list and returns their ids.
    func add(_ urls: [URL], into directory: String) async throws -> [String] {
        let added = try await call(
            .POST, "/api/v1/downloads", json: urls.map { ["url": $0.absoluteString, "directory": directory] })
        #expect(added.status == 200, "\(String(describing: added.body))")
        return ((added.body as? [String: Any])?["downloads"] as? [[String: Any]] ?? []).compactMap {
            $0["id"] as? String
        }
    }

    /// A GET whose answer is text (`/metrics`).
    func text(_ path: String) async throws -> String {
        var request = HTTPClientRequest(url: url + path)
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        return String(buffer: try await response.body.collect(upTo: 1 << 20))
    }

    /// The download with `id` as the API shows it.
    func download(_ id: String) async throws -> [String: Any] {
        try await call(.GET, "/api/v1/downloads/\(id)").body as? [String: Any] ?? [:]
    }

    /// Waits until the download has stopped (the API's long poll, `GET /api/v1/wait`, answers once it is no longer
    /// queued, running or waiting for the network), for at most `seconds`, and returns it as it is then.
    func waitUntilStopped(_ id: String, seconds: Double = 60) async throws -> [String: Any] {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < deadline {
            let left = Int((deadline - ContinuousClock.now).components.seconds)
            // At most 25 s a poll: the client gives up on an answer after 30.
            let answer = try await call(.GET, "/api/v1/wait?download=\(id)&timeout=\(min(25, max(1, left)))")
            let result = answer.body as? [String: Any] ?? [:]
            guard result["done"] as? Bool == true else { continue }
            return (result["downloads"] as? [[String: Any]])?.first ?? [:]
        }
        return try await download(id)
    }

    /// The daemon's resident memory in KiB (VmRSS).
    var residentKiB: Int {
        let status =
            (try? String(contentsOfFile: "/proc/\(haul.process.processIdentifier)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    /// Stops the daemon with `signal` and waits for it.
    func stop(_ signal: Int32 = SIGKILL) async -> (status: Int32, stdout: String, stderr: String) {
        haul.signal(signal)
        return await haul.finish()
    }
}
