import Foundation
import NIOCore
import NIOPosix
import PostgresNIO

/// The store's connections live on an event loop of their own: the store's callers block while a write commits (as
/// with SQLite), and in the daemon those callers may be the server's event loops. A connection on one of those loops
/// would wait for the very thread that waits for it; on its own loop it never does.
enum StoreLoop {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
}

extension EventLoopFuture {
    /// Blocks the calling thread until the future completes. Unlike `wait()`, it may be called on another event
    /// loop's thread (the daemon's, which run the manager): the future's own loop is the store's (`StoreLoop`), which
    /// never blocks.
    func blockingGet() throws -> Value {
        precondition(!eventLoop.inEventLoop, "the store's loop must never wait for itself")
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var outcome: Result<Value, any Error>?
        whenComplete { result in
            outcome = result
            done.signal()
        }
        done.wait()
        return try outcome!.get()
    }
}
