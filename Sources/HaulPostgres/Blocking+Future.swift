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

/// A store round trip that got no answer in time: the connection is treated as broken (`PostgresLink.isBroken`),
/// closed, and made again, instead of a caller (the manager, a renewal) waiting for ever on a connection that went
/// quiet when its server went away.
struct StoreTimeout: Error, CustomStringConvertible {
    var description: String { "the store did not answer within \(Int(StoreLoop.patience)) s" }
}

extension StoreLoop {
    /// How long one round trip may take before the connection is given up.
    static let patience: Double = 20
}

extension EventLoopFuture {
    /// Blocks the calling thread until the future completes, for at most `StoreLoop.patience` seconds. Unlike
    /// `wait()`, it may be called on another event loop's thread (the daemon's, which run the manager): the future's
    /// own loop is the store's (`StoreLoop`), which never blocks.
    @discardableResult
    func blockingGet() throws -> Value {
        precondition(!eventLoop.inEventLoop, "the store's loop must never wait for itself")
        let done = DispatchSemaphore(value: 0)
        let box = OutcomeBox<Value>()
        whenComplete { result in
            box.set(result)
            done.signal()
        }
        guard done.wait(timeout: .now() + StoreLoop.patience) == .success, let outcome = box.get() else {
            throw StoreTimeout()
        }
        return try outcome.get()
    }
}

/// The outcome of a future, handed from the store's loop to the thread that waits (which may have stopped waiting).
private final class OutcomeBox<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var outcome: Result<Value, any Error>?

    func set(_ result: Result<Value, any Error>) {
        lock.lock()
        outcome = result
        lock.unlock()
    }

    func get() -> Result<Value, any Error>? {
        lock.lock()
        defer { lock.unlock() }
        return outcome
    }
}
