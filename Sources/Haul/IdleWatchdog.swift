import Foundation
import HaulCore

/// Runs `body`, abandoning it with an `idleTimeout` error when `activity` does not move for `seconds` on `clock`.
func withIdleWatchdog<T: Sendable>(
    _ activity: TransferActivity,
    seconds: Double,
    clock: EngineClock,
    host: String,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let timeout = Duration.milliseconds(Int64(seconds * 1000))
    return try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            let step = max(timeout / 8, .milliseconds(10))
            var lastTicks = activity.ticks
            var quietSince = clock.now()
            while true {
                try await clock.sleep(step)
                let ticks = activity.ticks
                if ticks != lastTicks {
                    lastTicks = ticks
                    quietSince = clock.now()
                } else if clock.now() - quietSince >= timeout {
                    throw DownloadError(
                        .idleTimeout, "no data from \(host) for \(seconds) s; abandoning the connection")
                }
            }
        }
        defer { group.cancelAll() }
        while let result = try await group.next() {
            if let value = result { return value }
        }
        throw CancellationError()
    }
}
