import Synchronization

/// A clock for the engine's own time in tests (the idle timeout, checkpoints and progress by time): it runs with real
/// time, and `jump(by:)` moves it forward at once, waking every sleeper whose deadline passed. A test whose server
/// goes quiet jumps past the idle timeout instead of waiting it out.
public final class JumpClock: Clock, Sendable {
    /// An instant of this clock.
    public struct Instant: InstantProtocol {
        /// Time since the clock was made.
        public var offset: Duration

        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private let origin = ContinuousClock.now
    private let state = Mutex<(jumped: Duration, sleeps: Int)>((.zero, 0))

    /// A clock at zero.
    public init() {}

    public var now: Instant {
        Instant(offset: origin.duration(to: ContinuousClock.now) + state.withLock { $0.jumped })
    }

    public var minimumResolution: Duration { .milliseconds(1) }

    /// Sleeps in real time, in slices, so that a jump past the deadline ends the sleep within a slice.
    public func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        state.withLock { $0.sleeps += 1 }
        while true {
            let remaining = now.duration(to: deadline)
            if remaining <= .zero { return }
            try await Task.sleep(for: min(remaining, .milliseconds(2)))
        }
    }

    /// Moves the clock forward by `duration` at once.
    public func jump(by duration: Duration) {
        state.withLock { $0.jumped += duration }
    }

    /// How many sleeps have begun: the engine's ticker sleeps between its ticks, so a count that grew by a few since
    /// a moment means the engine has looked at its connections since.
    public var sleepsBegun: Int { state.withLock { $0.sleeps } }

    /// Waits (in real time, 1 ms at a time) until `ticks` more sleeps have begun, then jumps by `duration`: a
    /// connection quiet since before the call is then past an idle timeout shorter than `duration`, and one that
    /// brought bytes since the last tick is not.
    public func jump(by duration: Duration, afterTicks ticks: Int) async {
        let start = sleepsBegun
        let deadline = ContinuousClock.now + .seconds(10)
        while sleepsBegun < start + ticks, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(1))
        }
        jump(by: duration)
    }
}
