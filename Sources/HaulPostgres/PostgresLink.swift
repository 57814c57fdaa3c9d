import Foundation
import HaulCore
import Logging
import NIOCore
import PostgresNIO
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The store's one connection, made again when it breaks: PostgreSQL restarted, a network cut, a failover. Whoever
/// needs it next (the commit queue's thread, which may wait) reconnects with backoff, from 50 ms doubling to 2 s, for
/// up to `patience`; until then writes wait in the queue, and the downloads go on transferring.
final class PostgresLink: Sendable {
    let location: PostgresLocation
    let logger: Logger
    let patience: Duration
    private let connection: Mutex<PostgresConnection>

    init(
        _ connection: PostgresConnection, location: PostgresLocation, logger: Logger, patience: Duration = .seconds(60)
    ) {
        self.connection = Mutex(connection)
        self.location = location
        self.logger = logger
        self.patience = patience
    }

    /// A connection that is open, made again when the last one closed. Called from a thread that may block, never
    /// from an event loop.
    func current() throws -> PostgresConnection {
        let last = connection.withLock { $0 }
        guard last.isClosed else { return last }
        return try reconnect(replacing: last)
    }

    /// Runs `body` on the connection; when the connection turns out to be broken before `body` did anything (its
    /// first statement fails that way), once more on a new one.
    func run<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        let first = try current()
        do { return try body(first) } catch {
            guard Self.isBroken(error) || first.isClosed else { throw error }
            return try body(try reconnect(replacing: first))
        }
    }

    /// Whether `error` says the connection is gone (as opposed to a statement the server refused).
    static func isBroken(_ error: any Error) -> Bool {
        if error is StoreTimeout { return true }
        guard let error = error as? PSQLError else { return error is ChannelError }
        return [.serverClosedConnection, .clientClosedConnection, .connectionError, .uncleanShutdown].contains(
            error.code)
    }

    private func reconnect(replacing broken: PostgresConnection) throws -> PostgresConnection {
        // Not waited for: a connection whose server went away may never answer its close either.
        let _: EventLoopFuture<Void> = broken.close()
        let deadline = ContinuousClock.now + patience
        var delay = Duration.milliseconds(50)
        while true {
            do {
                let fresh = try PostgresConnection.connect(
                    on: StoreLoop.group.next(),
                    configuration: try location.connectionConfiguration(), id: 0, logger: logger
                ).blockingGet()
                connection.withLock { $0 = fresh }
                logger.notice("reconnected to the store at \(location.place)")
                return fresh
            } catch {
                guard ContinuousClock.now + delay < deadline else { throw error }
                logger.info("the store at \(location.place) does not answer; trying again in \(delay.spoken)")
                let micros = delay.components.seconds * 1_000_000 + delay.components.attoseconds / 1_000_000_000_000
                usleep(UInt32(micros))
                delay = min(delay * 2, .seconds(2))
            }
        }
    }

    /// Whether the connection is open now (it may still turn out broken on its next use).
    var isOpen: Bool { connection.withLock { !$0.isClosed } }

    func close() async {
        let last = connection.withLock { $0 }
        try? await last.close()
    }
}
