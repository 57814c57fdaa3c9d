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
            commandName: "get",
            abstract: "Download URLs, resuming what is already on disk.",
            discussion: """
                Several URLs (as arguments or with -i) run -j at a time; the same URL given twice is fetched once, \
                and one failure does not stop the others. When a haul serve owns the state folder, the downloads \
                are handed to it (and run under its -j) and their progress is shown from its event stream. Exit \
                status: 0 all done; 1 a download failed; 2 bad usage; 130 after SIGINT, 143 after SIGTERM and 129 after SIGHUP \
                (downloads are paused with their exact offsets saved; run the same command again to resume).
                """
        ).parsedAlone()

        /// The downloads added in one transaction after the first batch: large enough that a long list takes few
        /// commits, small enough that the running downloads' reports wait little behind an add.
        static let addBatch = 128

        @Argument(
            help: "The http, https or ftp URLs to download (ftpes:// for FTP with AUTH TLS, ftps:// for implicit TLS).")
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
            name: .shortAndLong,
            help: ArgumentHelp(
                "Write into this folder under the server's names (default: the current folder; with --server, the "
                    + "daemon's download folder)."))
        var directory: String?

        @Option(
            name: .shortAndLong, parsing: .unconditional,
            help: "Downloads transferring at once (without a daemon; a daemon runs its own -j).")
        var jobs: Int = 3

        @Option(
            parsing: .unconditional,
            help: ArgumentHelp(
                "The most connections to one host across all the downloads (without a daemon; a daemon keeps its "
                    + "own, `haul serve --max-connections-per-host`).", valueName: "N"))
        var maxConnectionsPerHost: Int?

        @Option(
            name: .customLong("max-per-host"), parsing: .unconditional,
            help: ArgumentHelp(
                "The most downloads of one host transferring at once (without a daemon; a daemon keeps its own, "
                    + "`haul serve --max-per-host`).", valueName: "N"))
        var maxDownloadsPerHost: Int?

        @Option(
            name: .customLong("sort"),
            help: ArgumentHelp(
                "Sort downloads into folders beneath -d (repeatable; the first that matches): '*.iso=ISO', "
                    + "'video/*=Videos' (the answer's type), '*://cdn.example.com/*=CDN'. Not with -o.",
                valueName: "PATTERN=FOLDER"))
        var sortRules: [String] = []

        @Flag(
            name: .shortAndLong,
            help: "Adopt a file already at -o PATH as a partial download (bytes are compared with the server first).")
        var `continue` = false

        @OptionGroup var transfer: TransferOptions

        @Flag(name: .shortAndLong, help: "Print errors only.")
        var quiet = false

        @Flag(help: "Print one JSON object per finished download (completed or failed) on standard output.")
        var json = false

        @Flag(name: .shortAndLong, help: "Log retries and restarts.")
        var verbose = false

        @OptionGroup var state: StateOptions

        @OptionGroup var notices: NoticeOptions

        @Option(
            help: ArgumentHelp(
                "The config file whose hooks and webhooks apply (default: $XDG_CONFIG_HOME/haul/config.toml if it "
                    + "exists).", valueName: "FILE"))
        var config: String?

        func validate() throws {
            try checkTargets(
                urls: urls, inputFile: inputFile, output: output, directory: directory, continue: `continue`)
            try checkRule("-j") { () throws(DownloadRules.RuleViolation) in
                try DownloadRules.checkConcurrentDownloads(jobs)
            }
            if let maxConnectionsPerHost {
                try checkRule("--max-connections-per-host") { () throws(DownloadRules.RuleViolation) in
                    try DownloadRules.checkConnectionsPerHost(maxConnectionsPerHost)
                }
            }
            do { _ = try SortRules(parsing: sortRules) } catch { throw ValidationError("--sort: \(error.message)") }
            if let maxDownloadsPerHost {
                try checkRule("--max-per-host") { () throws(DownloadRules.RuleViolation) in
                    try DownloadRules.checkDownloadsPerHost(maxDownloadsPerHost)
                }
            }
        }

        func run() async throws {
            try checkURLs(urls)
            LoggingSystem.bootstrap { label in
                StandardErrorLogHandler(
                    label: label, level: verbose ? .info : quiet ? .error : .warning, style: .command)
            }
            var list = try transfer.entries(urls, inputFile: inputFile, output: output)
            if list.isEmpty {
                Console.error(Data("Error: no URL to download\n".utf8))
                throw ExitCode(2)
            }
            list = try await transfer.withSidecars(list, quiet: quiet)
            let output = Output(quiet: quiet, json: json)
            var hooks = notices
            do { try hooks.merge(ConfigFile.load(config)) } catch let error as ValidationError {
                Console.error(Data("Error: \(error.message)\n".utf8))
                throw ExitCode(2)
            }
            switch try state.connect() {
            case .standalone:
                try createFolders(of: list, output: self.output, directory: directory)
                try await runHere(list, output: output, notices: try hooks.notices())
            case .fleet:
                Console.error(
                    Data(
                        ("Error: haul get runs downloads here or through a daemon; to give them to a fleet, name one "
                            + "of its workers with --server URL\n").utf8))
                throw ExitCode(2)
            case .daemon(let client):
                defer { Task { await client.shutdown() } }
                guard notices.isEmpty else {
                    Console.error(
                        Data(
                            ("Error: a daemon runs these downloads, and hooks and webhooks are never given to it over "
                                + "its API: set them with haul serve --on-complete, --on-error and --webhook, or in "
                                + "its config file\n").utf8))
                    throw ExitCode(2)
                }
                guard sortRules.isEmpty else {
                    Console.error(
                        Data(
                            ("Error: a daemon runs these downloads and sorts them by its own rules: set them with "
                                + "haul serve --sort, in its config file, or in its settings\n").utf8))
                    throw ExitCode(2)
                }
                if client.isLocal { try createFolders(of: list, output: self.output, directory: directory) }
                try await runThroughDaemon(client, list: list, output: output)
            }
        }

        /// Without a daemon: a manager of this process's own on the store.
        private func runHere(_ list: [URLList.Entry], output: Output, notices: Notices) async throws {
            let options = try transfer.downloadOptionsWithTLS(continuePartial: `continue`, computesSHA256: json)
            var configuration = DownloadManager.Configuration(stateDirectory: state.directory)
            configuration.startsStoredDownloads = false
            configuration.maxConcurrentDownloads = jobs
            configuration.maxConnectionsPerHost = maxConnectionsPerHost
            configuration.maxDownloadsPerHost = maxDownloadsPerHost
            configuration.sortRules = sortRules
            configuration.rateLimit = transfer.rate
            configuration.origin = .commandLine
            // Its events go to its own output, which never reconnects: none are kept to replay.
            configuration.replayCapacity = 0
            configuration.notices = notices
            let manager: DownloadManager
            do {
                manager = try DownloadManager.runningHere(configuration)
            } catch {
                output.error(error)
                throw ExitCode(1)
            }
            // Notices an earlier run stored and did not deliver go out now (nothing stored is started).
            try? await manager.start()
            let signals = SignalWatcher { await manager.shutdown(pausing: true) }
            let folderPath = directory ?? FileManager.default.currentDirectoryPath
            let destination: DownloadManager.Destination = self.output.map { .file($0) } ?? .directory(folderPath)
            // Subscribe before adding, so no event is missed; the board is the only writer while downloads run.
            let board = Task { [events = manager.events(wanted: output.wantedEvents)] in
                await output.render(events, single: list.count == 1) { id in try? await manager.result(of: id) }
            }
            var outcomes: [(url: String, outcome: Result<DownloadResult, any Error>)] = []
            let requests = list.map { entry in
                var options = options
                options.mirrors = entry.mirrors
                options.pieces = entry.pieces
                options.expectedLength = entry.size
                if let checksum = entry.checksum { options.checksum = checksum }
                // A Metalink names its files: each goes into the folder under that name (-o names the one file).
                let named = entry.name.map { DownloadManager.Destination.file(folderPath + "/" + $0) }
                return (
                    url: entry.url,
                    request: DownloadRequest(
                        url: entry.parsedURL ?? URL(string: entry.url)!,
                        destination: self.output == nil ? named ?? destination : destination,
                        options: options, origin: .commandLine)
                )
            }
            var ids = await add(requests, to: manager, output: output, signals: signals, failures: &outcomes)
            // After a signal, what was neither added nor refused is left for the next run.
            let notAdded = requests.count - ids.count - outcomes.count
            // One wait for the whole batch (a shutdown by a signal ends it too).
            var results = await manager.results(of: ids.map(\.1))
            // A URL that answered a Metalink of several files: the others were added as downloads of their own.
            var followed: [(String, DownloadID)] = []
            for (_, id) in ids {
                for file in await manager.filesFollowed(from: id) {
                    followed.append(((try? await manager.snapshot(file))?.url ?? file.rawValue, file))
                }
            }
            if !followed.isEmpty, signals.received == nil {
                ids += followed
                results += await manager.results(of: followed.map(\.1))
            }
            for ((url, _), result) in zip(ids, results) {
                if case .failure = result, signals.received != nil { break }
                outcomes.append((url, result))
            }
            await manager.shutdown(pausing: true)
            await board.value
            let unfinished = await manager.snapshots(ofExisting: ids.map(\.1)).count { !$0.state.isTerminal } + notAdded
            let untold = await manager.undeliveredNotices
            if untold > 0, !quiet {
                let ends = untold == 1 ? "1 download's end is" : "\(untold) downloads' ends are"
                output.line(
                    "haul: warning: \(ends) not told to every hook and webhook yet; kept in the state folder, the next"
                        + " haul get or haul serve on it with the same hooks and webhooks tells them")
            }
            try output.conclude(outcomes, count: list.count, signal: signals.received, unfinished: unfinished)
        }

        /// Adds the list in batches, the first of twice the downloads at once, so that downloads start while the rest
        /// is added; each batch is one transaction (a thousand single adds committed a thousand times), written by the
        /// store's thread while the manager goes on. An item that cannot be added is told and left out, and the rest
        /// of its batch added again; a batch the store could not write is told item by item. After a signal the
        /// manager has shut down, and what is not added yet is left out untold. Returns the downloads, in list order.
        private func add(
            _ requests: [(url: String, request: DownloadRequest)], to manager: DownloadManager, output: Output,
            signals: SignalWatcher, failures: inout [(url: String, outcome: Result<DownloadResult, any Error>)]
        ) async -> [(String, DownloadID)] {
            var batches: [(urls: [String], added: [DownloadManager.Added], commit: DownloadStore.Commit)] = []
            var next = 0
            adding: while next < requests.count, signals.received == nil {
                let size = next == 0 ? max(32, 2 * jobs) : Self.addBatch
                var pending = requests[next..<min(requests.count, next + size)]
                next = pending.endIndex
                while !pending.isEmpty {
                    do {
                        let (added, commit) = try await manager.addDeferringCommit(pending.map(\.request))
                        batches.append((pending.map(\.url), added, commit))
                        pending = []
                    } catch {
                        if signals.received != nil { break adding }
                        let failed = pending.remove(at: pending.startIndex + error.index)
                        failures.append((failed.url, .failure(error.error)))
                        output.failedToAdd(url: failed.url, error.error)
                    }
                }
            }
            var ids: [(String, DownloadID)] = []
            for batch in batches {
                do {
                    try await manager.committed(batch.commit, rollingBack: batch.added)
                    ids += zip(batch.urls, batch.added).map { ($0, $1.id) }
                } catch {
                    for (url, added) in zip(batch.urls, batch.added) {
                        if added.isNew {
                            failures.append((url, .failure(error)))
                            output.failedToAdd(url: url, error)
                        } else {
                            ids.append((url, added.id))
                        }
                    }
                }
            }
            return ids
        }
    }
}

extension Output {
    /// After a batch: already-complete files, the summary, and the exit status (1 when any failed, 128+signal after
    /// a signal, whose line says whether `unfinished` downloads are left to resume).
    func conclude(
        _ outcomes: [(url: String, outcome: Result<DownloadResult, any Error>)], count: Int, signal: Int32?,
        unfinished: Int
    ) throws {
        if let signal {
            interrupted(signal, unfinished: unfinished)
            throw ExitCode(128 + signal)
        }
        for case (_, .success(let result)) in outcomes where result.wasAlreadyComplete { finished(result) }
        for case (let url, .failure(let error)) in outcomes { failedJSON(url: url, error) }
        if count > 1 { summary(outcomes) }
        if outcomes.contains(where: { if case .failure = $0.outcome { true } else { false } }) { throw ExitCode(1) }
    }
}

/// Turns SIGINT and SIGTERM into a clean pause: the handler runs once, then the process exits 128+signal.
final class SignalWatcher: @unchecked Sendable {
    private let lock = NSLock()
    private var signal: Int32?
    private var sources: [any DispatchSourceSignal] = []

    /// SIGHUP too: the terminal closed (an SSH session dropped) ends the command as Ctrl-C does, its downloads
    /// paused at their exact offsets, where by default it would kill it at once and lose what came since the last
    /// checkpoint.
    init(onSignal: @escaping @Sendable () async -> Void) {
        for number in [SIGINT, SIGTERM, SIGHUP] {
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
