import Foundation
import GRDB
import HaulCore

/// A store's writes, in the order they were asked for, committed in groups: one transaction takes every write that
/// was queued while the previous one committed (group commit). When a group fails, its writes are done again one
/// transaction each, so a write that fails is reported to its caller alone and the others commit.
///
/// A commit costs about as much for one write as for a hundred (SQLite appends the changed pages to the WAL once a
/// transaction, and a durable one waits for one sync): adds that arrive one request at a time from many clients
/// would otherwise pay a transaction and a sync each.
///
/// Writes come in two kinds. `perform` waits until its write is committed. `submit` queues a write and returns at
/// once with a ticket, and `completion(of:)` waits for it later: the daemon's add queues the new download's row while
/// the manager goes on with the next add, and answers once the row is committed. Whoever waits commits, when no one
/// else is committing: the caller's thread runs the transaction (with whatever else is queued), so a lone write costs
/// no switch to another thread, and the others waiting meanwhile are committed together next. Writes still queued
/// when a committing caller has its own are committed by the queue's drain thread.
///
/// `Connection` is what a write is given: GRDB's `Database` for the SQLite store (`init(writer:describe:)`), one
/// PostgreSQL connection for the shared store. `transact` runs a group of writes in one transaction on it.
package final class CommitQueue<Connection>: @unchecked Sendable {
    /// Runs `body` in one transaction; with `durable`, it is on the disk when this returns.
    package typealias Transact = @Sendable (_ durable: Bool, _ body: (Connection) throws -> Void) throws -> Void

    /// A write waiting in the queue.
    private struct Entry {
        var ticket: UInt64
        var work: @Sendable (Connection) throws -> Void
        /// Whether a caller is expected to collect its outcome; a failed write no one was expected to wait for is
        /// also told to `lostWrite`.
        var awaited = true
    }

    private let transact: Transact
    private let describe: @Sendable (any Error) -> DownloadError
    // Everything below is guarded by `condition`.
    private let condition = NSCondition()
    private var pending: [Entry] = []
    private var nextTicket: UInt64 = 1
    /// Every ticket up to this one is committed (or failed).
    private var committed: UInt64 = 0
    /// Whether a thread is committing (a waiting caller, or the background drain).
    private var isDraining = false
    /// Errors of finished writes whose callers have not collected them yet.
    private var failures: [UInt64: DownloadError] = [:]
    private var waiters: [UInt64: CheckedContinuation<DownloadError?, Never>] = [:]
    /// Callers blocked in `wait(for:)`: any of them takes over committing when the committer leaves.
    private var blockedWaiters = 0
    /// Whether the drain thread runs, and whether it was asked to commit.
    private var hasDrainThread = false
    private var drainRequested = false
    /// Asks an idle drain thread to end now instead of after its idle seconds (`settle`).
    private var drainExitRequested = false
    private var counts = (commits: 0, writes: 0)
    private var lostWriteHandler: (@Sendable (DownloadError) -> Void)?

    /// How long writes no one waits for wait for company before the drain thread commits them alone.
    let companyWindow: TimeInterval

    package init(
        transact: @escaping Transact, companyWindow: TimeInterval = 0.002,
        describe: @escaping @Sendable (any Error) -> DownloadError
    ) {
        self.transact = transact
        self.companyWindow = companyWindow
        self.describe = describe
    }

    /// Has `handler` told of each write that no one waits for and that failed (a full disk): nothing of it is
    /// stored, and there is no caller to throw to.
    package func onLostWrite(_ handler: @escaping @Sendable (DownloadError) -> Void) {
        condition.lock()
        lostWriteHandler = handler
        condition.unlock()
    }

    /// Whether a thread is committing or about to (for tests).
    var isCommitting: Bool {
        condition.lock()
        defer { condition.unlock() }
        return isDraining
    }

    /// Whether no write was ever queued.
    package var isUntouched: Bool {
        condition.lock()
        defer { condition.unlock() }
        return nextTicket == 1
    }

    /// Commits made, and the writes they held.
    package var statistics: (commits: Int, writes: Int) {
        condition.lock()
        defer { condition.unlock() }
        return counts
    }

    /// Runs `body` in the queue's order and returns its result once it is committed; throws its error, or the
    /// commit's.
    @discardableResult
    package func perform<T>(_ body: @escaping @Sendable (Connection) throws -> T) throws(DownloadError) -> T {
        let box = ResultBox<T>()
        let ticket = enqueue { db in box.value = try body(db) }
        if let failure = wait(for: ticket) { throw failure }
        guard let value = box.value else {
            throw DownloadError(.store, "state database write produced no result")
        }
        return value
    }

    /// Queues `work` and returns at once; `completion(of:)` with the ticket waits for its commit. With `awaited` the
    /// caller will wait for it (and commits it then, when no one else is); otherwise the drain thread commits it soon,
    /// with whatever else is queued: a write no one waits for is still in the store within moments, not at the next
    /// write that is waited for.
    ///
    /// With `startsAtOnce`, a write the caller waits for is committed by the drain thread at once all the same: a
    /// large one (a list of thousands of downloads) commits on the other core while the caller goes on with its own
    /// work before waiting.
    package func submit(
        awaited: Bool, startsAtOnce: Bool = false, _ work: @escaping @Sendable (Connection) throws -> Void
    )
        -> UInt64
    {
        let ticket = enqueue(work, awaited: awaited)
        if !awaited || startsAtOnce {
            condition.lock()
            let starts = !isDraining
            if starts { isDraining = true }
            condition.unlock()
            if starts { scheduleDrain() }
        }
        return ticket
    }

    /// Waits until the write of `ticket` is committed, committing it on this thread when no one else is; returns
    /// its error, nil when it was written.
    package func completion(of ticket: UInt64) async -> DownloadError? {
        if isIdle(before: ticket) { return wait(for: ticket) }
        return await withCheckedContinuation { continuation in
            condition.lock()
            if committed >= ticket {
                let failure = failures.removeValue(forKey: ticket)
                condition.unlock()
                continuation.resume(returning: failure)
                return
            }
            waiters[ticket] = continuation
            // No one may be committing any more (the committer left before this waiter came): start the drain. A
            // drain that lets writes wait for company hears that someone waits now.
            let starts = !isDraining
            if starts { isDraining = true }
            condition.broadcast()
            condition.unlock()
            if starts { scheduleDrain() }
        }
    }

    /// Waits until every write queued so far is committed (before a read that must see them).
    package func waitUntilIdle() {
        condition.lock()
        let last = nextTicket - 1
        condition.unlock()
        if last > 0 { _ = wait(for: last, collecting: false) }
    }

    /// Waits until every write queued so far is committed and the drain thread has ended (a later write starts it
    /// again). The thread holds the queue, and with it the store's connection, for a few idle seconds otherwise: a
    /// manager that has shut down would keep an exclusively opened store locked that long.
    package func settle() {
        waitUntilIdle()
        condition.lock()
        drainExitRequested = true
        condition.broadcast()
        while hasDrainThread, !drainRequested { condition.wait() }
        drainExitRequested = false
        condition.unlock()
    }

    /// Whether `ticket` is not yet committed and no one is committing.
    private func isIdle(before ticket: UInt64) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        return committed < ticket && !isDraining
    }

    private func enqueue(_ work: @escaping @Sendable (Connection) throws -> Void, awaited: Bool = true) -> UInt64 {
        condition.lock()
        defer { condition.unlock() }
        let ticket = nextTicket
        nextTicket += 1
        pending.append(Entry(ticket: ticket, work: work, awaited: awaited))
        return ticket
    }

    /// Blocks until `ticket` is committed, committing itself when no one else is; returns the write's error.
    private func wait(for ticket: UInt64, collecting: Bool = true) -> DownloadError? {
        condition.lock()
        blockedWaiters += 1
        condition.broadcast()
        while committed < ticket {
            if isDraining {
                condition.wait()
                continue
            }
            isDraining = true
            condition.unlock()
            commitPending()
            condition.lock()
            isDraining = false
            condition.broadcast()
        }
        blockedWaiters -= 1
        let failure = collecting ? failures.removeValue(forKey: ticket) : nil
        // Writes queued behind this one are not this caller's to commit: a caller still waiting commits them, or,
        // when none waits, the drain thread.
        let handsOff = !pending.isEmpty && !isDraining && blockedWaiters == 0
        if handsOff { isDraining = true }
        condition.unlock()
        if handsOff { scheduleDrain() }
        return failure
    }

    /// Has the drain thread commit until nothing is queued. The caller has set `isDraining`.
    ///
    /// The drain has a thread of its own, not one of Dispatch's or Swift's pool: writers that wait for a commit
    /// block their thread (as SQLite's own lock would), and on a two-core machine the pool has two threads. With the
    /// drain queued on that pool, sixteen downloads writing their checkpoints could block both threads waiting for a
    /// drain that had no thread to run on, until the pool grew.
    private func scheduleDrain() {
        condition.lock()
        drainRequested = true
        let starts = !hasDrainThread
        hasDrainThread = true
        condition.broadcast()
        condition.unlock()
        if starts {
            // Weakly: the queue (and the store's connection it holds) goes as soon as the loop returns.
            let thread = Thread { [weak self] in self?.drainLoop() }
            thread.name = "haul-store-commits"
            thread.start()
        }
    }

    /// Whether everything queued can wait a moment: no one waits for any of it.
    private var mayWaitForCompany: Bool {
        !pending.isEmpty && waiters.isEmpty && blockedWaiters == 0 && !pending.contains { $0.awaited }
    }

    /// The drain thread: commits when asked, and ends after a few idle seconds (a store that is written rarely
    /// keeps no thread). Writes no one waits for wait up to `companyWindow` for one someone waits for, and are
    /// committed in its transaction: with many downloads, each start and each end was a transaction of its own.
    private func drainLoop() {
        condition.lock()
        while true {
            if drainRequested {
                drainRequested = false
                let deadline = Date(timeIntervalSinceNow: companyWindow)
                while mayWaitForCompany, condition.wait(until: deadline) {}
                while !pending.isEmpty {
                    condition.unlock()
                    commitPending()
                    condition.lock()
                }
                isDraining = false
                condition.broadcast()
                continue
            }
            if drainExitRequested
                || (!condition.wait(until: Date(timeIntervalSinceNow: 5)) && !drainRequested)
            {
                hasDrainThread = false
                condition.broadcast()
                condition.unlock()
                return
            }
        }
    }

    /// Commits what is queued, in one transaction, and tells the waiters. Called only by the committing thread.
    private func commitPending() {
        condition.lock()
        let batch = pending
        pending.removeAll(keepingCapacity: true)
        condition.unlock()
        guard let last = batch.last else { return }
        var errors: [UInt64: DownloadError] = [:]
        var lost: [DownloadError] = []
        let durable = batch.contains { $0.awaited }
        do {
            try transact(durable) { connection in
                for entry in batch { try entry.work(connection) }
            }
        } catch {
            // Nothing of the group was written. Written again one transaction a write, so that one write's failure
            // (a constraint, a full disk) is told to its caller alone. Rare: no savepoint is paid for on the common
            // path.
            for entry in batch {
                do { try transact(entry.awaited) { connection in try entry.work(connection) } } catch {
                    // Kept for a caller that waits for it after all (`completion(of:)`), and told as lost when no
                    // one was expected to.
                    errors[entry.ticket] = describe(error)
                    if !entry.awaited { lost.append(describe(error)) }
                }
            }
        }
        condition.lock()
        committed = last.ticket
        counts.commits += 1
        counts.writes += batch.count
        for (ticket, error) in errors { failures[ticket] = error }
        if failures.count > 10_000, let oldest = failures.keys.min() {
            // Errors of writes no one collected (a full disk fails many): the oldest go.
            failures.removeValue(forKey: oldest)
        }
        var ready: [(CheckedContinuation<DownloadError?, Never>, DownloadError?)] = []
        for ticket in waiters.keys where ticket <= last.ticket {
            if let waiter = waiters.removeValue(forKey: ticket) {
                ready.append((waiter, failures.removeValue(forKey: ticket)))
            }
        }
        let handler = lostWriteHandler
        condition.broadcast()
        condition.unlock()
        for (waiter, failure) in ready { waiter.resume(returning: failure) }
        if let handler { for error in lost { handler(error) } }
    }
}

/// The result of one write, handed from the committing thread to the caller (who reads it only after the commit,
/// under the queue's lock).
private final class ResultBox<T>: @unchecked Sendable {
    var value: T?
}

extension CommitQueue where Connection == Database {
    /// The queue of a SQLite store: a group is one transaction on `writer`. A `durable` one is on the disk when it
    /// returns: with SQLite's `synchronous=FULL` for that commit, its WAL frames are synced before the commit returns
    /// (and with them every commit before it). The store's default, `NORMAL`, syncs the WAL only at its checkpoints,
    /// so a power cut can lose the last commits: right for the writes no one waits for (a state change, a completion
    /// the next run recognises anyway), not for those a caller acts on (an add acknowledged, the row before a part
    /// file, a checkpoint). A group holding one write someone waits for is synced once for all of its writes.
    convenience init(
        writer: any DatabaseWriter, companyWindow: TimeInterval = 0.002,
        describe: @escaping @Sendable (any Error) -> DownloadError
    ) {
        self.init(
            transact: { durable, body in
                try writer.writeWithoutTransaction { db in
                    guard durable else { return try db.inGroupTransaction { try body(db) } }
                    try db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute()
                    defer { try? db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute() }
                    try db.inGroupTransaction { try body(db) }
                }
            }, companyWindow: companyWindow, describe: describe)
    }
}

extension Database {
    /// Runs `body` in an immediate transaction, committed when it returns and rolled back when it throws, as GRDB's
    /// `inTransaction` does, through cached statements: `inTransaction` prepares its `BEGIN` and `COMMIT` again for
    /// each transaction, and a store that commits every few downloads prepared two statements a download.
    func inGroupTransaction(_ body: () throws -> Void) throws {
        try cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
        do {
            try body()
            // SQLite rolls a transaction back by itself after some errors (a full disk, an I/O error): there is
            // nothing to commit then, and committing would report "no transaction is active" instead of the cause.
            guard isInsideTransaction else {
                throw DatabaseError(resultCode: .SQLITE_ABORT, message: "Transaction was aborted")
            }
            try cachedStatement(sql: "COMMIT TRANSACTION").execute()
        } catch {
            if isInsideTransaction { try? cachedStatement(sql: "ROLLBACK TRANSACTION").execute() }
            throw error
        }
    }
}
