import Foundation
import HaulCore

/// How a run ends: every task stopped, then the part file kept, left or discarded as the machine decided.
extension DownloadRunner {
    /// The one way a run ends, whatever ended it: every connection and helper task stops, the events still on their
    /// way are answered and dropped, and every task has ended before the part file is kept, left or discarded as the
    /// machine decided.
    func end(_ ending: TransferMachine.Ending) async -> RunOutcome {
        for id in Array(connections.keys) { closeConnection(id) }
        fastTicker?.cancel()
        inbox.finish()
        // A task's yield after the finish is refused (and the task then ends by itself); what was queued before it
        // is drained here, so no task waits for the loop's word for ever.
        while let event = await inbox.next() { event.decline() }
        for task in retired + [fastTicker, checkpoint, pieceChecks].compactMap({ $0 }) { await task.value }
        retired = []
        defer { part?.unlock() }
        switch ending {
        case .completed:
            guard let result else { return .failed(DownloadError(.fileSystem, "\(source) completed with no file")) }
            return .completed(result)
        case .stopped(let fate):
            await settle(fate)
            return .stopped
        case .failed(let error, let fate):
            await settle(fate)
            return .failed(error)
        }
    }

    /// Does what the machine decided with the part file of a run that did not complete.
    func settle(_ fate: TransferMachine.PartFate) async {
        switch fate {
        case .keep(let mark): await flush(mark)
        case .leave: break
        case .discard:
            // One unlink of Haul's own file.
            if let part { folder?.delete(part.name, identity: part.identity) }
        case .handBack:
            // Nothing of it is Haul's: the row forgets it, and a retry with -c hands it over again.
            record.partIdentity = nil
            record.handOver = nil
            guard let part, let name = handedOver.movedFrom, let folder else { break }
            // Nothing was written into it: every byte is the user's.
            if folder.giveBack(part.name, identity: part.identity, keeping: .max, to: name) == name {
                let path = PathName.join(folder.path, name)
                environment.logger.notice("\(source): \(path) is back under its name, as it was")
            } else {
                environment.logger.notice("\(source): the file handed over stays at \(part.path)")
            }
        }
    }

    /// After a stop or a failure: every write of this run has ended, so after a sync the bytes written are
    /// durable, and the store gets them exactly.
    func flush(_ mark: TransferMachine.Checkpoint) async {
        guard let part, machine.isPartVerified else { return }
        let folder = isPartNameDurable ? nil : folder
        do {
            try await Blocking.run {
                try part.syncData()
                folder?.sync()
            }
        } catch { return }
        if let (_, intact) = await Self.tampering(of: part, with: mark) {
            try? await storeTampered(intact)
        } else {
            try? await save(transferReport(mark: mark), waiting: true)
        }
    }

    /// What another program did to the part file behind Haul's back, checked after a sync against the bytes `mark`
    /// counts: deleted (or replaced), or cut short. Nil when every byte is there. Returns the error to stop with and
    /// the mark of what is left: nothing of a deleted file, each range up to its first missing byte of a cut one.
    static func tampering(of part: PartFile, with mark: TransferMachine.Checkpoint) async -> (
        DownloadError, intact: TransferMachine.Checkpoint?
    )? {
        let found = try? await Blocking.run { checkTampering(of: part, with: mark) }
        return found ?? nil
    }

    /// `tampering(of:with:)` on the calling thread, for work already off the cooperative pool.
    static func checkTampering(of part: PartFile, with mark: TransferMachine.Checkpoint) -> (
        DownloadError, intact: TransferMachine.Checkpoint?
    )? {
        guard let status = part.statusInFolder() else {
            let what =
                part.folder.isDeleted
                ? "the folder \(part.folder.path) was deleted"
                : "the part file \(part.path) was deleted or replaced by another program"
            let message = "\(what) while downloading; its bytes are gone (run the command again to start over)"
            return (DownloadError(.fileSystem, message), nil)
        }
        let ranges: [(start: Int64, end: Int64)] =
            switch mark {
            case .offset(let offset): [(0, offset)]
            case .segments(let segments, _): segments.map { ($0.start, $0.offset) }
            }
        let cuts = ranges.map { part.firstMissingByte(from: $0.start, to: $0.end, status: status) }
        guard let first = cuts.compactMap({ $0 }).min() else { return nil }
        let intact: TransferMachine.Checkpoint
        switch mark {
        case .offset(let offset): intact = .offset(min(offset, cuts[0] ?? offset))
        case .segments(let segments, _):
            let kept = zip(segments, cuts).map { segment, cut in
                var segment = segment
                if let cut { segment.offset = max(segment.start, min(segment.offset, cut)) }
                return segment
            }
            intact = .segments(kept, bytes: kept.reduce(0) { $0 + $1.offset - $1.start })
        }
        let error = DownloadError(
            .fileSystem,
            "the part file \(part.path) was cut short by another program while downloading (bytes from about "
                + "\(first) on are missing); run the command again to resume from what is left")
        return (error, intact)
    }

    /// Stores what is left after another program changed the part file: the intact bytes, or, for a file that is
    /// gone, nothing (and whatever is at its path later is compared before it is trusted).
    func storeTampered(_ intact: TransferMachine.Checkpoint?) async throws(DownloadError) {
        var report = transferReport(mark: intact ?? .offset(0))
        if intact == nil { report.isPartVerified = false }
        try await save(report, waiting: true)
    }
}
