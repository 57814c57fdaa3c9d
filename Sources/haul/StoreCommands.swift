import ArgumentParser
import Foundation
import Haul
import HaulAPI
import HaulCore
import HaulPostgres
import HaulWire
import Logging

/// Where a command finds its downloads: the state folder (whose daemon, when one runs, owns the store), or another
/// daemon with `--server`.
struct StateOptions: ParsableArguments {
    @Option(help: "Where Haul keeps its state (default: $HAUL_STATE_DIR, else $XDG_STATE_HOME/haul).")
    var stateDir: String?

    @Option(help: "Talk to the daemon at this URL (as its serve.json shows) instead of the local one.")
    var server: String?

    @Option(help: "The token of --server (default: $HAUL_TOKEN).")
    var token: String?

    @Option(
        help: ArgumentHelp(
            "Trust the certificates in this PEM FILE too for an https --server: the daemon's own (self-signed) "
                + "certificate, or the CA that signed it.", valueName: "FILE"))
    var serverCacert: String?

    @Option(
        help: ArgumentHelp(
            "Work on the downloads of a fleet's PostgreSQL store directly, without a daemon "
                + "(postgres://USER[:PASSWORD]@HOST[:PORT]/DB, as haul serve --store takes it).",
            valueName: "URL"))
    var store: String?

    func validate() throws {
        if let store {
            if server != nil { throw ValidationError("--store and --server name two places; give one") }
            do { _ = try PostgresLocation(store) } catch { throw ValidationError(error.message) }
        }
        if let server {
            guard let url = URL(string: server), ["http", "https"].contains(url.scheme?.lowercased() ?? ""),
                url.host?.isEmpty == false
            else { throw ValidationError("--server '\(server)' is not an http or https URL") }
            if (token ?? ProcessInfo.processInfo.environment["HAUL_TOKEN"]).map(\.isEmpty) ?? true {
                throw ValidationError("--server needs the daemon's token: --token TOKEN or HAUL_TOKEN")
            }
        } else if token != nil {
            throw ValidationError("--token goes with --server")
        }
        if let serverCacert {
            guard server?.lowercased().hasPrefix("https:") == true else {
                throw ValidationError("--server-cacert goes with an https --server")
            }
            guard FileManager.default.isReadableFile(atPath: serverCacert) else {
                throw ValidationError("cannot read --server-cacert \(serverCacert)")
            }
        }
    }

    /// The state folder.
    var directory: String { stateDir ?? DownloadManager.defaultStateDirectory() }

    /// Whether the command's place holds nothing at all: no `--server` or `--store`, and no state folder. Commands
    /// that only read or change what is stored (`ls`, `rm`, `clean`, those through a daemon) then create nothing: a
    /// mistyped `--state-dir` leaves no folder behind. `haul get` and `haul serve` make it.
    var holdsNothing: Bool {
        server == nil && store == nil && !FileManager.default.fileExists(atPath: directory)
    }

    /// How the command reaches its downloads: the daemon that owns the state folder (or `--server`), or the store
    /// itself, holding the state folder's lock shared so that no daemon starts behind it.
    func connect() throws -> Connection {
        if let store, let location = try? PostgresLocation(store) { return .fleet(location) }
        if let server, let url = URL(string: server) {
            let token = self.token ?? ProcessInfo.processInfo.environment["HAUL_TOKEN"] ?? ""
            do { return .daemon(try DaemonClient(server: url, token: token, trusting: serverCacert)) } catch {
                // The file's own problem names the flag; SSL_CERT_DIR's names its folder.
                let about = serverCacert.map { error.message.hasPrefix($0) } == true ? "--server-cacert: " : ""
                Console.error(Data("haul: error: \(about)\(error.message)\n".utf8))
                throw ExitCode(2)
            }
        }
        switch StateLock.acquire(directory, exclusive: false) {
        case .acquired(let descriptor): return .standalone(lock: descriptor)
        case .held: return .daemon(DaemonClient(socket: ServeFile.socketPath(in: directory)))
        case .failed(let message):
            Console.error(Data("haul: error: \(message)\n".utf8))
            throw ExitCode(1)
        }
    }

    /// The daemon, or exit 1 saying how to start one.
    func requireDaemon() throws -> DaemonClient {
        if holdsNothing { try noDaemon(runsDownloads: false) }
        switch try connect() {
        case .daemon(let client): return client
        case .fleet:
            Console.error(
                Data(
                    ("haul: error: this command goes through a daemon; name one of the fleet's workers with "
                        + "--server URL\n").utf8))
            throw ExitCode(2)
        case .standalone(let lock):
            close(lock)
            try noDaemon(runsDownloads: StateLock.hasRunners(directory))
        }
    }

    /// Exits 1 saying that no daemon runs for the state folder, and what to do; `runsDownloads`: a `haul get` runs
    /// its downloads on the folder itself.
    private func noDaemon(runsDownloads: Bool) throws -> Never {
        // A haul get that runs its downloads itself is controlled where it runs; a daemon cannot start beside it.
        let advice =
            runsDownloads
            ? "a haul get runs its downloads on it without one: Ctrl-C there pauses them (the same command "
                + "resumes them); downloads run under haul serve can be controlled from here"
            : "start one with `haul serve` (or `systemctl --user start haul`), or name one with --server URL"
        Console.error(Data("haul: error: no haul serve runs for \(directory); \(advice)\n".utf8))
        throw ExitCode(1)
    }

    func openStore() throws -> DownloadStore {
        do {
            return try DownloadStore(directory: directory)
        } catch {
            Console.error(Data("haul: error: \(error.message)\n".utf8))
            throw ExitCode(1)
        }
    }

    /// A manager on the state folder (or the fleet's store) that runs nothing and leaves what other processes run
    /// alone: `haul rm` and `haul clean` without a daemon change the list through it, as the daemon does.
    func openManager(in fleet: PostgresStore? = nil) throws -> DownloadManager {
        var configuration = DownloadManager.Configuration(stateDirectory: fleet == nil ? directory : nil)
        configuration.store = fleet
        configuration.startsStoredDownloads = false
        configuration.recoversInterruptedDownloads = false
        configuration.origin = .commandLine
        do {
            return try DownloadManager(configuration: configuration)
        } catch {
            Console.error(Data("haul: error: \(error.message)\n".utf8))
            throw ExitCode(1)
        }
    }
}

/// Opens the fleet's store at `location` for a command of the command line (not a worker: it claims nothing), or
/// exits 1 saying why.
func openFleetStore(_ location: PostgresLocation) async throws -> PostgresStore {
    var logger = Logger(label: "haul.store")
    logger.logLevel = .critical
    do {
        return try await PostgresStore.open(
            location, worker: "haul-cli@" + PostgresStore.defaultWorkerName, logger: logger)
    } catch {
        Console.error(Data("haul: error: \(error.message)\n".utf8))
        throw ExitCode(1)
    }
}

/// The downloads named by each of `names` (a whole id, or its start or end); one matching none or several exits 1
/// naming it, as the same command through a daemon does (it is no usage error). The list is read a page at a time,
/// keeping only the matches (a fleet's queue may hold millions).
func resolve(_ names: [String], in manager: DownloadManager) async throws -> [DownloadSnapshot] {
    var found: [[DownloadSnapshot]] = Array(repeating: [], count: names.count)
    var cursor: DownloadManager.QueueCursor?
    repeat {
        let page = await manager.snapshots(in: nil, after: cursor, limit: 1000)
        for download in page.downloads {
            for (index, name) in names.enumerated() where Format.id(download.id.rawValue, matches: name) {
                found[index].append(download)
            }
        }
        cursor = page.next
    } while cursor != nil
    return try picked(names, found)
}

/// The one download each of `names` matched (`found`, by name); exits 1 naming one that matched none or several.
func picked(_ names: [String], _ found: [[DownloadSnapshot]]) throws -> [DownloadSnapshot] {
    try zip(names, found).map { name, matches in
        guard matches.count == 1 else {
            let problem =
                matches.isEmpty ? "no download with id \(name)" : "id \(name) matches \(matches.count) downloads"
            Console.error(Data("haul: error: \(problem)\n".utf8))
            throw ExitCode(1)
        }
        return matches[0]
    }
}

/// One line of `haul ls`, from the store or from the daemon; one object of `haul ls --json`, where every key is
/// present (null when not known).
struct ListedDownload: Encodable {
    var id: String
    var url: String
    var state: String
    var destination: String?
    var directory: String?
    var bytes: Int64
    var total: Int64?
    var error: String?
    var connections: Int

    enum CodingKeys: String, CodingKey { case id, url, state, destination, bytes, total, error, connections }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(url, forKey: .url)
        try container.encode(state, forKey: .state)
        try container.encode(destination, forKey: .destination)
        try container.encode(bytes, forKey: .bytes)
        try container.encode(total, forKey: .total)
        try container.encode(error, forKey: .error)
        try container.encode(connections, forKey: .connections)
    }

    init(_ record: DownloadRecord) {
        self.init(
            id: record.id, url: record.url, state: record.state.rawValue, destination: record.destination,
            directory: record.directory, bytes: record.durableOffset, total: record.totalLength,
            error: record.lastError,
            connections: record.state == .running ? record.activeConnections : 0)
    }

    init(_ download: BriefDownload) {
        self.init(
            id: download.id, url: download.url, state: download.state, destination: download.path,
            directory: download.directory, bytes: download.receivedBytes, total: download.totalBytes,
            error: download.error?.message, connections: download.connections)
    }

    init(
        id: String, url: String, state: String, destination: String?, directory: String?, bytes: Int64, total: Int64?,
        error: String?, connections: Int
    ) {
        self.id = id
        self.url = url
        self.state = state
        self.destination = destination
        self.directory = directory
        self.bytes = bytes
        self.total = total
        self.error = error
        self.connections = connections
    }
}

extension HaulCommand {
    /// `haul ls`: the downloads.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ls",
            abstract: "List the downloads: id, state, progress, size, open connections, destination."
        ).parsedAlone()

        @OptionGroup var state: StateOptions

        @Flag(help: "Print a JSON array for scripts.")
        var json = false

        @Option(
            name: .customLong("state"),
            help: ArgumentHelp(
                "Only the downloads in this state (repeatable): \(Self.stateNames).", valueName: "STATE"))
        var states: [String] = []

        /// The states `--state` takes, as the API and `--json` name them.
        static let stateNames = DownloadState.allCases.map(\.rawValue).joined(separator: ", ")

        func validate() throws {
            for name in states where DownloadState(rawValue: name) == nil {
                throw ValidationError("--state '\(name)' is not a state; the states are \(Self.stateNames)")
            }
        }

        func run() async throws {
            // A state folder that does not exist holds no download (and is not made by looking).
            let rows = state.holdsNothing ? [] : try await listed()
            if json {
                // Encoded as values, not as dictionaries of `Any`: JSONSerialization took 4.7 s for 100,000 rows.
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
                Console.output(try encoder.encode(rows) + Data("\n".utf8))
                return
            }
            for row in rows {
                let progress = row.total.map { $0 > 0 ? "\(row.bytes * 100 / $0)%" : "100%" } ?? "-"
                let size = row.total.map(Format.bytes) ?? "?"
                var place = row.destination ?? row.directory.map { $0 + "/" } ?? "?"
                // Before a response names the file, only its URL tells the user which download this is; and a failed
                // or waiting one says why (the JSON form has both too).
                if row.destination == nil { place += " (\(row.url))" }
                if let error = row.error, row.state == "failed" || row.state == "waitingForNetwork" {
                    place += ": \(error)"
                }
                let connections = row.state == "running" ? "\(row.connections)" : "-"
                print(
                    [
                        Format.shortID(row.id), Format.fit(row.state, 17), Format.fit(progress, 5),
                        Format.fit(size, 10), Format.fit(connections, 3), place,
                    ].joined(separator: " "))
            }
        }

        /// The downloads in `states` (all when none is given), from the daemon, the state folder's store or the
        /// fleet's.
        private func listed() async throws -> [ListedDownload] {
            let wanted = states.isEmpty ? nil : Set(states.compactMap(DownloadState.init(rawValue:)))
            switch try state.connect() {
            case .standalone:
                // Chosen by the state shown, which for a download whose process is gone is not the stored one.
                return try state.openStore().allRecords().map { record in
                    var row = ListedDownload(record)
                    // Running in the store, its part file made, and no process holding it: the process that ran it
                    // is gone (killed). The next haul get queues it again and resumes it; it is shown as that.
                    if record.state.isActive, record.partIdentity != nil,
                        !DownloadFolder.isPartHeldElsewhere(record, allowed: .none)
                    {
                        row.state = DownloadState.queued.rawValue
                        row.connections = 0
                    }
                    return row
                }.filter { states.isEmpty || states.contains($0.state) }
            case .fleet(let location):
                let store = try await openFleetStore(location)
                var listed: [ListedDownload] = []
                var cursor: DownloadManager.QueueCursor?
                repeat {
                    let page: [DownloadRecord]
                    do { page = try store.page(in: wanted, after: cursor, limit: 1000) } catch {
                        Console.error(Data("haul: error: \(error.message)\n".utf8))
                        throw ExitCode(1)
                    }
                    listed += page.map(ListedDownload.init)
                    cursor = page.count == 1000 ? page.last.map(DownloadManager.QueueCursor.init) : nil
                } while cursor != nil
                await store.close()
                return listed
            case .daemon(let client):
                defer { Task { await client.shutdown() } }
                // The daemon leaves out the others (a long queue is not sent to be dropped here).
                let chosen = wanted.map { $0.compactMap { Components.Schemas.State(rawValue: $0.rawValue) } }
                return try await runOrExit { try await client.list(states: chosen).map(ListedDownload.init) }
            }
        }
    }

    /// `haul rm ID…`: forget downloads.
    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rm",
            abstract: "Forget downloads (ids, or the unique start or end of one, as `haul ls` shows).",
            discussion: """
                The part file of an unfinished download is deleted (a file handed over with -c goes back to its \
                name instead, cut to the bytes held from its start); --delete-file also deletes a completed file, or \
                the file handed over. \
                Without a daemon a running download cannot be removed (stop that haul first); through a daemon it is \
                cancelled first.
                """
        ).parsedAlone()

        @OptionGroup var state: StateOptions

        @Argument(help: "Ids, or the unique start or end of one.")
        var ids: [String]

        @Flag(help: "Also delete the completed files.")
        var deleteFile = false

        func validate() throws {
            if ids.isEmpty { throw ValidationError("give at least one id (see haul ls)") }
        }

        func run() async throws {
            // No state folder: no download has any of the ids (and none is made to say so).
            if state.holdsNothing { _ = try picked(ids, ids.map { _ in [] }) }
            switch try state.connect() {
            case .standalone, .fleet:
                let fleet = try await state.openFleet()
                let manager = try state.openManager(in: fleet)
                for download in try await resolve(ids, in: manager) {
                    do { try await manager.remove(download.id, deletingFile: deleteFile) } catch {
                        Console.error(
                            Data("haul: error: \(Format.shortID(download.id.rawValue)): \(error.message)\n".utf8))
                        throw ExitCode(1)
                    }
                    reportForgotten(
                        download.id.rawValue, path: download.path, url: download.url,
                        deletedFile: deleteFile && download.state == .completed)
                }
                await manager.shutdown()
                await fleet?.close()
            case .daemon(let client):
                defer { Task { await client.shutdown() } }
                try await runOrExit {
                    for download in try await client.resolve(ids).inStoppingOrder {
                        try await client.delete(download.id, deletingFile: deleteFile)
                        reportForgotten(
                            download.id, path: download.path, url: download.url,
                            deletedFile: deleteFile && download.state == DownloadState.completed.rawValue)
                    }
                }
            }
        }

        /// One line a download, as `pause` and `resume` say what they did (an id's start or end names several
        /// downloads only in error, but the user sees which one went).
        private func reportForgotten(_ id: String, path: String?, url: String, deletedFile: Bool) {
            let name = path.map(PathName.lastComponent(of:)) ?? url
            print("haul: forgot \(Format.shortID(id)) \(name)\(deletedFile ? " and deleted its file" : "")")
        }
    }

    /// `haul clean`: forget finished downloads.
    struct Clean: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "clean",
            abstract: "Forget completed, cancelled and failed downloads (their files stay)."
        ).parsedAlone()

        @OptionGroup var state: StateOptions

        func run() async throws {
            let count: Int
            switch state.holdsNothing ? nil : try state.connect() {
            case nil:
                // No state folder: nothing to forget, and none is made.
                count = 0
            case .standalone, .fleet:
                let fleet = try await state.openFleet()
                let manager = try state.openManager(in: fleet)
                do { count = try await manager.clean() } catch {
                    Console.error(Data("haul: error: \(error.message)\n".utf8))
                    throw ExitCode(1)
                }
                await manager.shutdown()
                await fleet?.close()
            case .daemon(let client):
                defer { Task { await client.shutdown() } }
                count = try await runOrExit { try await client.clean() }
            }
            print("haul: forgot \(count) download\(count == 1 ? "" : "s")")
        }
    }
}

/// Runs a daemon call; a failure prints the daemon's message and exits 1.
func runOrExit<T>(_ body: () async throws -> T) async throws -> T {
    do { return try await body() } catch let error as ClientError {
        Console.error(Data("haul: error: \(error.description)\n".utf8))
        throw ExitCode(1)
    } catch let error as ValidationError {
        Console.error(Data("haul: error: \(error.message)\n".utf8))
        throw ExitCode(2)
    }
}

/// How a command reaches its downloads.
enum Connection {
    /// Through the daemon's API.
    case daemon(DaemonClient)
    /// Through the store, holding the state folder's lock shared (closed when the process ends).
    case standalone(lock: Int32)
    /// Through a fleet's PostgreSQL store (`--store`), beside its workers.
    case fleet(PostgresLocation)
}

extension StateOptions {
    /// The fleet's store when `--store` names one (nil: the state folder's).
    func openFleet() async throws -> PostgresStore? {
        guard let store, let location = try? PostgresLocation(store) else { return nil }
        return try await openFleetStore(location)
    }
}

extension DownloadManager {
    /// A manager of this process's own that runs downloads on the state folder's store (`haul get` and `haul retry`
    /// without a daemon), among the other commands doing the same (`StateLock.joinRunners`): it queues again what
    /// the store holds as running only when it is alone; with others, those downloads may be theirs.
    static func runningHere(_ configuration: Configuration) throws(DownloadError) -> DownloadManager {
        var configuration = configuration
        let runners = configuration.stateDirectory.flatMap(StateLock.joinRunners)
        if let runners, !runners.isAlone { configuration.recoversInterruptedDownloads = false }
        do {
            let manager = try DownloadManager(configuration: configuration)
            if let runners, runners.isAlone { StateLock.share(runners.descriptor) }
            return manager
        } catch {
            if let runners { close(runners.descriptor) }
            throw error
        }
    }
}
