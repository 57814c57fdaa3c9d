import Foundation
import Logging
import Synchronization

/// Log lines on standard error, with metadata formatted only when a line is written. `StreamLogHandler` formats its
/// metadata each time a value is set, and Hummingbird sets a request id on every request's logger, for lines that
/// are almost never written.
///
/// A daemon's lines are swift-log's (a timestamp, the level and the label), for a journal read later. A command's
/// are read at once beside its other messages, so they are written as those are: `haul: warning: MESSAGE`, the way
/// curl and wget prefix theirs.
struct StandardErrorLogHandler: LogHandler {
    enum Style: Sendable {
        /// swift-log's `StreamLogHandler` lines: `2026-12-06T21:52:44+0000 warning haul: [Haul] MESSAGE`.
        case daemon
        /// `haul: MESSAGE` for info and notice, `haul: warning: MESSAGE`, `haul: error: MESSAGE`.
        case command
    }

    private var stream: StreamLogHandler
    private let style: Style
    var metadata: Logger.Metadata = [:]

    init(label: String, level: Logger.Level, style: Style) {
        stream = StreamLogHandler.standardError(label: label)
        stream.logLevel = level
        self.style = style
    }

    var logLevel: Logger.Level {
        get { stream.logLevel }
        set { stream.logLevel = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var merged = metadata
        if let explicit = event.metadata { merged.merge(explicit) { $1 } }
        switch style {
        case .daemon:
            var event = event
            event.metadata = merged.isEmpty ? nil : merged
            stream.log(event: event)
        case .command:
            let line = Self.commandLine(event.level, "\(event.message)", merged)
            if !HeldLogLines.hold(line) { Console.error(Data((line + "\n").utf8)) }
        }
    }

    /// One line of a command's, without its line feed: its level named only when it is a warning or worse, its
    /// metadata after the message.
    static func commandLine(_ level: Logger.Level, _ message: String, _ metadata: Logger.Metadata) -> String {
        let kind: String
        switch level {
        case .trace, .debug, .info, .notice: kind = ""
        case .warning: kind = "warning: "
        case .error, .critical: kind = "error: "
        }
        let details = metadata.sorted { $0.key < $1.key }.map { " \($0.key)=\($0.value)" }.joined()
        return "haul: \(kind)\(message)\(details)"
    }
}

/// A command's log lines while a terminal's progress board is drawn: held for the board's loop to write above the
/// board. Written straight to the terminal, a line would land below the board, and the next redraw (which goes up
/// over the board's own lines and clears what follows) would erase it.
enum HeldLogLines {
    private static let state = Mutex<(isHolding: Bool, lines: [String])>((false, []))

    /// From now on, lines are held until `take`.
    static func start() { state.withLock { $0.isHolding = true } }

    /// Stops holding; returns what was held.
    static func stop() -> [String] {
        state.withLock { state in
            state.isHolding = false
            defer { state.lines = [] }
            return state.lines
        }
    }

    /// The lines held since the last call.
    static func take() -> [String] {
        state.withLock { state in
            guard !state.lines.isEmpty else { return [] }
            defer { state.lines = [] }
            return state.lines
        }
    }

    /// Holds `line` when lines are being held; false when it is to be written now.
    static func hold(_ line: String) -> Bool {
        state.withLock { state in
            guard state.isHolding else { return false }
            state.lines.append(line)
            return true
        }
    }
}
