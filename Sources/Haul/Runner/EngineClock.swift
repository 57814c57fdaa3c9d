/// The injected clock, reduced to what the engine needs: elapsed time since the engine started, and sleeping.
struct EngineClock: Sendable {
    let now: @Sendable () -> Duration
    let sleep: @Sendable (Duration) async throws -> Void
    /// Sleeps until the engine time given (`now`'s scale).
    let sleepUntil: @Sendable (Duration) async throws -> Void

    init(_ clock: any Clock<Duration>) {
        self = Self.make(clock)
    }

    private init(
        now: @escaping @Sendable () -> Duration, sleep: @escaping @Sendable (Duration) async throws -> Void,
        sleepUntil: @escaping @Sendable (Duration) async throws -> Void
    ) {
        self.now = now
        self.sleep = sleep
        self.sleepUntil = sleepUntil
    }

    private static func make<C: Clock<Duration>>(_ clock: C) -> EngineClock {
        let start = clock.now
        return EngineClock(
            now: { start.duration(to: clock.now) },
            sleep: { duration in try await clock.sleep(until: clock.now.advanced(by: duration), tolerance: nil) },
            sleepUntil: { time in try await clock.sleep(until: start.advanced(by: time), tolerance: nil) }
        )
    }
}
