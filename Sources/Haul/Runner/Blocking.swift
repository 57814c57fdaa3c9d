import HaulCore
import NIOPosix

/// Runs blocking file-system work (fsync, hashing, renames, and the creates and looks in a folder other downloads
/// change) on threads of its own, off Swift's cooperative pool, which has only as many threads as cores: an fsync that
/// takes seconds on a busy disk must not stall every other task, nor a create waiting for the folder's lock while
/// another create in it reads the disk. Dispatch's global queues are as wide as the core count too, so a fixed NIO
/// thread pool is used instead.
enum Blocking {
    /// As many threads as `haul get -j` runs downloads at most in the benches: their syncs wait on the disk, not the
    /// CPU, and with fewer threads than downloads a burst of small files queues its `fsync`s behind each other.
    private static let pool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: 16)
        pool.start()
        return pool
    }()

    /// Runs `work` to the end even when the calling task is cancelled: the flush after a pause runs in a cancelled
    /// task and must still happen.
    static func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            pool.submit { state in
                guard case .active = state else {
                    continuation.resume(
                        throwing: DownloadError(.fileSystem, "the file-system thread pool is not running"))
                    return
                }
                continuation.resume(with: Result { try work() })
            }
        }
    }
}
