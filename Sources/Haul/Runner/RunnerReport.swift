import HaulCore

/// What a runner tells its manager while it runs.
enum RunnerReport: Sendable {
    /// What the transfer learned or did to its part file (see `TransferReport`). With `waiting`, the runner waits
    /// for the commit (and hears of its failure). With `claiming`, the report's destination is a name the download
    /// just chose: the manager refuses it (`destinationExists`, nothing stored) when another of its downloads claims
    /// it, so the check and the claim are one step.
    case transfer(TransferReport, waiting: Bool, claiming: Bool = false)
    /// The runner is about to take the empty part file a killed run left at this destination's name
    /// (`DownloadFolder.leftOverPart`): the manager refuses (`destinationExists`) when another of its downloads
    /// claims the destination, whose file it may be. Nothing is stored.
    case takingLeftOver(String)
    /// A checkpoint: the part file durably holds the bytes `mark` counts. The runner waits for its commit.
    case checkpoint(TransferMachine.Checkpoint)
    /// The download starts again from 0 (a changed file, a server that stopped honouring ranges, …): not a failure.
    case restarted(String)
    /// The server cannot be reached; the download waits for the network.
    case waitingForNetwork(DownloadError)
    /// The server answers again after a wait for the network.
    case networkReturned
    /// A retryable error; the download or one of its connections waits `delay`.
    case retrying(DownloadError, delay: Duration, attempts: Int?)
    /// Bytes arrive again after a retry.
    case recovered
    /// Connections open now.
    case connections(Int)
    /// Every byte has arrived and no connection is open: what is left is verifying, syncing and moving the file.
    /// The download no longer needs a transfer slot.
    case finishing
    /// After `finishing`, the download transfers again (the checksum did not match: a fresh fetch).
    case transferring
}

/// What the runner reports of a download's transfer: its names and identities as the runner has them, and the
/// transfer's state as its machine has it. The machine holds the one copy of that state; this is what of it goes to
/// the store.
struct TransferReport: Sendable {
    var destination: String?
    var finalURL: String?
    var partIdentity: FileIdentity?
    var handOver: PartHandOver?
    var folderIdentity: FileIdentity?
    var facts: RemoteFacts?
    var isPartVerified: Bool
    /// The bytes the part file durably holds; nil leaves the stored mark as it is (a checkpoint may be on its way).
    var mark: TransferMachine.Checkpoint?
}

/// How a run ended.
enum RunOutcome: Sendable {
    case completed(DownloadResult)
    case failed(DownloadError)
    /// Stopped by cancellation (pause, cancel, shutdown) after flushing the exact offset.
    case stopped
    /// The URL answered this Metalink: nothing was written, and the download is to follow it.
    case metalink(Metalink)
}
