import Foundation
import Haul
import HaulCore
import Logging
import NIOCore
import PostgresNIO
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Commands for a download another worker runs travel by `NOTIFY` on one channel: every worker listens, and the one
/// that runs the download acts on it. The listening connection is its own (the store's connection waits in writes),
/// made again with backoff when it breaks; a command sent while a worker reconnects is sent again by its sender, who
/// waits for the download's row to show the change.
extension PostgresStore {
    static let commandChannel = "haul_command"

    struct CommandMessage: Codable {
        var id: String
        var command: FleetCommand
    }

    public func send(_ command: FleetCommand, for id: String) throws(DownloadError) {
        let payload: String
        do {
            payload = String(
                decoding: try JSONEncoder().encode(CommandMessage(id: id, command: command)), as: UTF8.self)
        } catch { throw DownloadError(.store, "cannot encode a command for download \(id): \(error)") }
        try queue.perform { [logger] connection in
            try connection.query("SELECT pg_notify(\(Self.commandChannel), \(payload))", logger: logger).blockingGet()
        }
    }

    public func holder(of id: String) throws(DownloadError) -> String? {
        let query: PostgresQuery = """
            SELECT worker FROM download WHERE id = \(id) AND lease IS NOT NULL AND "leaseExpires" >= now()
            """
        return try queue.perform { [logger] connection in
            try connection.query(query, logger: logger).blockingGet().first?.decode(String?.self)
        }
    }

    public func onCommand(_ handler: @escaping @Sendable (String, FleetCommand) -> Void) {
        let task = Task { [location, logger] in
            var delay = Duration.milliseconds(50)
            while !Task.isCancelled {
                do {
                    let connection = try await PostgresConnection.connect(
                        on: StoreLoop.group.next(), configuration: try location.connectionConfiguration(), id: 1,
                        logger: logger
                    ).get()
                    delay = .milliseconds(50)
                    do {
                        try await connection.listen(on: Self.commandChannel) { notifications in
                            for try await notification in notifications {
                                guard
                                    let message = try? JSONDecoder().decode(
                                        CommandMessage.self, from: Data(notification.payload.utf8))
                                else {
                                    logger.warning("a command this worker cannot read: \(notification.payload)")
                                    continue
                                }
                                handler(message.id, message.command)
                            }
                        }
                    } catch {
                        try? await connection.close()
                        throw error
                    }
                    try? await connection.close()
                } catch {
                    guard !Task.isCancelled else { return }
                    logger.info("commands from other workers: the store does not answer; listening again in \(delay)")
                    try? await Task.sleep(for: delay)
                    delay = min(delay * 2, .seconds(2))
                }
            }
        }
        listener.withLock {
            $0?.cancel(); $0 = task
        }
    }
}
