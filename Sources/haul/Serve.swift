import ArgumentParser
import Foundation
import Haul
import HaulCore
import HaulPostgres
import HaulServer
import HaulWire
import Logging

extension HaulCommand {
    /// `haul serve`: the daemon.
    struct Serve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "serve",
            abstract: "Run Haul as a service: an HTTP API, a live event stream, and the queue kept between runs.",
            discussion: """
                Listens on 127.0.0.1:7165 and on STATE_DIR/haul.sock (for your own haul commands), writes \
                STATE_DIR/serve.json with the URL and the token, and prints a URL that signs a browser in. \
                SIGTERM or SIGINT stop it within 5 s: running downloads stop with their exact offsets and resume \
                on the next start. Settings given here (-j, --limit-rate, -x) replace the stored ones.
                """
        ).parsedAlone()

        @Option(
            help:
                "A TOML file of these settings, each under its flag's long name (default: $XDG_CONFIG_HOME/haul/config.toml if it exists; SIGHUP reads it again)."
        )
        var config: String?

        @Option(help: "HOST:PORT to listen on (port 0 picks a free one; default 127.0.0.1:7165).")
        var listen: String?

        // -d as `haul get -d` and aria2c's -d.
        @Option(
            name: [.customShort("d"), .long],
            help:
                "Where downloads go by default, made when missing (default: $XDG_DOWNLOAD_DIR, else ~/Downloads, else here)."
        )
        var downloadDir: String?

        @Option(name: .customLong("allow-dir"), help: "A further folder API clients may write to (repeatable).")
        var allowDirs: [String] = []

        @Option(name: .customLong("allow-host"), help: "A further host name the API answers to (repeatable).")
        var allowHosts: [String] = []

        @Option(help: "Where Haul keeps its state (default: $HAUL_STATE_DIR, else $XDG_STATE_HOME/haul).")
        var stateDir: String?

        @Option(
            help: ArgumentHelp(
                "Keep the downloads in PostgreSQL instead of STATE_DIR/haul.sqlite (also $HAUL_STORE).",
                discussion: "postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?sslmode=MODE]; without a password in it, "
                    + "$PGPASSWORD gives it. The password is never logged or shown.",
                valueName: "URL"))
        var store: String?

        @Option(
            help: ArgumentHelp(
                "This worker's name in a fleet on --store (default: the host name).", valueName: "NAME"))
        var worker: String?

        @Option(
            help: ArgumentHelp(
                "How long a claimed download stays this worker's without a heartbeat, e.g. 15s, 2s, 1m "
                    + "(with --store; default 15s).", valueName: "DURATION"))
        var lease: String?

        @Option(
            help: ArgumentHelp(
                "With --store: downloads the whole fleet runs at once, kept in the store for every worker "
                    + "(0: no fleet-wide limit, each worker's -j alone).", valueName: "N"))
        var fleetJobs: Int?

        @Option(name: .shortAndLong, help: "Downloads transferring at once.")
        var jobs: Int?

        @Option(help: "Limit all downloads together to RATE bytes a second (e.g. 500K, 2M; 0 removes the limit).")
        var limitRate: String?

        @Option(
            help: ArgumentHelp(
                "The most connections to one host across all downloads, kept with the settings (with --store: the "
                    + "whole fleet's together; 0: no limit).", valueName: "N"))
        var maxConnectionsPerHost: Int?

        @Option(
            name: .customLong("max-per-host"),
            help: ArgumentHelp(
                "The most downloads of one host transferring at once, kept with the settings (with --store: each "
                    + "worker's own; 0: no limit).", valueName: "N"))
        var maxDownloadsPerHost: Int?

        @Option(
            name: [.customShort("x"), .customLong("connections")],
            help: "The most connections of a download that does not say, 1 to 16.")
        var connections: Int?

        @Option(
            help:
                "Read the token from this file (else $HAUL_TOKEN, else the fleet's from --store, else STATE_DIR/token, made on first start)."
        )
        var tokenFile: String?

        @Option(help: "A PEM certificate chain: serve HTTPS.")
        var tlsCert: String?

        @Option(help: "The PEM private key of --tls-cert.")
        var tlsKey: String?

        @Option(help: "trace, debug, info, notice, warning, error or critical (default notice).")
        var logLevel: String?

        @Option(
            help: ArgumentHelp(
                "A rule that changes -j and --limit-rate by the local time (repeatable, in order), e.g. "
                    + "'mon-fri 09:00-18:00 rate=512K', '00:00-06:00 jobs=8 rate=0', 'sat,sun pause'; replaces the "
                    + "stored schedule.", valueName: "RULE"))
        var schedule: [String] = []

        @Option(
            name: .customLong("sort"),
            help: ArgumentHelp(
                "Sort downloads into folders beneath the download folder (repeatable; the first that matches): "
                    + "'*.iso=ISO', 'video/*=Videos' (the answer's type), '*://cdn.example.com/*=CDN'; replaces the "
                    + "stored rules.", valueName: "PATTERN=FOLDER"))
        var sortRules: [String] = []

        @OptionGroup var notices: NoticeOptions

        func validate() throws {
            if let listen, Self.split(listen) == nil {
                throw ValidationError("--listen '\(listen)' is not HOST:PORT (e.g. 127.0.0.1:7165, [::1]:0)")
            }
            if let jobs {
                try checkRule("-j") { () throws(DownloadRules.RuleViolation) in
                    try DownloadRules.checkConcurrentDownloads(jobs)
                }
            }
            if let limitRate, TokenBucket.parseLimit(limitRate) == nil {
                throw ValidationError("--limit-rate '\(limitRate)' is not a rate such as 500K or 2M (0: no limit)")
            }
            if let connections {
                try checkRule("-x/--connections") { () throws(DownloadRules.RuleViolation) in
                    try DownloadRules.checkConnections(connections)
                }
            }
            if let perHost = maxConnectionsPerHost, perHost != 0 {
                try checkRule("--max-connections-per-host") { () throws(DownloadRules.RuleViolation) in
                    try DownloadRules.checkConnectionsPerHost(perHost)
                }
            }
            if let perHost = maxDownloadsPerHost, perHost != 0 {
                try checkRule("--max-per-host") { () throws(DownloadRules.RuleViolation) in
                    try DownloadRules.checkDownloadsPerHost(perHost)
                }
            }
            if let store = storeURL {
                do { _ = try PostgresLocation(store) } catch { throw ValidationError(error.message) }
            } else if worker != nil || lease != nil || fleetJobs != nil {
                throw ValidationError(
                    "--worker, --lease and --fleet-jobs are for a worker of a fleet: give --store (or $HAUL_STORE)")
            }
            if let fleetJobs, fleetJobs != 0 {
                try checkRule("--fleet-jobs") { () throws(DownloadRules.RuleViolation) in
                    try DownloadRules.checkConcurrentDownloads(fleetJobs)
                }
            }
            if let worker, worker.isEmpty || worker.count > 200 || worker.contains(where: \.isNewline) {
                throw ValidationError("--worker '\(worker)' is not a name: 1 to 200 characters on one line")
            }
            if let lease {
                guard let duration = Self.parseDuration(lease), (.seconds(1)...(.seconds(3600))).contains(duration)
                else {
                    throw ValidationError("--lease '\(lease)' is not a duration from 1s to 1h (e.g. 15s, 2s, 1m)")
                }
            }
            if (tlsCert == nil) != (tlsKey == nil) { throw ValidationError("give --tls-cert and --tls-key together") }
            do { _ = try Schedule(parsing: schedule) } catch { throw ValidationError("--schedule: \(error.message)") }
            do { _ = try SortRules(parsing: sortRules) } catch { throw ValidationError("--sort: \(error.message)") }
            if let logLevel, Logger.Level(rawValue: logLevel) == nil {
                throw ValidationError(
                    "--log-level '\(logLevel)' is not one of trace, debug, info, notice, warning, error, critical")
            }
            // A missing download folder is made when the daemon starts, as aria2 makes its --dir; a missing allowed
            // folder is more likely a typo than a wish, and is refused.
            for (flag, folder) in allowDirs.map({ ("--allow-dir", $0) })
                + [downloadDir].compactMap({ $0 }).map({ ("--download-dir", $0) })
            {
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory) {
                    guard isDirectory.boolValue else { throw ValidationError("\(flag) '\(folder)' is not a folder") }
                } else if flag == "--allow-dir" {
                    throw ValidationError("\(flag) '\(folder)': no such folder")
                }
            }
        }

        /// `--store`, else `$HAUL_STORE`; nil for the SQLite store in the state folder.
        var storeURL: String? {
            if let store { return store }
            guard let text = ProcessInfo.processInfo.environment["HAUL_STORE"], !text.isEmpty else { return nil }
            return text
        }

        /// A duration such as `15`, `15s`, `500ms` or `2m` (seconds when no unit is given).
        static func parseDuration(_ text: String) -> Duration? {
            let units: [(suffix: String, seconds: Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600)]
            var number = Substring(text)
            var scale = 1.0
            for unit in units where text.hasSuffix(unit.suffix) {
                number = text.dropLast(unit.suffix.count)
                scale = unit.seconds
                break
            }
            // Beyond about 290 million years the milliseconds pass Int64: such a value is refused, as a bad one is.
            guard let value = Double(number), value.isFinite, value > 0, value * scale < 9e15 else { return nil }
            return .milliseconds(Int64((value * scale * 1000).rounded()))
        }

        /// HOST and PORT of `HOST:PORT` or `[V6]:PORT`.
        static func split(_ text: String) -> (host: String, port: Int)? {
            guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
                (0...65535).contains(port)
            else { return nil }
            var host = String(text[..<colon])
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            return host.isEmpty ? nil : (host, port)
        }

        func run() async throws {
            let serve: Serve
            do { serve = try withConfig() } catch let error as ValidationError {
                Console.error(Data("haul: error: \(error.message)\n".utf8))
                throw ExitCode(2)
            }
            try await serve.serve(flags: self)
        }

        /// Runs the daemon with these settings (the config file's merged into `flags`, the command line's).
        private func serve(flags: Serve) async throws {
            let level = Logger.Level(rawValue: logLevel ?? "notice") ?? .notice
            LoggingSystem.bootstrap { label in StandardErrorLogHandler(label: label, level: level, style: .daemon) }
            var options = DaemonOptions(stateDirectory: stateDir ?? DownloadManager.defaultStateDirectory())
            let (host, port) = Self.split(listen ?? "127.0.0.1:7165")!
            options.listenHost = host
            options.listenPort = port
            if let downloadDir {
                try createFolder(downloadDir)
                options.downloadDirectory = (downloadDir as NSString).standardizingPath
            }
            options.allowedDirectories = allowDirs
            options.allowedHosts = allowHosts
            options.maxConcurrentDownloads = jobs
            options.rateLimit = limitRate.flatMap(TokenBucket.parseLimit)
            options.connections = connections
            options.maxConnectionsPerHost = maxConnectionsPerHost
            options.maxDownloadsPerHost = maxDownloadsPerHost
            options.schedule = schedule.isEmpty ? nil : schedule
            options.sortRules = sortRules.isEmpty ? nil : sortRules
            options.tlsCertificate = tlsCert
            options.tlsKey = tlsKey
            options.logger = Logger(label: "haul")
            options.notices = try notices.notices()
            options.reloads = flags.reloads(startedAs: self, logger: options.logger)
            if let tokenFile {
                guard let data = FileManager.default.contents(atPath: tokenFile) else {
                    Console.error(Data("haul: error: cannot read the token file \(tokenFile)\n".utf8))
                    throw ExitCode(2)
                }
                options.token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            } else if let token = ProcessInfo.processInfo.environment["HAUL_TOKEN"], !token.isEmpty {
                options.token = token
            }
            if options.token?.isEmpty == true {
                Console.error(Data("haul: error: the token is empty\n".utf8))
                throw ExitCode(2)
            }
            var shared: PostgresStore?
            do {
                if let url = storeURL {
                    let store = try await PostgresStore.open(
                        try PostgresLocation(url), worker: worker ?? PostgresStore.defaultWorkerName,
                        lease: lease.flatMap(Self.parseDuration) ?? .seconds(15), logger: Logger(label: "haul.store"))
                    shared = store
                    // A name another running worker has is refused (after seeing whether it still beats).
                    try await store.takeName { [logger = options.logger] age in
                        let ago = Duration.seconds(age).spoken
                        logger.notice(
                            "worker \(store.worker): a process of this name beat \(ago) ago; waiting up to \(store.leaseDuration.spoken) to see whether it still runs"
                        )
                    }
                    // One token for the whole fleet, unless this worker is given its own.
                    if options.token == nil { options.token = try store.fleetToken() }
                    if let fleetJobs { try store.setFleetLimit(fleetJobs == 0 ? nil : fleetJobs) }
                    options.configureManager = { $0.store = store }
                    options.logger.notice(
                        "worker \(store.worker): downloads are kept in \(store.location), leases last \(store.leaseDuration)"
                    )
                }
                try await Daemon.run(options)
                await shared?.close()
            } catch {
                await shared?.close()
                Console.error(Data("haul: error: \(error)\n".utf8))
                throw ExitCode(1)
            }
        }
    }
}
