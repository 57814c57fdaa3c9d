import Foundation
import HaulCore
import Logging
import NIOCore

extension DownloadRunner {
    // MARK: Part file and store

    /// Syncs the part file, then has the manager store the mark, off the loop; the machine hears when it is done.
    /// A checkpoint's report carries the mark alone, so what the loop reports meanwhile never moves it back.
    func startCheckpoint(_ mark: TransferMachine.Checkpoint) {
        guard let part else {
            inbox.yield(.checkpointed(mark))
            return
        }
        let (environment, events) = (environment, inbox)
        let folder = isPartNameDurable ? nil : folder
        checkpoint = Task {
            await DownloadRunner.checkpoint(mark, of: part, syncing: folder, environment: environment, events: events)
        }
    }

    /// A checkpoint's sync and store, off the loop; `folder`, when given, is synced too (the part file's name is
    /// new).
    static func checkpoint(
        _ mark: TransferMachine.Checkpoint, of part: PartFile, syncing folder: DownloadFolder?,
        environment: RunnerEnvironment, events: RunnerInbox
    ) async {
        do {
            try await Blocking.run {
                try part.syncData()
                folder?.sync()
            }
            // The failure that follows stores what is left (`flush`).
            if let (problem, _) = await tampering(of: part, with: mark) { throw problem }
            // Waited for: a store that cannot write (a full disk) stops the download instead of letting it run on
            // with nothing recorded.
            if let commit = try await environment.report(.checkpoint(mark)) {
                try await environment.committed(commit)
            }
            events.yield(.checkpointed(mark))
        } catch {
            events.yield(.checkpointFailed((error as? DownloadError) ?? DownloadError(.fileSystem, "\(error)")))
        }
    }

    /// What goes to the store of the transfer now: the runner's names and identities, the machine's facts and trust
    /// in the part file (the stored row's, before the machine started), and `mark` (nil: the stored mark stays).
    func transferReport(mark: TransferMachine.Checkpoint?) -> TransferReport {
        let started = machine.hasStarted
        return TransferReport(
            destination: record.destination, finalURL: record.finalURL, partIdentity: record.partIdentity,
            handOver: record.handOver, folderIdentity: record.folderIdentity,
            facts: started ? machine.remoteFacts : record.remoteFacts,
            isPartVerified: started ? machine.isPartVerified : record.isPartVerified, mark: mark)
    }

    /// Has the manager store `report`; with `waiting`, returns once it is committed. With `claiming`, the report's
    /// destination is a name just chosen, which the manager refuses (`destinationExists`) when another of its
    /// downloads claims it.
    func save(_ report: TransferReport, waiting: Bool, claiming: Bool = false) async throws(DownloadError) {
        let commit = try await environment.report(.transfer(report, waiting: waiting, claiming: claiming))
        if waiting, let commit {
            try await environment.committed(commit)
            storedTotal = report.facts?.totalLength
            isStoredVerified = report.isPartVerified
        }
    }

    /// Notes that a part file was just made: neither its identity nor its name is stored or durable yet.
    func partMade() {
        isPartIdentityStored = false
        isPartNameDurable = false
    }

    func tellManager(_ report: RunnerReport) async throws(DownloadError) {
        _ = try await environment.report(report)
    }

    /// Stores first what the part file will hold (it never counts more than the disk has), then truncates.
    func truncate(to length: Int64) async throws {
        // A checkpoint in flight ends first: its mark, stored after the offset is lowered, would count bytes the
        // truncate removes (and its look at the part file would take the truncate for someone else's). It never
        // waits for the loop, so this wait ends.
        await checkpoint?.value
        try await save(transferReport(mark: .offset(min(machine.durableOffset, length))), waiting: false)
        try part?.truncate(to: length)
    }

    func tell(_ report: TransferMachine.Report) async throws {
        switch report {
        case .factsLearned(let facts):
            // The machine keeps them; they go to the store with the next report of the transfer (when its body
            // starts, or before the rename).
            if let expected = options.expectedLength, let total = facts.totalLength, total != expected {
                throw DownloadError(
                    .invalidResponse,
                    "the server's file is \(total) bytes, and the Metalink says \(expected): it is not the file it "
                        + "describes")
            }
            if let pieces = options.pieces, let total = facts.totalLength {
                let count = (total + pieces.length - 1) / pieces.length
                guard count == Int64(pieces.hashes.count) else {
                    throw DownloadError(
                        .invalidResponse,
                        "the server's file is \(total) bytes, \(count) pieces of \(pieces.length), but "
                            + "\(pieces.hashes.count) piece hashes were given: it is not the file they describe")
                }
            }
        case .restarted(let reason):
            environment.logger.notice("\(source): \(reason)")
            try await tellManager(.restarted(reason))
        case .retrying(let error, let delay, let attempts):
            environment.logger.info("\(source): \(error.message); retrying in \(delay.spoken)")
            try await tellManager(.retrying(error, delay: delay, attempts: attempts))
        case .waitingForNetwork(let error):
            environment.logger.info("\(source): \(error.message); waiting for the network")
            try await tellManager(.waitingForNetwork(error))
        case .networkReturned:
            try await tellManager(.networkReturned)
        case .recovered:
            try await tellManager(.recovered)
        case .connections(let count):
            try await tellManager(.connections(count))
        case .mirrorDropped(let index, let reason):
            let url = options.server(index, own: source)
            environment.logger.notice("\(source): not using \(url) any more: \(reason)")
        }
    }
}
