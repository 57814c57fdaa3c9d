import Logging

/// Log lines on standard error, as swift-log's `StreamLogHandler` writes them, with metadata formatted only when a
/// line is written. `StreamLogHandler` formats its metadata each time a value is set, and Hummingbird sets a
/// request id on every request's logger, for lines that are almost never written.
struct StandardErrorLogHandler: LogHandler {
    private var stream: StreamLogHandler
    var metadata: Logger.Metadata = [:]

    init(label: String, level: Logger.Level) {
        stream = StreamLogHandler.standardError(label: label)
        stream.logLevel = level
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
        var event = event
        event.metadata = merged.isEmpty ? nil : merged
        stream.log(event: event)
    }
}
