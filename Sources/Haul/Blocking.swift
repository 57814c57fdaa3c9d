import Dispatch

/// Runs blocking file-system work (fsync, hashing, renames) on a dispatch thread, off Swift's cooperative pool, which
/// has only as many threads as cores: an fsync that takes seconds on a busy disk must not stall every other task.
enum Blocking {
    static func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try work() }) }
        }
    }
}
