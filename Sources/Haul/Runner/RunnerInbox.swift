import NIOCore
import Synchronization

/// The runner's events on their way to its loop: connections, timers and helper tasks put them in from any task; the
/// one loop takes them out in order. It keeps AsyncStream's rules (an event put in before the finish is still handed
/// out; one put in after it is refused; a loop whose task is cancelled finishes it), with code specialised for the
/// runner's events: AsyncStream's storage is generic code of the standard library, which looks up type metadata on
/// every event, and a small file's download sends a handful of them.
final class RunnerInbox: Sendable {
    private struct State {
        var queued = CircularBuffer<DownloadRunner.Event>(initialCapacity: 4)
        /// The loop, waiting for the next event.
        var waiter: UnsafeContinuation<DownloadRunner.Event?, Never>?
        var isFinished = false
    }

    private let state = Mutex(State())

    /// Puts `event` in for the loop. False once the inbox is finished: the event is not kept, and its sender stops.
    @discardableResult
    func yield(_ event: DownloadRunner.Event) -> Bool {
        let (accepted, waiter) = state.withLock { state -> (Bool, UnsafeContinuation<DownloadRunner.Event?, Never>?) in
            guard !state.isFinished else { return (false, nil) }
            if let waiter = state.waiter {
                state.waiter = nil
                return (true, waiter)
            }
            state.queued.append(event)
            return (true, nil)
        }
        waiter?.resume(returning: event)
        return accepted
    }

    /// Refuses every later event; the loop is handed what is queued, then nil.
    func finish() {
        let waiter = state.withLock { state -> UnsafeContinuation<DownloadRunner.Event?, Never>? in
            state.isFinished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// The next event, for the one loop; nil once the inbox is finished and empty. A cancelled task finishes it first
    /// (a pause, a cancel or a shutdown ends the loop even while events keep coming).
    func next() async -> DownloadRunner.Event? {
        if Task.isCancelled { finish() }
        if let event = state.withLock({ $0.queued.popFirst() }) { return event }
        return await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<DownloadRunner.Event?, Never>) in
                // Under the lock: an event or the finish that came since the look above is not missed.
                let ready = state.withLock { state -> DownloadRunner.Event?? in
                    if let event = state.queued.popFirst() { return .some(event) }
                    if state.isFinished { return .some(nil) }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            finish()
        }
    }
}
