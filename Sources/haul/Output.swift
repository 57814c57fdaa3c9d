import Foundation
import Haul
import HaulCore

/// What `haul` prints: progress on a terminal, a line at start and end otherwise, errors always, JSON on request.
/// Messages go to standard error; JSON results to standard output.
struct Output: Sendable {
    let quiet: Bool
    let json: Bool
    /// Whether a failure's JSON is printed when the download fails (`haul watch`, a stream of ends), rather than
    /// with the batch's outcomes (`haul get`, where a download that failed may still complete: a refreshed link).
    var printsFailuresAsTheyHappen = false
    let isTerminal = isatty(STDERR_FILENO) != 0

    /// Whether progress events are drawn (a progress bar on a terminal, unless quiet).
    var drawsProgress: Bool { isTerminal && !quiet }

    /// The events `render` acts on: a subscription with this picks them, and the others are never queued for it nor
    /// wake its reader (a batch of a thousand small files is several thousand events, of which a quiet run off a
    /// terminal shows only the failures).
    var wantedEvents: @Sendable (DownloadEvent.Kind) -> Bool {
        let (isTerminal, quiet, json, draws) = (isTerminal, quiet, json, drawsProgress)
        return { kind in
            switch kind.name {
            case .added, .changed:
                switch kind.state {
                case .failed: return true
                // Its end line or JSON, or the board's count.
                case .completed: return !quiet || json || isTerminal
                // The board's name, or the start line off a terminal.
                case .running, .waitingForNetwork: return !quiet
                // Only the board forgets its progress line.
                default: return draws
                }
            case .progress: return draws
            case .retrying, .restarted: return !quiet
            default: return false
            }
        }
    }

    func line(_ text: String) {
        Console.error(Data((text + "\n").utf8))
    }

    func error(_ error: any Error) {
        line("haul: error: \(Self.message(error))")
    }

    static func message(_ error: any Error) -> String {
        (error as? DownloadError)?.description ?? String(describing: error)
    }

    func failedToAdd(url: String, _ error: any Error) {
        line("haul: error: \(Self.shown(url)): \(Self.message(error))")
    }

    /// With --json, a failed download's object on standard output beside the completed ones': `url`, `error` (the
    /// message), `code` and the HTTP `status` when there is one, so a script reading the lines sees every end.
    func failedJSON(url: String, _ error: any Error) {
        guard json else { return }
        let failure = error as? DownloadError
        let object: [String: Any] = [
            "url": Self.shown(url), "error": Self.message(error), "code": failure?.code.description ?? "unknown",
            "status": failure?.status ?? NSNull(),
        ]
        if let data = try? JSONSerialization.data(
            withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        {
            Console.output(data + Data("\n".utf8))
        }
    }

    /// A URL as printed: without the `user:password@` it may carry (the password is never shown).
    static func shown(_ url: String) -> String {
        guard var components = URLComponents(string: url), components.user != nil || components.password != nil
        else { return url }
        components.user = nil
        components.password = nil
        return components.string ?? url
    }

    /// The line after a signal. `unfinished` downloads were paused (or never added); none when every one had ended
    /// (a live recording ends when it is stopped), and then there is nothing to resume.
    func interrupted(_ signal: Int32, unfinished: Int) {
        // After SIGHUP the terminal is gone: nobody reads the line.
        guard !quiet, signal != SIGHUP else { return }
        let stopped = signal == SIGINT ? "interrupted" : "terminated"
        if unfinished == 0 {
            line("haul: \(stopped); every download had ended, nothing is left to resume")
        } else {
            line("haul: \(stopped); paused with every byte kept. Run the same command to resume.")
        }
    }

    /// The end line (and JSON) of one download.
    func finished(_ result: DownloadResult) {
        if !quiet {
            if result.wasAlreadyComplete {
                line("haul: \(result.path) is already complete (\(Format.bytes(result.bytes))); nothing fetched")
            } else if result.bytes > 0, result.resumedFrom >= result.bytes {
                // Adopted whole (-c): only the check of its end was fetched.
                line("haul: saved \(result.path) (\(Format.bytes(result.bytes)); every byte was already here)")
            } else {
                let resumed = result.resumedFrom > 0 ? ", resumed from \(Format.bytes(result.resumedFrom))" : ""
                let took = Format.took(bytes: result.bytes - result.resumedFrom, seconds: result.seconds)
                line("haul: saved \(result.path) (\(Format.bytes(result.bytes)) in \(took)\(resumed))")
            }
        }
        if json {
            let object: [String: Any] = [
                "url": result.url, "path": result.path, "bytes": result.bytes, "sha256": result.sha256 ?? NSNull(),
                "seconds": result.seconds, "resumed-from": result.resumedFrom,
            ]
            if let data = try? JSONSerialization.data(
                withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
            {
                Console.output(data + Data("\n".utf8))
            }
        }
    }

    /// Every download with its result, after a batch.
    func summary(_ outcomes: [(url: String, outcome: Result<DownloadResult, any Error>)]) {
        let failed = outcomes.filter { if case .failure = $0.outcome { true } else { false } }.count
        if quiet && failed == 0 { return }
        line("haul: \(outcomes.count - failed) done, \(failed) failed")
        for (url, outcome) in outcomes {
            switch outcome {
            case .success(let result) where !quiet: line("  ok      \(result.path) (\(Format.bytes(result.bytes)))")
            case .success: break
            case .failure(let error): line("  failed  \(Self.shown(url)): \(Self.message(error))")
            }
        }
    }

    /// Draws the downloads' progress (one line each and a total line on a terminal; start and end lines otherwise)
    /// until the event stream ends. The only writer to standard error while downloads run. `result` gives the result
    /// of a download that completed (nil when it was already complete before this run: the caller reports those).
    func render<Events: AsyncSequence<DownloadEvent, Never>>(
        _ events: Events, single: Bool, result: @escaping (DownloadID) async -> DownloadResult?
    ) async {
        var board = Board(single: single)
        var announced = Set<DownloadID>()
        // The end each download was last shown with: the same end told again is shown once, and a download that ends
        // anew (it failed, its link was refreshed, and it completed) shows that too, whichever events between the two
        // the subscription carries (`wantedEvents`).
        var ended: [DownloadID: String] = [:]
        /// Each download's URL, to say whose a retry or a restart is when there are several.
        var urls: [DownloadID: String] = [:]
        func whose(_ id: DownloadID) -> String { single ? "" : urls[id].map { "\($0): " } ?? "" }
        var lastDraw = ContinuousClock.now - .seconds(1)
        func say(_ text: String) {
            if isTerminal { board.clear() }
            line(text)
            if isTerminal && !quiet { board.draw() }
        }
        // The engine's log lines are held while the board is drawn, and written above it here.
        let holdsLogLines = isTerminal && !quiet
        if holdsLogLines { HeldLogLines.start() }
        for await event in events {
            if holdsLogLines {
                for held in HeldLogLines.take() { say(held) }
            }
            switch event {
            case .added(let download), .changed(let download):
                let id = download.id
                if !single && !quiet { urls[id] = download.url }
                // The names are drawn only on a terminal's board.
                if isTerminal && !quiet, let path = download.path { board.names[id] = PathName.lastComponent(of: path) }
                switch download.state {
                case .running, .waitingForNetwork:
                    if !isTerminal && !quiet, let path = download.path, announced.insert(id).inserted {
                        line("haul: \(download.url) -> \(path)")
                    }
                case .completed:
                    board.progress[id] = nil
                    // Quiet, without JSON and without a terminal, a completed download shows nothing: its result is
                    // not asked for (a trip to the manager for each of a thousand small files).
                    guard ended.updateValue("completed", forKey: id) != "completed", !quiet || json || isTerminal,
                        let result = await result(id),
                        !result.wasAlreadyComplete
                    else { continue }
                    board.done += 1
                    board.doneBytes += result.bytes
                    if isTerminal { board.clear() }
                    finished(result)
                    if isTerminal && !quiet { board.draw() }
                case .failed:
                    board.progress[id] = nil
                    let message = download.error.map(Self.message) ?? "download failed"
                    let end = "failed: " + message
                    guard ended.updateValue(end, forKey: id) != end else { continue }
                    board.failed += 1
                    if printsFailuresAsTheyHappen {
                        failedJSON(url: download.url, download.error ?? DownloadError(.invalidResponse, message))
                    }
                    if quiet {
                        line("haul: error: \(single ? "" : "\(download.url): ")\(message)")
                    } else {
                        say("haul: error: \(single ? "" : "\(download.url): ")\(message)")
                    }
                default:
                    board.progress[id] = nil
                }
            case .progress(let progress) where isTerminal && !quiet:
                board.progress[progress.id] = progress
                let now = ContinuousClock.now
                guard now - lastDraw >= .milliseconds(100) else { continue }
                lastDraw = now
                board.clear()
                board.draw()
            case .retrying(let id, let error, let delay):
                if !quiet { say("haul: \(whose(id))\(error.message); retrying in \(delay.spoken)") }
            case .restarted(let id, let reason):
                if !quiet { say("haul: \(whose(id))\(reason)") }
            default:
                break
            }
        }
        if isTerminal { board.clear() }
        if holdsLogLines {
            for held in HeldLogLines.stop() { line(held) }
        }
    }
}

/// The lines drawn on a terminal: one per running download and, for batches, a total.
struct Board {
    let single: Bool
    var names: [DownloadID: String] = [:]
    var progress: [DownloadID: DownloadProgress] = [:]
    var done = 0
    var failed = 0
    var doneBytes: Int64 = 0
    private var drawn = 0

    init(single: Bool) { self.single = single }

    mutating func clear() {
        guard drawn > 0 else { return }
        Console.error(Data("\u{1B}[\(drawn)A\r\u{1B}[J".utf8))
        drawn = 0
    }

    mutating func draw() {
        let running = progress.values.sorted { $0.id.rawValue < $1.id.rawValue }
        var lines = running.map { progress in
            single ? Format.bar(progress) : Format.fit(names[progress.id] ?? "", 24) + " " + Format.bar(progress)
        }
        if !single {
            let bytes = doneBytes + running.reduce(0) { $0 + $1.receivedBytes }
            let speed = running.reduce(0) { $0 + $1.bytesPerSecond }
            lines.append(
                "total \(Format.bytes(bytes))  \(Format.bytes(Int64(speed)))/s  "
                    + "done \(done)  failed \(failed)  running \(running.count)")
        }
        guard !lines.isEmpty else { return }
        Console.error(Data(lines.map { $0 + "\n" }.joined().utf8))
        drawn = lines.count
    }
}

/// Human-readable numbers.
enum Format {
    /// How `haul ls` and the commands' messages show an id: its last 8 characters. New ids begin with the time of
    /// their add (see `DownloadIDSource`), so their first characters are the same for a whole batch; their ends are
    /// random.
    static func shortID(_ id: String) -> String { String(id.suffix(8)) }

    /// Whether `given` names `id`: the whole id, or its start or its end (any case), as a user copies it from
    /// `haul ls` (the end) or from the API (the start).
    static func id(_ id: String, matches given: String) -> Bool {
        let given = given.lowercased()
        return !given.isEmpty && (id.hasPrefix(given) || id.hasSuffix(given))
    }

    static func bytes(_ count: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(count) B" : String(format: "%.1f %@", value, units[unit])
    }

    /// `text` cut or padded to `width` characters.
    static func fit(_ text: String, _ width: Int) -> String {
        text.count > width
            ? String(text.prefix(width - 1)) + "…" : text.padding(toLength: width, withPad: " ", startingAt: 0)
    }

    /// How long a download took, and its speed over the bytes fetched in that time (wget's "(1.6 MB/s)"): two
    /// decimals below a second, so a small file does not read "0.0 s".
    static func took(bytes: Int64, seconds: Double) -> String {
        let time = String(format: seconds < 1 ? "%.2f s" : seconds < 100 ? "%.1f s" : "%.0f s", seconds)
        guard seconds >= 0.005, bytes > 0, seconds.isFinite else { return time }
        return time + ", " + Self.bytes(Int64(min(Double(bytes) / seconds, 9e18))) + "/s"
    }

    static func bar(_ progress: DownloadProgress) -> String {
        let speed =
            bytes(progress.bytesPerSecond < 9e18 ? Int64(max(0, progress.bytesPerSecond)) : .max) + "/s"
            + (progress.connections > 1 ? " x\(progress.connections)" : "")
        guard let total = progress.totalBytes, total > 0 else {
            return "\(bytes(progress.receivedBytes))  \(speed)"
        }
        let fraction = min(1, Double(progress.receivedBytes) / Double(total))
        let width = 30
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        var eta = "--:--"
        // A server may claim an exabyte and send a byte a second: beyond 100,000 hours there is no ETA to show.
        if let left = progress.secondsRemaining, left.isFinite, left >= 0, left < 360_000_000 {
            let whole = Int(left.rounded())
            eta = String(format: "%d:%02d", whole / 60, whole % 60)
        }
        return String(
            format: "[%@] %3d%%  %@ / %@  %@  ETA %@", bar, Int(fraction * 100), bytes(progress.receivedBytes),
            bytes(total), speed, eta
        )
    }
}
