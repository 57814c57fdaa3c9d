import Foundation
import HaulCore

/// Downloads other processes run. Processes that run downloads on one state folder's store (`haul get` run twice for
/// one file, or on overlapping lists) each start what they were asked for, and each reads the rows when it is asked.
/// A download one of them runs is held by its lock (`RunLocks`): the others keep it queued, without writing its row,
/// and pass over it until that process lets it go, then take it as that process left it; and a download one of them
/// is about to start, when others ran beside it, is read from the store first, since another may have run it since.
/// So no file is fetched twice, nor saved again under `name (1)`. A download whose part file is held by a process
/// that holds no such lock (a Haul without them) is refused when it is added (`reuse`).
extension DownloadManager {
    /// How often the downloads another process runs are looked at again: the kernel tells no one when a lock goes.
    static let heldElsewhereInterval = Duration.milliseconds(200)

    /// Whether `id`, next in the queue, starts now. Not when another process runs it: it stays queued here and is
    /// looked at again every `heldElsewhereInterval` on the idle clock until that process lets it go
    /// (`takeFreed`). Nor when, other processes having run beside this one, its row shows that one of them ended it
    /// since (`takeStoredRow`).
    func startsHere(_ id: String) -> Bool {
        guard let runLocks else { return true }
        guard runLocks.hold(id) else {
            passOver(id)
            return false
        }
        guard runLocks.othersMayHaveRun else { return true }
        if takeStoredRow(id) { return true }
        runLocks.release(id)
        return false
    }

    /// Keeps `id`, which another process runs, queued and unstarted until that process lets it go.
    private func passOver(_ id: String) {
        heldElsewhere.insert(id)
        configuration.logger.info("\(catalog.url(of: id) ?? id): another process runs it; waiting for it to end there")
        guard heldElsewhereWatch == nil else { return }
        let clock = engineIdleClock
        heldElsewhereWatch = Task { [weak self] in
            while true {
                do { try await clock.sleep(Self.heldElsewhereInterval) } catch { return }
                guard let self, await self.takeFreed() else { return }
            }
        }
    }

    /// Takes in the downloads other processes let go (their rows as they left them, `takeStoredRow`), starts those
    /// still to run, and says whether any is still waited for.
    func takeFreed() -> Bool {
        guard let runLocks, !isShutDown else { return false }
        for id in heldElsewhere where runLocks.hold(id) {
            heldElsewhere.remove(id)
            // Let go again: `schedule` takes it when it starts the download.
            _ = takeStoredRow(id)
            runLocks.release(id)
        }
        try? schedule()
        if heldElsewhere.isEmpty { heldElsewhereWatch = nil }
        return !heldElsewhere.isEmpty
    }

    /// Takes the row of the queued download `id` as the store has it now, which another process may have written
    /// since this one read it, and says whether the download is still to run. One that process completed, whose
    /// file is in place, ends here as already complete; any other goes on from what its row holds (its name, part
    /// file and offsets), as an add finds it again.
    private func takeStoredRow(_ id: String) -> Bool {
        guard let record = catalog[id], record.state == .queued, tasks[id] == nil,
            var stored = try? store.record(id: id)
        else { return false }
        if let result = try? alreadyComplete(stored) {
            keep(stored)
            finish(id, with: .success(result))
            emitChanged(stored)
            return false
        }
        do {
            // Left running by a process that ended without stopping it.
            if stored.state.isActive {
                try stored.apply(.interruptedByExit)
                stored.activeConnections = 0
            }
            try reuse(&stored, options: record.options, staysPaused: false)
        } catch {
            var failed = record
            settle(&failed, on: .failedPermanently)
            failed.error = error
            keep(failed)
            finish(id, with: .failure(error))
            emitChanged(failed)
            return false
        }
        stored.priority = record.priority
        stored.queuePosition = record.queuePosition
        keep(stored)
        return stored.state == .queued
    }
}
