import ArgumentParser
import Foundation
import Haul
import HaulCore

extension HaulCommand {
    /// `haul retry`: failed or cancelled downloads queued again; with `--url`, a download's expired or moved link
    /// replaced, keeping its bytes.
    struct Retry: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "retry",
            abstract: "Queue failed or cancelled downloads again; --url gives one a new link and keeps its bytes.",
            discussion: """
                Through a daemon the downloads are queued there. Without one, this haul runs them until they end, \
                as haul get does (Ctrl-C pauses them; a paused one is resumed). --url NEW replaces the link of one \
                download whose link expired (a signed URL) or whose file moved: the bytes held are kept when NEW \
                serves the same file (the same length, and the same ETag or the same bytes before each offset); \
                another file starts again from 0, and haul says so.
                """
        ).parsedAlone()

        @OptionGroup var target: Targets

        @Option(name: .customLong("url"), help: "A new link for the one download named.")
        var url: String?

        @Flag(name: .shortAndLong, help: "Print errors only.")
        var quiet = false

        func validate() throws {
            guard let url else { return }
            if target.ids.count != 1 { throw ValidationError("--url replaces the link of one download: give one id") }
            do { try DownloadRules.checkURL(url) } catch {
                throw ValidationError("--url '\(url)' \(error.problem)")
            }
        }

        func run() async throws {
            // No state folder: no download has any of the ids (and none is made to say so).
            if target.state.holdsNothing { _ = try picked(target.ids, target.ids.map { _ in [] }) }
            switch try target.state.connect() {
            case .daemon(let client):
                defer { Task { await client.shutdown() } }
                guard let url else { return try await target.apply("retry", done: "queued again") }
                let download = try await runOrExit { try await client.resolve(target.ids) }[0]
                let after = try await runOrExit { try await client.replaceURL(of: download.id, with: url) }
                let name = after.path.map(PathName.lastComponent(of:)) ?? after.url
                print("haul: new link for \(Format.shortID(after.id)) \(name); \(after.state.rawValue)")
            case .fleet:
                Console.error(
                    Data(
                        ("haul: error: this command goes through a daemon; name one of the fleet's workers with "
                            + "--server URL\n").utf8))
                throw ExitCode(2)
            case .standalone:
                try await runHere()
            }
        }

        /// Without a daemon: a manager of this process's own runs the downloads until they end.
        private func runHere() async throws {
            let output = Output(quiet: quiet, json: false)
            var configuration = DownloadManager.Configuration(stateDirectory: target.state.directory)
            configuration.startsStoredDownloads = false
            configuration.origin = .commandLine
            let manager: DownloadManager
            do { manager = try DownloadManager.runningHere(configuration) } catch {
                output.error(error)
                throw ExitCode(1)
            }
            try? await manager.start()
            let signals = SignalWatcher { await manager.shutdown(pausing: true) }
            let downloads = try await resolve(target.ids, in: manager)
            let board = Task { [events = manager.events(wanted: output.wantedEvents)] in
                await output.render(events, single: downloads.count == 1) { id in try? await manager.result(of: id) }
            }
            var started: [DownloadSnapshot] = []
            var outcomes: [(url: String, outcome: Result<DownloadResult, any Error>)] = []
            for download in downloads {
                do {
                    if let url, let link = URL(string: url) {
                        try await manager.replaceURL(link, for: download.id)
                        if try await manager.snapshot(download.id).state == .paused {
                            try await manager.resume(download.id)
                        }
                    } else if download.state == .paused {
                        try await manager.resume(download.id)
                    } else {
                        try await manager.retry(download.id)
                    }
                    started.append(download)
                } catch {
                    outcomes.append((download.url, .failure(error)))
                    output.failedToAdd(url: download.url, error)
                }
            }
            let results = await manager.results(of: started.map(\.id))
            for (download, result) in zip(started, results) {
                if case .failure = result, signals.received != nil { break }
                outcomes.append((url ?? download.url, result))
            }
            await manager.shutdown(pausing: true)
            await board.value
            try output.conclude(
                outcomes, count: downloads.count, signal: signals.received,
                unfinished: await manager.snapshots(ofExisting: started.map(\.id)).count { !$0.state.isTerminal })
        }
    }
}
