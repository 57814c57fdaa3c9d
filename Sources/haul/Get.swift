import ArgumentParser
import Dispatch
import Foundation
import Haul
import HaulCore
import Logging

extension HaulCommand {
    /// `haul get URL`: download one file, resuming whatever is on disk.
    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Download a URL, resuming what is already on disk.",
            discussion: """
                Exit status: 0 done; 1 the download failed; 2 bad usage; 130 after SIGINT and 143 after SIGTERM \
                (the download is paused with its exact offset saved; run the same command again to resume).
                """
        )

        @Argument(help: "The http or https URL to download.")
        var url: String

        @Option(name: .shortAndLong, help: "Write to this path.")
        var output: String?

        @Option(
            name: .shortAndLong, help: "Write into this folder under the server's name (default: the current folder).")
        var directory: String?

        @Flag(
            name: .shortAndLong,
            help: "Adopt a file already at -o PATH as a partial download (bytes are compared with the server first).")
        var `continue` = false

        @Flag(help: "Replace a file at the destination that Haul did not create.")
        var overwrite = false

        @Option(help: "Expected checksum, ALGO=HEX with ALGO one of sha256, sha512, sha1, md5.")
        var checksum: String?

        @Option(name: .customLong("header"), help: "Extra request header 'Name: value' (repeatable).")
        var headers: [String] = []

        @Option(help: "The User-Agent header.")
        var userAgent: String?

        @Option(help: "Seconds without a byte before the connection is abandoned and retried.")
        var timeout: Double = 30

        @Option(help: "Failed attempts in a row without progress before giving up.")
        var retries: Int = 5

        @Flag(name: .shortAndLong, help: "Print errors only.")
        var quiet = false

        @Flag(help: "Print one JSON object per finished download on standard output.")
        var json = false

        @Flag(name: .shortAndLong, help: "Log retries and restarts.")
        var verbose = false

        @Option(help: "Where Haul keeps its state (default: $HAUL_STATE_DIR, else $XDG_STATE_HOME/haul).")
        var stateDir: String?

        func validate() throws {
            if output != nil, directory != nil { throw ValidationError("give -o PATH or -d DIR, not both") }
            if !(timeout > 0) || !timeout.isFinite {
                throw ValidationError("--timeout must be a positive number of seconds")
            }
            if retries < 0 { throw ValidationError("--retries must be 0 or more") }
            if `continue`, output == nil {
                throw ValidationError("-c/--continue needs -o PATH: it adopts the file at that path")
            }
            guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(),
                ["http", "https"].contains(scheme),
                parsed.host?.isEmpty == false
            else { throw ValidationError("'\(url)' is not an http or https URL") }
            if let checksum,
                case .failure(let error) = Result(catching: { () throws(DownloadError) in
                    try Checksum(parsing: checksum)
                })
            {
                throw ValidationError(error.message)
            }
            for header in headers {
                if case .failure(let error) = Result(catching: { () throws(DownloadError) in
                    try DownloadOptions.Header(parsing: header)
                }) {
                    throw ValidationError(error.message)
                }
            }
        }

        func run() async throws {
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = verbose ? .info : .warning
                return handler
            }
            let options = DownloadOptions(
                headers: try headers.map { try DownloadOptions.Header(parsing: $0) },
                userAgent: userAgent,
                checksum: try checksum.map { try Checksum(parsing: $0) },
                overwrite: overwrite,
                continuePartial: `continue`,
                idleTimeoutSeconds: timeout,
                maximumAttemptsWithoutProgress: retries,
                computesSHA256: json
            )
            var configuration = DownloadManager.Configuration(
                stateDirectory: stateDir ?? DownloadManager.defaultStateDirectory()
            )
            configuration.startsStoredDownloads = false
            let output = Output(quiet: quiet, json: json)
            let manager: DownloadManager
            do {
                manager = try DownloadManager(configuration: configuration)
            } catch {
                output.error(error)
                throw ExitCode(1)
            }
            let signals = SignalWatcher { await manager.shutdown(pausing: true) }
            let destination: DownloadManager.Destination =
                self.output.map { .file($0) } ?? .directory(directory ?? FileManager.default.currentDirectoryPath)
            do {
                // Subscribe before adding, so no event of this download is missed.
                let events = manager.events()
                let id = try await manager.add(URL(string: url)!, to: destination, options: options)
                let snapshot = try await manager.snapshot(id)
                if snapshot.state != .completed, let path = snapshot.destination {
                    output.started(url: url, path: path)
                }
                let renderer = Task { await output.render(events, of: id, url: url) }
                defer { renderer.cancel() }
                let result = try await manager.result(of: id)
                renderer.cancel()
                await renderer.value
                output.finished(result)
                await manager.shutdown()
            } catch {
                if let signal = signals.received {
                    output.interrupted(signal)
                    throw ExitCode(128 + signal)
                }
                await manager.shutdown()
                output.error(error)
                throw ExitCode(1)
            }
        }
    }
}

/// Turns SIGINT and SIGTERM into a clean pause: the handler runs once, then the process exits 128+signal.
final class SignalWatcher: @unchecked Sendable {
    private let lock = NSLock()
    private var signal: Int32?
    private var sources: [any DispatchSourceSignal] = []

    init(onSignal: @escaping @Sendable () async -> Void) {
        for number in [SIGINT, SIGTERM] {
            Foundation.signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in
                guard let self, self.record(number) else { return }
                Task { await onSignal() }
            }
            source.resume()
            sources.append(source)
        }
    }

    private func record(_ number: Int32) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard signal == nil else { return false }
        signal = number
        return true
    }

    /// The first signal received, if any.
    var received: Int32? {
        lock.lock()
        defer { lock.unlock() }
        return signal
    }
}
