import Dispatch
import HaulCore
import Synchronization

/// Checkpoints off the hot path: `fdatasync` the part file, then store the offset, on a serial queue, while the
/// transfer keeps writing. The offset handed in was fully written before the sync starts, so the stored offset never
/// exceeds what is on disk (invariant 1). At most one checkpoint is in flight; a request while one runs is skipped,
/// the next one catches up.
final class Checkpointer: Sendable {
    private let part: PartFile
    private let store: DownloadStore
    private let id: String
    private let queue = DispatchQueue(label: "haul.checkpoint")
    private let state = Mutex<(inFlight: Bool, error: DownloadError?)>((false, nil))

    init(part: PartFile, store: DownloadStore, id: String) {
        self.part = part
        self.store = store
        self.id = id
    }

    /// Starts a checkpoint at `offset` unless one is running. Throws the error of an earlier checkpoint, if any.
    func request(_ offset: Int64) throws(DownloadError) {
        let (start, failure) = state.withLock { state -> (Bool, DownloadError?) in
            if let error = state.error { return (false, error) }
            if state.inFlight { return (false, nil) }
            state.inFlight = true
            return (true, nil)
        }
        if let failure { throw failure }
        guard start else { return }
        queue.async { [self] in
            var failure: DownloadError?
            do throws(DownloadError) {
                try part.syncData()
                try store.saveDurableOffset(offset, for: id)
            } catch {
                failure = error
            }
            state.withLock { state in
                state.inFlight = false
                if state.error == nil { state.error = failure }
            }
        }
    }

    /// Waits for the checkpoint in flight; throws its error, if any.
    func drain() async throws(DownloadError) {
        await withCheckedContinuation { continuation in queue.async { continuation.resume() } }
        if let error = state.withLock({ $0.error }) { throw error }
    }
}
