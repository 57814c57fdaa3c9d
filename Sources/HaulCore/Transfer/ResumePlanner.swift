/// Decides what to request from what the store and the disk know (the resume table of DESIGN.md).
public struct ResumePlanner: Sendable {
    /// What the runner found before the request.
    public struct Input: Sendable, Equatable {
        /// The part file's length, nil when there is no part file.
        public var partLength: Int64?
        /// The durable offset in the store (0 when there is no record).
        public var durableOffset: Int64
        /// Whether the store has a record for this part file written by Haul.
        public var hasRecord: Bool
        /// Whether, without such a record, the durable offset still bounds what the part file holds: a file the user
        /// handed over, stored with its length, whose bytes past it Haul appended and never synced before a mark
        /// counted them. It is cut there, and compared before anything is appended.
        public var boundsUnverified: Bool
        /// What the last response told about the remote file, if any.
        public var remote: RemoteFacts?

        /// Makes an input.
        public init(
            partLength: Int64?, durableOffset: Int64, hasRecord: Bool, boundsUnverified: Bool = false,
            remote: RemoteFacts?
        ) {
            self.partLength = partLength
            self.durableOffset = durableOffset
            self.hasRecord = hasRecord
            self.boundsUnverified = boundsUnverified
            self.remote = remote
        }
    }

    /// What to do.
    public enum Plan: Hashable, Sendable {
        /// Truncate the part file to `truncateTo` when given (0 discards it), then send `request`.
        case request(RangeRequest, truncateTo: Int64?)
        /// Everything is held: truncate when given, then verify and finalise without a request.
        case finalize(truncateTo: Int64?)
    }

    /// How many bytes before the offset are fetched again to compare when no strong validator exists.
    public var overlapLength: Int64

    /// A planner with the default 64 KiB overlap.
    public init(overlapLength: Int64 = 64 * 1024) {
        self.overlapLength = overlapLength
    }

    /// The plan for `input`.
    public func plan(_ input: Input) -> Plan {
        guard let partLength = input.partLength else {
            // No part file (or it was deleted while the row said running): start from 0.
            return .request(.whole, truncateTo: nil)
        }
        var held = partLength
        var truncateTo: Int64?
        if input.hasRecord || input.boundsUnverified, partLength > input.durableOffset {
            // Bytes past the durable offset were never fsynced before the checkpoint: do not trust them.
            held = input.durableOffset
            truncateTo = input.durableOffset
        }
        if let total = input.remote?.totalLength {
            if held > total { return .request(.whole, truncateTo: 0) }
            // Bytes Haul wrote and fsynced for this version, all of them: nothing left to fetch, even from a server
            // that ignores ranges.
            if held == total, input.hasRecord { return .finalize(truncateTo: truncateTo) }
        }
        if let remote = input.remote, !remote.isResumable {
            return .request(.whole, truncateTo: 0)
        }
        guard held > 0 else { return .request(.whole, truncateTo: truncateTo ?? 0) }
        if input.hasRecord, let validator = input.remote?.validators.ifRangeValue {
            return .request(RangeRequest(offset: held, ifRange: validator), truncateTo: truncateTo)
        }
        // No strong validator, or bytes Haul has no record of: never append blindly, compare an overlap first.
        let overlap = min(overlapLength, held)
        return .request(RangeRequest(offset: held, overlap: overlap), truncateTo: truncateTo)
    }
}
