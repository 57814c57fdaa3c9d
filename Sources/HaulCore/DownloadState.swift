/// The life of a download.
public enum DownloadState: String, Sendable, Codable, CaseIterable {
    /// Waiting for a free slot (or for the downloads it depends on).
    case queued
    /// Transferring.
    case running
    /// Stopped by the user; keeps its bytes.
    case paused
    /// Connections fail at connection level; Haul probes and resumes when the server answers.
    case waitingForNetwork
    /// The destination holds the complete, verified file.
    case completed
    /// Stopped by an error that retries did not cure.
    case failed
    /// Stopped by the user, part file deleted.
    case cancelled

    /// Whether the download will not move again without a command.
    public var isTerminal: Bool { self == .completed || self == .failed || self == .cancelled }

    /// Whether the download counts against the concurrency limit.
    public var isActive: Bool { self == .running || self == .waitingForNetwork }
}

/// The legal transitions between states, as a pure function: a command either moves the state or is rejected with
/// a typed error.
public struct DownloadStateMachine: Sendable, Equatable {
    /// Something that happens to a download.
    public enum Event: String, Sendable, CaseIterable {
        case started, pauseRequested, resumeRequested, cancelRequested, networkLost, networkReturned
        case finished, failedPermanently, interruptedByExit, retryRequested
    }

    /// The current state.
    public private(set) var state: DownloadState

    /// A machine in `state`.
    public init(state: DownloadState = .queued) { self.state = state }

    /// The state `event` leads to from `state`, or nil when the event is not allowed there.
    public static func target(from state: DownloadState, on event: Event) -> DownloadState? {
        switch (state, event) {
        case (.queued, .started): .running
        case (.queued, .pauseRequested), (.running, .pauseRequested), (.waitingForNetwork, .pauseRequested): .paused
        case (.paused, .resumeRequested): .queued
        case (.failed, .retryRequested), (.cancelled, .retryRequested), (.completed, .retryRequested): .queued
        case (.queued, .cancelRequested), (.running, .cancelRequested), (.paused, .cancelRequested),
            (.waitingForNetwork, .cancelRequested), (.failed, .cancelRequested):
            .cancelled
        case (.running, .networkLost): .waitingForNetwork
        case (.waitingForNetwork, .networkReturned): .queued
        case (.running, .finished): .completed
        case (.running, .failedPermanently), (.waitingForNetwork, .failedPermanently), (.queued, .failedPermanently):
            .failed
        case (.running, .interruptedByExit), (.waitingForNetwork, .interruptedByExit): .queued
        default: nil
        }
    }

    /// Applies `event`, or throws `illegalTransition` naming the state and the event.
    public mutating func apply(_ event: Event) throws(DownloadError) -> DownloadState {
        guard let next = Self.target(from: state, on: event) else {
            throw DownloadError(.illegalTransition, "cannot \(event.rawValue) a download that is \(state.rawValue)")
        }
        state = next
        return next
    }
}
