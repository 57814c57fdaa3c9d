import Logging
import Synchronization

/// Keeps what a logger logs, for tests that wait for a line instead of sleeping.
public final class LogRecorder: Sendable {
    private struct State {
        var lines: [String] = []
        var waiters: [(matches: @Sendable (String) -> Bool, continuation: CheckedContinuation<String, Never>)] = []
    }

    private let state = Mutex(State())

    public init() {}

    /// A logger whose lines (at every level) come here.
    public func logger(label: String = "test") -> Logger {
        var logger = Logger(label: label) { _ in Handler(recorder: self) }
        logger.logLevel = .trace
        return logger
    }

    public var lines: [String] { state.withLock { $0.lines } }

    /// Returns the first line logged (before or after the call) that `matches`.
    public func line(where matches: @escaping @Sendable (String) -> Bool) async -> String {
        await withCheckedContinuation { continuation in
            let found: String? = state.withLock { state in
                if let line = state.lines.first(where: matches) { return line }
                state.waiters.append((matches, continuation))
                return nil
            }
            if let found { continuation.resume(returning: found) }
        }
    }

    fileprivate func record(_ line: String) {
        let ready = state.withLock { state in
            state.lines.append(line)
            var ready: [CheckedContinuation<String, Never>] = []
            state.waiters.removeAll { waiter in
                guard waiter.matches(line) else { return false }
                ready.append(waiter.continuation)
                return true
            }
            return ready
        }
        for continuation in ready { continuation.resume(returning: line) }
    }

    private struct Handler: LogHandler {
        let recorder: LogRecorder
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            recorder.record("\(event.level): \(event.message)")
        }
    }
}
