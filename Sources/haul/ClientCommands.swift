import ArgumentParser
import Foundation
import Haul
import HaulAPI
import HaulCore
import HaulWire

extension HaulCommand {
    /// `haul add URL…`: queue downloads with the daemon and return at once.
    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "add",
            abstract: "Queue downloads with the running haul serve and print their ids.",
            discussion: "Returns at once; `haul watch` shows them. The same URL to the same place is added once."
        ).parsedAlone()

        @Argument(help: "The http, https or ftp URLs.")
        var urls: [String] = []

        @Option(name: [.customShort("i"), .customLong("input-file")], help: "Read URLs from this file ('-': stdin).")
        var inputFile: String?

        @Option(name: .shortAndLong, help: "Write to this path (one URL only).")
        var output: String?

        @Option(
            name: .shortAndLong,
            help: "Write into this folder (default: the current folder; with --server, the daemon's download folder).")
        var directory: String?

        @Option(help: "high, normal or low.")
        var priority: String = "normal"

        @Flag(help: "Add them paused (they start on `haul resume`).")
        var paused = false

        @Flag(name: .shortAndLong, help: "Adopt a file already at -o PATH as a partial download.")
        var `continue` = false

        @OptionGroup var transfer: TransferOptions

        @OptionGroup var state: StateOptions

        func validate() throws {
            try checkTargets(
                urls: urls, inputFile: inputFile, output: output, directory: directory, continue: `continue`)
            if Components.Schemas.Priority(rawValue: priority) == nil {
                throw ValidationError("--priority must be high, normal or low")
            }
        }

        func run() async throws {
            try checkURLs(urls)
            let client = try state.requireDaemon()
            let list = try await transfer.withSidecars(
                transfer.entries(urls, inputFile: inputFile, output: output), quiet: false)
            defer { Task { await client.shutdown() } }
            if client.isLocal { try createFolders(of: list, output: output, directory: directory) }
            let network = try transfer.networkForDaemon()
            let items = try list.map { entry in
                try transfer.item(
                    entry, output: output, directory: directory, isLocal: client.isLocal,
                    continuePartial: `continue`, computesSHA256: false,
                    network: network, paused: paused, priority: Components.Schemas.Priority(rawValue: priority))
            }
            let ids = try await runOrExit { try await client.addReturningIDs(items) }
            for id in ids { print(id) }
        }
    }

    /// `haul pause|resume|cancel|retry ID…`.
    struct Pause: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "pause",
            abstract: "Pause downloads of the running haul serve (their exact offsets are kept)."
        ).parsedAlone()
        @OptionGroup var target: TargetsOrAll
        func run() async throws { try await target.apply("pause", done: "paused") }
    }

    struct Resume: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "resume", abstract: "Queue paused downloads of haul serve again."
        ).parsedAlone()
        @OptionGroup var target: TargetsOrAll
        func run() async throws { try await target.apply("resume", done: "resumed") }
    }

    struct Cancel: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "cancel",
            abstract: "Cancel downloads of haul serve (their part files are deleted; `haul retry` starts them again).",
            discussion: """
                A file handed over with -c is not deleted: it goes back to its name, cut to the bytes held from its \
                start.
                """
        ).parsedAlone()
        @OptionGroup var target: Targets
        func run() async throws { try await target.apply("cancel", done: "cancelled") }
    }

    /// `haul workers`: the fleet that shares the daemon's store.
    struct Workers: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "workers",
            abstract:
                "List the workers sharing haul serve's store: name, running or not, last heartbeat, downloads running.",
            discussion: """
                Asks the daemon of the state folder (or --server). Without a shared store (haul serve --store), \
                the one worker is that daemon.
                """
        ).parsedAlone()

        @Flag(help: "Print a JSON array for scripts.")
        var json = false

        @OptionGroup var state: StateOptions

        func run() async throws {
            let client = try state.requireDaemon()
            defer { Task { await client.shutdown() } }
            let workers = try await runOrExit { try await client.workers() }
            if json {
                let formatter = ISO8601DateFormatter()
                let objects: [[String: Any]] = workers.map {
                    [
                        "name": $0.name, "state": $0.state.rawValue,
                        "heartbeatAt": formatter.string(from: $0.heartbeatAt), "downloads": $0.downloads,
                    ]
                }
                let data = try JSONSerialization.data(
                    withJSONObject: objects, options: [.sortedKeys, .withoutEscapingSlashes])
                Console.output(data + Data("\n".utf8))
                return
            }
            for worker in workers {
                let age = Duration.seconds(max(0, Date().timeIntervalSince(worker.heartbeatAt).rounded())).spoken
                switch worker.state {
                case .running:
                    let running = worker.downloads.isEmpty ? "idle" : "\(worker.downloads.count) running"
                    print("\(worker.name)  running, heartbeat \(age) ago  \(running)")
                case .stopped:
                    print("\(worker.name)  stopped \(age) ago")
                case .unresponsive:
                    print("\(worker.name)  unresponsive: no heartbeat for \(age) (killed, cut off or suspended)")
                }
            }
        }
    }

    /// `haul watch [ID…]`: live progress from the daemon's event stream.
    struct Watch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "watch",
            abstract: "Show the live progress of haul serve's downloads until Ctrl-C.",
            discussion: """
                Without ids, every download (and those added meanwhile). With --until-done, exits once none of them \
                is queued or running: 0 when none failed, 1 otherwise. With --until-done --quiet it does not follow \
                the event stream: the daemon answers one long poll when they have stopped, and the failures are \
                printed then.
                """
        ).parsedAlone()

        @Argument(help: "Ids, or the unique start or end of one (default: all).")
        var ids: [String] = []

        @Flag(help: "Exit when the downloads have finished.")
        var untilDone = false

        @Flag(name: .shortAndLong, help: "Print errors only.")
        var quiet = false

        @Flag(help: "Print one JSON object per finished download (completed or failed) on standard output.")
        var json = false

        @OptionGroup var state: StateOptions

        func run() async throws {
            let client = try state.requireDaemon()
            defer { Task { await client.shutdown() } }
            let chosen = try await runOrExit { ids.isEmpty ? nil : try await client.resolve(ids) }
            if untilDone && quiet && !json {
                try await waitQuietly(client, for: chosen)
                return
            }
            let batch = RemoteBatch(followsAll: chosen == nil, endsWhenStopped: untilDone)
            if let chosen { await batch.track(chosen.map(\.snapshot)) }
            var output = Output(quiet: quiet, json: json)
            output.printsFailuresAsTheyHappen = true
            let started = ContinuousClock.now
            let follower = batch.follow(client, output: output)
            let signals = SignalWatcher { await batch.finish() }
            await batch.render(on: output, single: false, since: started)
            follower.cancel()
            if let signal = signals.received { throw ExitCode(128 + signal) }
            if untilDone, await batch.failures > 0 { throw ExitCode(1) }
        }

        /// `--until-done --quiet`: nothing to show until the end but errors, so no event stream (the daemon writing
        /// every change of every download, and this process reading them, while the downloads need the CPU). The
        /// daemon answers one long poll (`GET /api/v1/wait`, asked again every 30 s) once the downloads have stopped;
        /// then the failures since the start are printed (in queue order, not as they happened) and counted, as the
        /// stream's reader would: those failed before it began do not count, unless named.
        private func waitQuietly(_ client: DaemonClient, for chosen: [BriefDownload]?) async throws {
            let named = chosen?.map(\.id)
            let failedBefore = try await runOrExit {
                named == nil ? Set(try await client.list(states: [.failed]).map(\.id)) : []
            }
            let waiting = Task { () -> Components.Schemas.WaitResult? in
                var failures = 0
                while !Task.isCancelled {
                    do {
                        let answer = try await client.wait(for: named, timeout: 30)
                        failures = 0
                        if answer.done { return answer }
                    } catch {
                        // The daemon restarting: ask again, as the event stream's reader reconnects.
                        failures += 1
                        if failures >= 20 || Task.isCancelled { throw error }
                        try await Task.sleep(for: .milliseconds(250))
                    }
                }
                return nil
            }
            let signals = SignalWatcher { waiting.cancel() }
            let output = Output(quiet: true, json: false)
            let answer: Components.Schemas.WaitResult?
            do { answer = try await waiting.value } catch {
                // Ctrl-C cancels the request under way: that is not a lost daemon.
                if let signal = signals.received { throw ExitCode(128 + signal) }
                output.error(ClientError(description: "lost the daemon: \(error)"))
                throw ExitCode(1)
            }
            if let signal = signals.received { throw ExitCode(128 + signal) }
            guard answer != nil else { return }
            let failed =
                try await runOrExit {
                    named == nil
                        ? try await client.list(states: [.failed]).map(\.snapshot)
                        : (answer?.downloads ?? []).map(DownloadSnapshot.init)
                }
                .filter { $0.state == .failed && !failedBefore.contains($0.id.rawValue) }
            for download in failed {
                // As the board prints a failure in a batch.
                output.line("haul: error: \(download.url): \(download.error.map(Output.message) ?? "download failed")")
            }
            if !failed.isEmpty { throw ExitCode(1) }
        }
    }
}

/// The ids a command acts on, and how it reaches the daemon.
struct Targets: ParsableArguments {
    @Argument(help: "Ids, or the unique start or end of one (`haul ls` shows the last 8 characters).")
    var ids: [String] = []

    @OptionGroup var state: StateOptions

    func validate() throws {
        if ids.isEmpty { throw ValidationError("give at least one id (see haul ls)") }
    }

    /// Runs `command` on each download; exits 1 when one is refused (after trying the rest).
    func apply(_ command: String, done: String) async throws {
        let client = try state.requireDaemon()
        defer { Task { await client.shutdown() } }
        try await Self.apply(command, done: done, to: ids, through: client)
    }

    /// Runs `command` on each of the downloads `ids` name; exits 1 when one is refused (after trying the rest).
    static func apply(_ command: String, done: String, to ids: [String], through client: DaemonClient) async throws {
        let downloads = try await runOrExit { try await client.resolve(ids) }.inStoppingOrder
        var refused = false
        for download in downloads {
            do {
                let after = try await client.command(command, download.id)
                let name = after.path.map { ($0 as NSString).lastPathComponent } ?? after.url
                print("haul: \(done) \(Format.shortID(after.id)) \(name)")
            } catch {
                Console.error(Data("haul: error: \(Format.shortID(download.id)): \(error)\n".utf8))
                refused = true
            }
        }
        if refused { throw ExitCode(1) }
    }
}

/// What `haul pause` and `haul resume` act on: ids, or every download with `--all` (aria2's `pauseAll` and
/// `unpauseAll`, the API's `/pause-all` and `/resume-all`). `haul cancel` takes ids only: cancelling deletes part
/// files, too much to do to every download with one flag.
struct TargetsOrAll: ParsableArguments {
    @Argument(help: "Ids, or the unique start or end of one (`haul ls` shows the last 8 characters).")
    var ids: [String] = []

    @Flag(help: "Every download: pause those queued, running or waiting for the network; resume those paused.")
    var all = false

    @OptionGroup var state: StateOptions

    func validate() throws {
        if all, !ids.isEmpty { throw ValidationError("--all names every download: give ids or --all, not both") }
        if !all, ids.isEmpty { throw ValidationError("give at least one id (see haul ls), or --all") }
    }

    func apply(_ command: String, done: String) async throws {
        let client = try state.requireDaemon()
        defer { Task { await client.shutdown() } }
        guard all else { return try await Targets.apply(command, done: done, to: ids, through: client) }
        let counts = try await runOrExit { try await client.commandAll(command) }.counts
        if command == "pause" {
            print("haul: paused every download that was queued, running or waiting; \(counts.paused) paused")
        } else {
            print("haul: resumed every paused download; \(counts.queued) queued, \(counts.running) running")
        }
    }
}

extension [BriefDownload] {
    /// The downloads with those that run last. A running download that pauses, is cancelled or is forgotten hands its
    /// slot to the next queued one at once; acted on first, it would have the daemon start each queued download of
    /// the list in turn, only to stop it a moment later (its part file made, its bytes fetched).
    var inStoppingOrder: [BriefDownload] {
        let holdsSlot = { (download: BriefDownload) in
            download.state == DownloadState.running.rawValue
                || download.state == DownloadState.waitingForNetwork.rawValue
        }
        return filter { !holdsSlot($0) } + filter(holdsSlot)
    }
}
