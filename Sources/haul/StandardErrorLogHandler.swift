import Foundation
import Logging

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
            FileHandle.standardError.write(Data(Self.commandLine(event.level, "\(event.message)", merged).utf8))
        }
    }

    /// One line of a command's: its level named only when it is a warning or worse, its metadata after the message.
    static func commandLine(_ level: Logger.Level, _ message: String, _ metadata: Logger.Metadata) -> String {
        let kind: String
        switch level {
        case .trace, .debug, .info, .notice: kind = ""
        case .warning: kind = "warning: "
        case .error, .critical: kind = "error: "
        }
        let details = metadata.sorted { $0.key < $1.key }.map { " \($0.key)=\($0.value)" }.joined()
        return "haul: \(kind)\(message)\(details)\n"
    }
}
