extension TransferMachine {
    /// What the machine works with.
    public struct Settings: Sendable, Equatable {
        /// The most connections (1: exactly one).
        public var maxConnections: Int
        /// No segment smaller than this is started by splitting.
        public var minimumSplitSize: Int64
        /// Bytes before the resume point fetched again and compared when no strong validator exists.
        public var overlapLength: Int64
        /// Backoff and the bound on attempts without progress (per connection).
        public var retryPolicy: RetryPolicy
        /// A connection that brings nothing for this long is abandoned.
        public var idleTimeout: Duration
        /// Checkpoint after this many bytes...
        public var checkpointBytes: Int64
        /// ...or after this long with bytes to checkpoint.
        public var checkpointInterval: Duration
        /// At most one progress report this often.
        public var progressInterval: Duration
        /// How long the connection ramp measures before judging.
        public var rampWindow: Duration
        /// A checksum is checked at the end: a mismatch after a resumed download fetches it whole once.
        public var verifiesChecksum: Bool
        /// The servers the file is fetched from: the URL the user gave, then its mirrors (1: no mirror).
        public var sources: Int
        /// The most connections to one of them.
        public var connectionsPerSource: Int
        /// The length of the pieces whose hashes are known (each checked as it completes); nil without them.
        public var pieceLength: Int64?

        /// Settings with DESIGN.md's defaults where not given.
        public init(
            maxConnections: Int = 4,
            minimumSplitSize: Int64 = 4 << 20,
            overlapLength: Int64 = 64 << 10,
            retryPolicy: RetryPolicy = RetryPolicy(),
            idleTimeout: Duration = .seconds(30),
            checkpointBytes: Int64 = 16 << 20,
            checkpointInterval: Duration = .seconds(1),
            progressInterval: Duration = .milliseconds(100),
            rampWindow: Duration = .milliseconds(100),
            verifiesChecksum: Bool = false,
            sources: Int = 1,
            connectionsPerSource: Int? = nil,
            pieceLength: Int64? = nil
        ) {
            self.pieceLength = pieceLength.map { max(1, $0) }
            self.sources = max(1, sources)
            self.connectionsPerSource = max(1, connectionsPerSource ?? maxConnections)
            self.maxConnections = max(1, maxConnections)
            self.minimumSplitSize = max(1, minimumSplitSize)
            self.overlapLength = overlapLength
            self.retryPolicy = retryPolicy
            self.idleTimeout = idleTimeout
            self.checkpointBytes = checkpointBytes
            self.checkpointInterval = checkpointInterval
            self.progressInterval = progressInterval
            self.rampWindow = rampWindow
            self.verifiesChecksum = verifiesChecksum
        }
    }

    /// What the runner found before the first request.
    public struct Start: Sendable, Equatable {
        /// The part file's length; nil when there is none (a folder download before its name, or deleted).
        public var partLength: Int64?
        /// The stored durable offset.
        public var durableOffset: Int64
        /// The stored segment map of a download split over several connections.
        public var segments: [Segment]?
        /// Whether the part file's bytes were written by Haul for this download (false: compared before trusted).
        public var isPartVerified: Bool
        /// Whether the part file is a file the user handed over (`-c`) at this start, empty or not: a failure before
        /// this run writes into it gives it back (`PartFate.handBack`).
        public var isHandedOver: Bool
        /// Whether the part file is the user's, handed over at this start or an earlier one: the stored durable offset
        /// (its length when handed over, then each mark) bounds what it holds, verified or not.
        public var holdsHandedOver: Bool
        /// What is known of the remote file.
        public var facts: RemoteFacts?
        /// The URL was replaced since `facts` were learned (`TransferMachine+Checks`).
        public var linkReplaced: Bool

        /// Makes a start.
        public init(
            partLength: Int64?, durableOffset: Int64, segments: [Segment]? = nil, isPartVerified: Bool,
            isHandedOver: Bool = false, holdsHandedOver: Bool = false, facts: RemoteFacts?, linkReplaced: Bool = false
        ) {
            self.partLength = partLength
            self.durableOffset = durableOffset
            self.segments = segments
            self.isPartVerified = isPartVerified
            self.isHandedOver = isHandedOver
            self.holdsHandedOver = holdsHandedOver
            self.facts = facts
            self.linkReplaced = linkReplaced
        }
    }

    /// How to take the body of an accepted answer.
    public struct Body: Sendable, Equatable {
        /// Where its first byte belongs in the file.
        public var start: Int64
        /// Bytes before this are compared with the part file, not written.
        public var compareUntil: Int64
        /// One past the last byte it carries, when announced.
        public var end: Int64?

        /// Makes a body plan.
        public init(start: Int64, compareUntil: Int64, end: Int64?) {
            self.start = start
            self.compareUntil = compareUntil
            self.end = end
        }
    }

    /// What a checkpoint stores once the part file is synced.
    public enum Checkpoint: Sendable, Equatable {
        /// One connection: the bytes before this offset.
        case offset(Int64)
        /// Several: each segment with the bytes before its offset, and their sum.
        case segments([Segment], bytes: Int64)
    }

    /// What the runner tells the download's manager.
    public enum Report: Sendable, Equatable {
        /// An answer told what the remote file is (to store, with the part file's state).
        case factsLearned(RemoteFacts)
        /// The download starts again from 0: a restart, not a failure.
        case restarted(reason: String)
        /// A retryable error; the connection waits `delay` (nil attempts: one connection of several).
        case retrying(DownloadError, delay: Duration, attempts: Int?)
        /// The server cannot be reached; the download waits for the network.
        case waitingForNetwork(DownloadError)
        /// It answers again.
        case networkReturned
        /// Bytes arrive again after a retry: the error the retry was told with is over.
        case recovered
        /// Connections open now.
        case connections(Int)
        /// A mirror (`source`, counted as `RangeRequest.source`) is left out of this run, for `reason`.
        case mirrorDropped(source: Int, reason: String)
    }

    /// Progress, as the machine counts it.
    public struct Progress: Sendable, Equatable {
        /// Bytes held (written by this run and earlier ones).
        public var receivedBytes: Int64
        /// The file's length, when known.
        public var totalBytes: Int64?
        /// Speed over the last few seconds.
        public var bytesPerSecond: Double
        /// Time left at that speed, when the length is known.
        public var secondsRemaining: Double?
        /// Connections open.
        public var connections: Int
        /// Each server's state and speed, the URL the user gave first (empty without mirrors).
        public var mirrors: [MirrorStatus] = []
    }

    /// What the runner does.
    public enum Action: Sendable, Equatable {
        /// Send this request on this connection (opening it).
        case send(ConnectionID, RangeRequest)
        /// Take this answer's body: claim, compare or write, report each chunk.
        case stream(ConnectionID, Body)
        /// Drop this answer without reading its body.
        case discard(ConnectionID)
        /// Stop this connection (its body, its wait) and close it.
        case close(ConnectionID)
        /// Empty the part file from `to` on: store first what it holds then (the stored offset lowered to `to`
        /// at most, no segments, and the machine's facts: none after a restart), then truncate.
        case truncate(to: Int64)
        /// Sync the part file, then store the mark; tell `checkpointed` or `checkpointFailed`.
        case checkpoint(Checkpoint)
        /// Wait this long, then tell `waitEnded`.
        case wait(ConnectionID, Duration)
        /// Tell the manager.
        case report(Report)
        /// Publish progress.
        case progress(Progress)
        /// Every byte is held: verify the `total` bytes and move them into place; tell `finalized`.
        case finalize(total: Int64)
        /// Hash the bytes of piece `index` (`range`) in the part file and tell `pieceChecked` with `ticket`.
        case checkPiece(index: Int, range: Range<Int64>, ticket: UInt64)
        /// The run ends: the one way out, whatever ended it. The runner stops every connection, then does what
        /// `Ending` says with the part file.
        case end(Ending)
    }

    /// How a run ends, and what becomes of its part file.
    public enum Ending: Sendable, Equatable {
        /// The file is verified and in place.
        case completed
        /// The download fails with this error.
        case failed(DownloadError, PartFate)
        /// Stopped on request (a pause, a cancel, a shutdown).
        case stopped(PartFate)

        /// What becomes of the part file.
        public var fate: PartFate? {
            switch self {
            case .completed: nil
            case .failed(_, let fate), .stopped(let fate): fate
            }
        }
    }

    /// What becomes of the part file when a run ends without completing.
    public enum PartFate: Sendable, Equatable {
        /// Its bytes are kept: after a sync, the store gets exactly this mark (every write has ended by then).
        case keep(Checkpoint)
        /// Nothing of this run is stored: it ended before its transfer started, so the stored record still holds.
        case leave
        /// Deleted: its bytes are not the file asked for (the checksum did not match), or it holds none (a run
        /// that failed before its first byte).
        case discard
        /// The user's file, handed over with `-c` and never written by this run (which failed or was stopped): it
        /// goes back to the name it was handed over under, as it was, and nothing of it is stored as Haul's.
        case handBack
    }

    /// What a chunk of a body may do, from `claim`.
    public struct Grant: Sendable, Equatable {
        /// Where the chunk's first byte belongs.
        public var offset: Int64
        /// Its first bytes that are compared with the part file.
        public var compare: Int
        /// The bytes after those that are written.
        public var write: Int
        /// Read no further on this connection after this chunk (its range is done, or it is asked to close).
        public var stop: Bool
        /// The answer sent more than it announced: the excess is not written, and the connection fails.
        public var overrun: Bool

        /// Makes a grant.
        public init(offset: Int64, compare: Int, write: Int, stop: Bool, overrun: Bool) {
            self.offset = offset
            self.compare = compare
            self.write = write
            self.stop = stop
            self.overrun = overrun
        }
    }

    /// How the end of a download went, from the runner's verification.
    public enum FinalizeOutcome: Sendable, Equatable {
        /// Verified and in place.
        case completed
        /// The checksum did not match (the error says how).
        case checksumMismatch(DownloadError)
    }
}
