import ArgumentParser
import Dispatch
import Foundation
import Haul
import HaulCore
import Logging

extension HaulCommand {
    /// `haul get URL…`: download files, resuming whatever is on disk.
    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Download URLs, resuming what is already on disk.",
            discussion: """
                Several URLs (as arguments or with -i) run -j at a time; the same URL given twice is fetched once, \
                and one failure does not stop the others. Exit status: 0 all done; 1 a download failed; 2 bad \
                usage; 130 after SIGINT and 143 after SIGTERM (downloads are paused with their exact offsets \
                saved; run the same command again to resume).
                """
        )

        @Argument(help: "The http or https URLs to download.")
        var urls: [String] = []

        @Option(
            name: [.customShort("i"), .customLong("input-file")],
            help:
                "Read URLs from this file, one a line ('-': standard input; blank lines and lines starting with # are skipped)."
        )
        var inputFile: String?

        @Option(name: .shortAndLong, help: "Write to this path (one URL only).")
        var output: String?

        @Option(
            name: .shortAndLong, help: "Write into this folder under the server's names (default: the current folder).")
        var directory: String?

        @Option(name: .shortAndLong, help: "Downloads at once.")
        var jobs: Int = 3

        @Option(
            help: "Limit all downloads together to RATE bytes a second (e.g. 500K, 2M; K, M, G are powers of 1024).")
        var limitRate: String?

        @Option(
            name: [.customShort("x"), .customLong("connections")],
            help: "The most connections per download, 1 to 16 (Haul adds them one at a time while they make it faster)."
        )
        var connections: Int = DownloadOptions.defaultMaxConnections

        @Option(
            help: "Start no segment smaller than SIZE when splitting a file over connections (e.g. 4M; at least 1M).")
        var minSplitSize: String = "4M"

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
            if urls.isEmpty, inputFile == nil { throw ValidationError("give at least one URL, or -i FILE") }
            if output != nil, urls.count + (inputFile == nil ? 0 : 2) > 1 {
                throw ValidationError("-o PATH takes one URL; use -d DIR for several")
            }
            if jobs < 1 { throw ValidationError("-j must be at least 1") }
            if let limitRate, TokenBucket.parseRate(limitRate) == nil {
                throw ValidationError("--limit-rate '\(limitRate)' is not a positive rate such as 500K or 2M")
            }
            if !(timeout > 0) || !timeout.isFinite {
                throw ValidationError("--timeout must be a positive number of seconds")
            }
            if retries < 0 { throw ValidationError("--retries must be 0 or more") }
            if !(1...DownloadOptions.connectionLimit).contains(connections) {
                throw ValidationError("-x/--connections must be between 1 and \(DownloadOptions.connectionLimit)")
            }
            guard let split = TokenBucket.parseRate(minSplitSize), split >= 1 << 20 else {
                throw ValidationError("--min-split-size '\(minSplitSize)' is not a size of at least 1M (e.g. 4M)")
            }
            _ = split
            if `continue`, output == nil {
                throw ValidationError("-c/--continue needs -o PATH: it adopts the file at that path")
            }
            for url in urls { try Self.check(url) }
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

        static func check(_ url: String, line: Int? = nil) throws {
            guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(),
                ["http", "https"].contains(scheme),
                parsed.host?.isEmpty == false
            else {
                let place = line.map { " (line \($0))" } ?? ""
                throw ValidationError("'\(url)'\(place) is not an http or https URL")
            }
        }

        /// The URLs to fetch: arguments, then the input file; each once, in first-seen order.
        func allURLs() throws -> [String] {
            var list = urls
            if let inputFile {
                let text: String
                if inputFile == "-" {
                    text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
                } else {
                    guard let data = FileManager.default.contents(atPath: inputFile) else {
                        throw ValidationError("cannot read the input file \(inputFile)")
                    }
                    text = String(decoding: data, as: UTF8.self)
                }
                for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                    let line = raw.trimmingCharacters(in: .whitespaces.union(.init(charactersIn: "\r")))
                    if line.isEmpty || line.hasPrefix("#") { continue }
                    try Self.check(line, line: number + 1)
                    list.append(line)
                }
            }
            var seen = Set<String>()
            return list.filter { seen.insert($0).inserted }
        }

        func run() async throws {
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = verbose ? .info : .warning
                return handler
            }
            let list: [String]
            do { list = try allURLs() } catch let error as ValidationError {
                FileHandle.standardError.write(Data("Error: \(error.message)\n".utf8))
                throw ExitCode(2)
            }
            if list.isEmpty {
                FileHandle.standardError.write(Data("Error: no URL to download\n".utf8))
                throw ExitCode(2)
            }
            let options = DownloadOptions(
                headers: try headers.map { try DownloadOptions.Header(parsing: $0) },
                userAgent: userAgent,
                checksum: try checksum.map { try Checksum(parsing: $0) },
                overwrite: overwrite,
                continuePartial: `continue`,
                idleTimeoutSeconds: timeout,
                maximumAttemptsWithoutProgress: retries,
                computesSHA256: json,
                maxConnectionsPerDownload: connections,
                minimumSplitSize: TokenBucket.parseRate(minSplitSize) ?? DownloadOptions.defaultMinimumSplitSize
            )
            var configuration = DownloadManager.Configuration(
                stateDirectory: stateDir ?? DownloadManager.defaultStateDirectory()
            )
            configuration.startsStoredDownloads = false
            configuration.maxConcurrentDownloads = jobs
            configuration.rateLimit = limitRate.flatMap(TokenBucket.parseRate)
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
            // Subscribe before adding, so no event is missed; the board is the only writer while downloads run.
            let board = Task { [events = manager.events()] in
                await output.render(events, single: list.count == 1) { id in try? await manager.result(of: id) }
            }
            var outcomes: [(url: String, outcome: Result<DownloadResult, any Error>)] = []
            var ids: [(String, DownloadID)] = []
            for url in list {
                do {
                    ids.append((url, try await manager.add(URL(string: url)!, to: destination, options: options)))
                } catch {
                    outcomes.append((url, .failure(error)))
                    output.failedToAdd(url: url, error)
                }
            }
            for (url, id) in ids {
                do {
                    outcomes.append((url, .success(try await manager.result(of: id))))
                } catch {
                    if signals.received != nil { break }
                    outcomes.append((url, .failure(error)))
                }
            }
            await manager.shutdown(pausing: true)
            await board.value
            if let signal = signals.received {
                output.interrupted(signal)
                throw ExitCode(128 + signal)
            }
            for case (_, .success(let result)) in outcomes where result.wasAlreadyComplete { output.finished(result) }
            if list.count > 1 { output.summary(outcomes) }
            if outcomes.contains(where: { if case .failure = $0.outcome { true } else { false } }) { throw ExitCode(1) }
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
