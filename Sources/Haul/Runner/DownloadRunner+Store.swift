import Foundation
import HaulCore
import Logging
import NIOCore
import Synchronization

extension DownloadRunner {
    // MARK: Part file and store

    /// Syncs the part file, then has the manager store the mark, off the loop; the machine hears when it is done.
    func startCheckpoint(_ mark: TransferMachine.Checkpoint, continuation: AsyncStream<Event>.Continuation) {
        guard let part else {
            continuation.yield(.checkpointed(mark))
            return
        }
        let task = Task { [self] in
            do {
                try await Blocking.run { try part.syncData() }
                // The failure that follows stores what is left (`flush`).
                if let (problem, _) = await Self.tampering(of: part, with: mark) { throw problem }
                try await store(mark)
                continuation.yield(.checkpointed(mark))
            } catch {
                continuation.yield(
                    .checkpointFailed((error as? DownloadError) ?? DownloadError(.fileSystem, "\(error)")))
            }
        }
        state.withLock { $0.checkpoint = task }
    }

    /// Has the manager store a checkpoint's mark (after the sync that makes it true), and waits for the commit: off
    /// the loop, so it costs the transfer nothing, and a store that cannot write (a full disk) stops the download
    /// instead of letting it run on with nothing recorded.
    func store(_ mark: TransferMachine.Checkpoint) async throws(DownloadError) {
        try await saveTransfer(waiting: true) { record in
            switch mark {
            case .offset(let offset):
                record.durableOffset = offset
                record.segments = nil
            case .segments(let segments, let bytes):
                record.segments = segments
                record.durableOffset = bytes
            }
        }
    }

    /// Changes the runner's record and has the manager store what changed of the transfer; with `waiting`, returns
    /// once it is committed.
    func saveTransfer(waiting: Bool = false, _ change: (inout DownloadRecord) -> Void)
        async throws(DownloadError)
    {
        let updated = state.withLock { state in
            change(&state.record)
            if let facts = machine.withLock({ $0.remoteFacts }) { state.record.remoteFacts = facts }
            return state.record
        }
        let commit = try await environment.report(.transfer(updated, waiting: waiting))
        if waiting, let commit { try await environment.committed(commit) }
    }

    func tellManager(_ report: RunnerReport) async throws(DownloadError) {
        _ = try await environment.report(report)
    }

    /// Lowers the stored offset first (it never exceeds the bytes on disk), forgets the segments and, when asked,
    /// what was known of the remote file, then truncates.
    func truncate(to length: Int64, forgetting: Bool) async throws {
        // A checkpoint in flight ends first: its mark, stored after the offset is lowered, would count bytes the
        // truncate removes (and its look at the part file would take the truncate for someone else's).
        await state.withLock { $0.checkpoint }?.value
        try await saveTransfer { record in
            record.durableOffset = min(record.durableOffset, length)
            record.segments = nil
            record.isPartVerified = true
            if forgetting {
                record.etag = nil
                record.lastModified = nil
                record.isLastModifiedStrong = false
                record.isResumable = nil
                record.totalLength = nil
            }
        }
        // A closed connection may be inside a write: it lands before the truncate, never after it.
        await awaitClosed()
        try part?.truncate(to: length)
    }

    func tell(_ report: TransferMachine.Report) async throws {
        switch report {
        case .factsLearned(let facts):
            // Stored with the next write of the transfer (when its body starts, or before the rename).
            state.withLock { $0.record.remoteFacts = facts }
        case .restarted(let reason):
            environment.logger.notice("\(source): \(reason)")
            try await tellManager(.restarted(reason))
        case .retrying(let error, let delay, let attempts):
            environment.logger.info("\(source): \(error.message); retrying in \(delay)")
            try await tellManager(.retrying(error, delay: delay, attempts: attempts))
        case .waitingForNetwork(let error):
            environment.logger.info("\(source): \(error.message); waiting for the network")
            try await tellManager(.waitingForNetwork(error))
        case .networkReturned:
            try await tellManager(.networkReturned)
        case .connections(let count):
            try await tellManager(.connections(count))
        }
    }
}
