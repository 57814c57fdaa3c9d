import Synchronization

/// One timer for all of a manager's running downloads: every `interval` of the injected clock it calls each
/// subscriber's tick (a runner's machine then checks its idle timeouts, progress and checkpoints by time).
///
/// A timer of each download's own cost a task, an armed timer and a wake-up to cancel it for every download, and a
/// small file is done in a few milliseconds, before its timer ever fires.
/// The timer's task starts with the first subscriber and is cancelled when the last one leaves, so an idle manager
/// holds no task and no test clock has a sleeper left on it.
final class Metronome: Sendable {
    private let clock: EngineClock
    private let interval: Duration

    private struct State {
        var subscribers: [UInt64: @Sendable () -> Void] = [:]
        var nextKey: UInt64 = 0
        var task: Task<Void, Never>?
    }

    private let state = Mutex(State())

    init(clock: EngineClock, interval: Duration) {
        self.clock = clock
        self.interval = interval
    }

    /// Calls `tick` every interval until `unsubscribe(_:)` with the key returned.
    func subscribe(_ tick: @escaping @Sendable () -> Void) -> UInt64 {
        state.withLock { state in
            state.nextKey += 1
            state.subscribers[state.nextKey] = tick
            if state.task == nil { state.task = Task { [self] in await run() } }
            return state.nextKey
        }
    }

    func unsubscribe(_ key: UInt64) {
        let idle = state.withLock { state -> Task<Void, Never>? in
            state.subscribers[key] = nil
            guard state.subscribers.isEmpty else { return nil }
            defer { state.task = nil }
            return state.task
        }
        idle?.cancel()
    }

    private func run() async {
        while !Task.isCancelled {
            do { try await clock.sleep(interval) } catch { return }
            if Task.isCancelled { return }
            let ticks = state.withLock { Array($0.subscribers.values) }
            for tick in ticks { tick() }
        }
    }
}
