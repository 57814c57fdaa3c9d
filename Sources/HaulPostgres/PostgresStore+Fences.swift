import Foundation
import GRDB
import Haul
import HaulCore
import Logging
import PostgresNIO
import Synchronization

/// How the store keeps two workers from both advancing one download: every write of a download carries a fence, the
/// lease this worker holds (or lost) for it, or "no live lease of anyone's" for a download it does not hold.
extension PostgresStore {
    /// What a write of a download may change: the row of this worker's lease, or a row no live lease holds.
    enum Fence: Sendable {
        case lease(Int64)
        case unheld

        /// The condition, whose lease parameter (if any) is the next of `bindings`.
        func condition(into bindings: inout PostgresBindings) -> String {
            switch self {
            case .lease(let lease):
                bindings.append(lease)
                return "download.lease = $\(bindings.count)"
            case .unheld:
                return "(download.lease IS NULL OR download.\"leaseExpires\" < now())"
            }
        }
    }

    struct FencedWrite: Sendable {
        var id: String
        var fence: Fence
        var query: PostgresQuery
    }

    /// A download whose lease this worker lost stays fenced by that lease: whatever its run still writes is refused,
    /// even once the lease that took it over is released.
    func fence(of id: String) -> Fence {
        if let lease = held.withLock({ $0[id] }) ?? lostLeases.withLock({ $0[id] }) { return .lease(lease) }
        return .unheld
    }

    /// Runs each write; one that changed no row was refused by its fence: a lease this worker held is lost (told to
    /// `onLostLease`), and the write throws `locked` (the others of its group are written again without it).
    func run(_ writes: [FencedWrite], on connection: PostgresConnection) throws {
        for write in writes {
            let changed = try connection.query(write.query, logger: logger).blockingGet().metadata.rows ?? 0
            guard changed == 0 else { continue }
            switch write.fence {
            case .lease(let lease):
                lose(write.id, lease: lease)
                throw DownloadError(
                    .locked, "download \(write.id) was taken over by another worker (its lease \(lease) expired)")
            case .unheld:
                throw DownloadError(
                    .locked, "download \(write.id) is running on another worker; it cannot be changed here meanwhile")
            }
        }
    }

    /// Forgets the lease of `id` when it is still `lease`, and tells `onLostLease` (once a lease).
    func lose(_ id: String, lease: Int64) {
        let lost = held.withLock { held in
            guard held[id] == lease else { return false }
            held[id] = nil
            return true
        }
        if lost { lostLeases.withLock { $0[id] = lease } }
        if lost, let handler = lostLeaseHandler.withLock({ $0 }) { handler(id) }
    }

    public func onLostLease(_ handler: @escaping @Sendable (String) -> Void) {
        lostLeaseHandler.withLock { $0 = handler }
    }

    /// The upserts of `records`, each fenced: an existing row is replaced only as its fence allows.
    func fencedUpserts(_ records: [DownloadRecord]) throws(DownloadError) -> [FencedWrite] {
        var writes: [FencedWrite] = []
        writes.reserveCapacity(records.count)
        for record in records {
            let fence = fence(of: record.id)
            writes.append(
                FencedWrite(
                    id: record.id, fence: fence, query: try Self.upserts([record], replacing: true, fence: fence)[0]))
        }
        return writes
    }
}
