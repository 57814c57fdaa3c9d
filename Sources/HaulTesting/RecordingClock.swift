import Synchronization

/// A clock for tests: `sleep` returns at once, advances `now` by the time asked for, and records it, so backoff and
/// `Retry-After` are asserted without waiting.
public final class RecordingClock: Clock, Sendable {
    /// An instant of this clock.
    public struct Instant: InstantProtocol {
        /// Time since the clock was made.
        public var offset: Duration

        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private let state = Mutex<(now: Duration, sleeps: [Duration])>((.zero, []))

    /// A clock at zero.
    public init() {}

    public var now: Instant { Instant(offset: state.withLock { $0.now }) }
    public var minimumResolution: Duration { .nanoseconds(1) }

    /// Every sleep asked for, in order.
    public var sleeps: [Duration] { state.withLock { $0.sleeps } }

    public func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        try Task.checkCancellation()
        state.withLock { state in
            let duration = max(.zero, deadline.offset - state.now)
            state.sleeps.append(duration)
            state.now = max(state.now, deadline.offset)
        }
        await Task.yield()
    }
}
