import Synchronization

/// Flow control between a body's task and the runner's loop: the task reads ahead while the chunks it handed over and
/// the loop has not yet written stay within a window, and waits when they pass it; the loop gives the credit back as
/// it writes, and stops the reading when the machine says so. Waiting for each chunk's write would cost a thread
/// wake-up on each side of every chunk; with the window the task waits only when the disk falls behind, and the
/// memory a body holds stays bounded by it.
final class BodyCredit: Sendable {
    /// Bytes a body may have handed over and not yet seen written.
    static let window = 512 << 10

    private struct State {
        var outstanding = 0
        var stopped = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    /// Whether the loop said to read no further.
    var isStopped: Bool { state.withLock { $0.stopped } }

    /// The task hands over `count` bytes; returns once it may read on (at once while within the window), or false
    /// when the loop stopped the reading.
    func handOver(_ count: Int) async -> Bool {
        let mustWait = state.withLock { state -> Bool in
            state.outstanding += count
            return !state.stopped && state.outstanding > Self.window
        }
        if mustWait {
            await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    guard !state.stopped, state.outstanding > Self.window else { return true }
                    state.waiter = waiter
                    return false
                }
                if resumeNow { waiter.resume() }
            }
        }
        return !isStopped
    }

    /// The loop wrote (or dropped) `count` bytes of it; with `stop`, the task reads no further.
    func release(_ count: Int, stop: Bool = false) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.outstanding -= count
            if stop { state.stopped = true }
            guard state.stopped || state.outstanding <= Self.window / 2 else { return nil }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// The reading stops (the connection closed, the run ended): a waiting task goes on, to find it stopped.
    func stop() { release(0, stop: true) }
}
