import Foundation
import Haul
import HaulCore

/// What `haul` prints: a progress bar on a terminal, a line at start and end otherwise, errors always, JSON on
/// request. Messages go to standard error; JSON results to standard output.
struct Output: Sendable {
    let quiet: Bool
    let json: Bool
    let isTerminal = isatty(STDERR_FILENO) != 0

    func line(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }

    func error(_ error: any Error) {
        let message = (error as? DownloadError)?.description ?? String(describing: error)
        if isTerminal && !quiet { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
        line("haul: error: \(message)")
    }

    func interrupted(_ signal: Int32) {
        guard !quiet else { return }
        if isTerminal { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
        line(
            "haul: \(signal == SIGINT ? "interrupted" : "terminated"); paused with every byte kept. Run the same command to resume."
        )
    }

    func finished(_ result: DownloadResult) {
        if !quiet {
            if isTerminal { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
            if result.wasAlreadyComplete {
                line("haul: \(result.path) is already complete (\(Format.bytes(result.bytes))); nothing fetched")
            } else {
                let resumed = result.resumedFrom > 0 ? ", resumed from \(Format.bytes(result.resumedFrom))" : ""
                line(
                    "haul: saved \(result.path) (\(Format.bytes(result.bytes)) in \(String(format: "%.1f", result.seconds)) s\(resumed))"
                )
            }
        }
        if json {
            let object: [String: Any] = [
                "url": result.url, "path": result.path, "bytes": result.bytes, "sha256": result.sha256 ?? NSNull(),
                "seconds": result.seconds, "resumed-from": result.resumedFrom,
            ]
            if let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) {
                FileHandle.standardOutput.write(data + Data("\n".utf8))
            }
        }
    }

    /// The start line when standard error is not a terminal (a terminal gets the progress bar instead).
    func started(url: String, path: String) {
        guard !quiet, !isTerminal else { return }
        line("haul: \(url) -> \(path)")
    }

    /// Draws progress of download `id` until cancelled.
    func render(_ events: AsyncStream<DownloadEvent>, of id: DownloadID, url: String) async {
        guard !quiet else { return }
        var lastDraw = ContinuousClock.now - .seconds(1)
        for await event in events where event.id == id {
            switch event {
            case .destinationResolved(_, let path):
                started(url: url, path: path)
            case .retrying(_, let error, let delay):
                if isTerminal { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
                line("haul: \(error.message); retrying in \(Format.duration(delay))")
            case .progress(let progress) where isTerminal:
                let now = ContinuousClock.now
                guard now - lastDraw >= .milliseconds(100) else { continue }
                lastDraw = now
                FileHandle.standardError.write(Data(("\r\u{1B}[K" + Format.bar(progress)).utf8))
            default:
                break
            }
        }
    }
}

/// Human-readable numbers.
enum Format {
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

    static func duration(_ duration: Duration) -> String {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        return String(format: "%.1f s", seconds)
    }

    static func bar(_ progress: DownloadProgress) -> String {
        let speed = bytes(Int64(progress.bytesPerSecond)) + "/s"
        guard let total = progress.totalBytes, total > 0 else {
            return "\(bytes(progress.receivedBytes))  \(speed)"
        }
        let fraction = min(1, Double(progress.receivedBytes) / Double(total))
        let width = 30
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        var eta = "--:--"
        if let left = progress.secondsRemaining, left.isFinite {
            let whole = Int(left.rounded())
            eta = String(format: "%d:%02d", whole / 60, whole % 60)
        }
        return String(
            format: "[%@] %3d%%  %@ / %@  %@  ETA %@", bar, Int(fraction * 100), bytes(progress.receivedBytes),
            bytes(total), speed, eta
        )
    }
}
