import Foundation

/// Runs `work` on a thread of its own and returns its result. The tests' waits (for processes, sockets, conditions)
/// block threads, and neither Swift's cooperative pool, which has as many threads as cores, nor Dispatch's core-wide
/// global queues may be starved by them: the code under test needs those threads to answer.
///
/// `work` runs outside the test's task, so it reports a failure by throwing (or in what it returns), not with
/// `#expect`: Swift Testing finds the test an issue belongs to through the task, which a thread of its own lacks.
public func onOwnThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try work() }) }
        thread.start()
    }
}

/// `onOwnThread` for work that cannot fail.
public func onOwnThread<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        let thread = Thread { continuation.resume(returning: work()) }
        thread.start()
    }
}
