import Dispatch
import HaulCore
import Synchronization

/// Checkpoints off the hot path: `fdatasync` the part file, then store the mark (an offset, or a segment map), on a
/// serial queue, while the transfer keeps writing. The mark handed in describes bytes fully written before the sync
/// starts, so what is stored never claims more than is on disk (invariant 1). At most one checkpoint is in flight; a
/// request while one runs is skipped, the next one catches up.
final class Checkpointer<Mark: Sendable>: Sendable {
    private let part: PartFile
    private let persist: @Sendable (Mark) throws(DownloadError) -> Void
    private let queue = DispatchQueue(label: "haul.checkpoint")
    private let state = Mutex<(inFlight: Bool, error: DownloadError?)>((false, nil))

    /// A checkpointer that syncs `part`, then calls `persist` with the mark.
    init(part: PartFile, persist: @escaping @Sendable (Mark) throws(DownloadError) -> Void) {
        self.part = part
        self.persist = persist
    }

    /// Starts a checkpoint of `mark` unless one is running. Throws the error of an earlier checkpoint, if any.
    func request(_ mark: Mark) throws(DownloadError) {
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
                try persist(mark)
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
