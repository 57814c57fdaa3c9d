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
/// a typed error. It is the only way a download's state changes (`DownloadRecord.apply(_:)`): the manager applies
/// the event and acts on the state it leads to.
public struct DownloadStateMachine: Sendable, Equatable {
    /// Something that happens to a download.
    public enum Event: String, Sendable, CaseIterable {
        /// The scheduler gave it a slot.
        case started
        /// The user paused it; for a running download, its runner has stopped.
        case pauseRequested
        /// The user resumed a paused download (one that failed or was cancelled is retried: `retryRequested`).
        case resumeRequested
        /// The user cancelled it; for a running download, its runner has stopped.
        case cancelRequested
        /// Its connections fail at connection level.
        case networkLost
        /// The server answers again; the same runner goes on.
        case networkReturned
        /// Its file is complete and in place.
        case finished
        /// An error retries did not cure, or a prerequisite that will never complete.
        case failedPermanently
        /// The process is stopping (or died) while it ran: it runs again at the next start.
        case interruptedByExit
        /// The user asked to retry a download that failed or was cancelled.
        case retryRequested
        /// The same URL and destination was added again: it is queued again (a completed one whose file is gone
        /// fetches it again).
        case addedAgain
        /// As `addedAgain`, for an add that asks for a paused download.
        case addedAgainPaused
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
        case (.failed, .retryRequested), (.cancelled, .retryRequested): .queued
        case (.paused, .addedAgain), (.completed, .addedAgain), (.failed, .addedAgain), (.cancelled, .addedAgain):
            .queued
        case (.completed, .addedAgainPaused), (.failed, .addedAgainPaused), (.cancelled, .addedAgainPaused): .paused
        case (.queued, .cancelRequested), (.running, .cancelRequested), (.paused, .cancelRequested),
            (.waitingForNetwork, .cancelRequested), (.failed, .cancelRequested):
            .cancelled
        case (.running, .networkLost): .waitingForNetwork
        case (.waitingForNetwork, .networkReturned): .running
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
            let hint = event == .resumeRequested && (state == .failed || state == .cancelled) ? "; use retry" : ""
            throw DownloadError(.illegalTransition, "cannot \(event.verb) a download that is \(state.rawValue)\(hint)")
        }
        state = next
        return next
    }
}

extension DownloadStateMachine.Event {
    /// The event as the verb of an error message ("cannot pause a download that is completed").
    public var verb: String {
        switch self {
        case .started: "start"
        case .pauseRequested: "pause"
        case .resumeRequested: "resume"
        case .cancelRequested: "cancel"
        case .networkLost: "wait for the network for"
        case .networkReturned: "go on with"
        case .finished: "complete"
        case .failedPermanently: "fail"
        case .interruptedByExit: "queue again"
        case .retryRequested: "retry"
        case .addedAgain: "add again"
        case .addedAgainPaused: "add again, paused,"
        }
    }
}
