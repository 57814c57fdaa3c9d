/// One piece of a file fetched by one connection at a time: bytes `start..<end`, of which `start..<offset` are
/// fetched.
public struct Segment: Codable, Hashable, Sendable {
    /// The first byte.
    public var start: Int64
    /// One past the last byte.
    public var end: Int64
    /// One past the last byte fetched (`start` when none is).
    public var offset: Int64

    /// Makes a segment.
    public init(start: Int64, end: Int64, offset: Int64) {
        self.start = start
        self.end = end
        self.offset = offset
    }

    /// Bytes still to fetch.
    public var remaining: Int64 { end - offset }
    /// Whether every byte is fetched.
    public var isComplete: Bool { offset >= end }
}

/// The segments of one download and which of them a connection holds: the planner behind several connections per
/// file, as a value.
///
/// The segments always tile `0..<total` with no gap and no overlap. A segment's bytes before its `offset` are never
/// handed out again, so in normal operation no byte is fetched twice. A connection that needs work takes the free
/// unfinished segment with the most bytes left; when none is free it takes the second half of what remains of the
/// largest held segment (work stealing), so all connections finish together. A split happens only when both halves
/// keep at least `minimumSize` bytes. Segment indices are stable: a split appends the new segment.
///
/// The first split of a download is planned, like aria2's: while one held segment is all the work left, a second
/// connection cuts that segment into `pieces` equal parts (fewer when a part would be under `minimumSize`) instead of
/// halving what is left of it. The holder keeps the first part, the taker gets the second, and the rest wait for the
/// connections added later. So every connection's share is the same part of the file however long the first one ran
/// alone: halving what is left would give the first connection its head start on top of an equal share, and it would
/// finish last. When the holder has already fetched into the second part, the split halves instead.
public struct SegmentMap: Hashable, Sendable {
    /// The segments, in the order they were made (not necessarily by position).
    public private(set) var segments: [Segment]
    /// Whether a connection holds segment `i`.
    public private(set) var isHeld: [Bool]
    /// The file's length.
    public let total: Int64
    /// The smallest segment a split may start.
    public let minimumSize: Int64
    /// The parts the first split cuts the work into (the most connections the download may use); 1 halves.
    public let pieces: Int
    /// Every cut falls on a multiple of this (the length of the pieces whose hashes are checked; 1 for none).
    public var alignment: Int64 = 1

    /// A map of one free segment covering the file, whose first `fetched` bytes are already held; its first split
    /// cuts the work into `pieces` parts.
    public init(total: Int64, minimumSize: Int64, fetched: Int64 = 0, pieces: Int = 1) {
        self.total = total
        self.minimumSize = max(1, minimumSize)
        self.pieces = max(1, pieces)
        let held = min(max(0, fetched), total)
        segments =
            held > 0 && held < total
            ? [Segment(start: 0, end: held, offset: held), Segment(start: held, end: total, offset: held)]
            : [Segment(start: 0, end: total, offset: held)]
        isHeld = Array(repeating: false, count: segments.count)
    }

    /// A map restored from stored segments, all free; nil when they do not tile `0..<total` exactly or an offset lies
    /// outside its segment (a damaged record: the download starts over).
    public init?(restoring stored: [Segment], total: Int64, minimumSize: Int64, pieces: Int = 1) {
        guard total > 0, !stored.isEmpty else { return nil }
        var position: Int64 = 0
        for segment in stored.sorted(by: { $0.start < $1.start }) {
            guard segment.start == position, segment.end > segment.start, segment.offset >= segment.start,
                segment.offset <= segment.end
            else { return nil }
            position = segment.end
        }
        guard position == total else { return nil }
        self.total = total
        self.minimumSize = max(1, minimumSize)
        self.pieces = max(1, pieces)
        segments = stored
        isHeld = Array(repeating: false, count: stored.count)
    }

    /// Whether every byte is fetched.
    public var isComplete: Bool { segments.allSatisfy(\.isComplete) }
    /// Bytes fetched over all segments.
    public var fetchedBytes: Int64 { segments.reduce(0) { $0 + ($1.offset - $1.start) } }
    /// Gives a connection work and marks it held: the free unfinished segment with the most bytes left, else a new
    /// segment split off the largest held one. Nil when there is nothing to take.
    public mutating func take() -> Int? { take(first: nil, speeds: nil) }

    /// How fast the connections of a map fetched from several servers are, for `take(first:speeds:)`.
    public struct Speeds {
        /// The speed of the connection holding segment `i` (bytes a second; 0 when not yet measured).
        public var holder: (Int) -> Double
        /// The speed the taking connection is expected to have (0 when not yet measured).
        public var taker: Double
        /// The fewest bytes a steal takes.
        public var minimumSteal: Int64

        /// Makes the speeds.
        public init(holder: @escaping (Int) -> Double, taker: Double, minimumSteal: Int64) {
            self.holder = holder
            self.taker = taker
            self.minimumSteal = minimumSteal
        }
    }

    /// `take()` for connections of unequal speed (several servers): a free segment that holds byte `first` goes
    /// before any other; when no segment is free, the held segment that would finish last is split where its holder
    /// and the taker would finish together, so a slow server's last segment goes mostly to the fast one. Without
    /// both speeds measured the split halves what is left, as `take()` does. A steal takes at least `minimumSteal`
    /// bytes, and leaves the holder `keptAtLeast(minimumSteal)` bytes and a second of its own speed: those are on
    /// their way to it already, and a cut before them would throw them away.
    public mutating func take(first: Int64?, speeds: Speeds?) -> Int? {
        let free = segments.indices.filter { !isHeld[$0] && !segments[$0].isComplete }
        if let first, let index = free.first(where: { segments[$0].offset <= first && first < segments[$0].end }) {
            isHeld[index] = true
            return index
        }
        if let index = free.max(by: { segments[$0].remaining < segments[$1].remaining }) {
            isHeld[index] = true
            return index
        }
        if let speeds, plannedSplit() == nil { return steal(speeds) }
        guard let victim = splitCandidate() else { return nil }
        let segment = segments[victim]
        if let cuts = plannedCuts(victim) {
            segments[victim].end = cuts[0]
            for (start, end) in zip(cuts, cuts.dropFirst() + [segment.end]) {
                segments.append(Segment(start: start, end: end, offset: start))
                isHeld.append(false)
            }
            let taken = segments.count - cuts.count
            isHeld[taken] = true
            return taken
        }
        let middle = aligned(segment.offset + segment.remaining / 2)
        guard middle > segment.offset, middle < segment.end else { return nil }
        segments[victim].end = middle
        segments.append(Segment(start: middle, end: segment.end, offset: middle))
        isHeld.append(true)
        return segments.count - 1
    }

    /// The segment a planned first split would cut, when one would.
    private func plannedSplit() -> Int? {
        guard let victim = splitCandidate(), plannedCuts(victim) != nil else { return nil }
        return victim
    }

    /// Splits the held segment that would finish last where its holder and a taker of `speeds.taker` finish
    /// together; returns the new segment, held.
    private mutating func steal(_ speeds: Speeds) -> Int? {
        let floor = Self.keptAtLeast(speeds.minimumSteal)
        func secondsLeft(_ index: Int) -> Double {
            Double(segments[index].remaining) / max(speeds.holder(index), 1)
        }
        let held = segments.indices.filter {
            isHeld[$0] && segments[$0].remaining >= speeds.minimumSteal + floor
        }
        guard let victim = held.max(by: { secondsLeft($0) < secondsLeft($1) }) else { return nil }
        let segment = segments[victim]
        let holder = speeds.holder(victim)
        let share = holder > 0 && speeds.taker > 0 ? holder / (holder + speeds.taker) : 0.5
        let inFlight = max(floor, Int64(min(holder, Double(Int64.max / 2))))
        guard segment.remaining - inFlight >= speeds.minimumSteal else { return nil }
        var keep = Int64((Double(segment.remaining) * share).rounded())
        keep = min(max(keep, inFlight), segment.remaining - speeds.minimumSteal)
        let cut = aligned(segment.offset + keep)
        guard cut > segment.offset, segment.end - cut >= speeds.minimumSteal else { return nil }
        segments[victim].end = cut
        segments.append(Segment(start: cut, end: segment.end, offset: cut))
        isHeld.append(true)
        return segments.count - 1
    }

    /// Ends the segment holding byte `position` there, so that the bytes from `position` on become a free segment of
    /// their own (the sample range several servers are compared on). Nothing changes when those bytes are already
    /// being fetched or fetched.
    public mutating func separate(from unaligned: Int64) {
        let position = aligned(unaligned)
        guard
            let index = segments.indices.first(where: {
                segments[$0].start < position && position < segments[$0].end && segments[$0].offset <= position
            })
        else { return }
        let end = segments[index].end
        segments[index].end = position
        segments.append(Segment(start: position, end: end, offset: position))
        isHeld.append(false)
    }

    /// Hands the bytes of `range` out again (a piece that failed its hash): a segment that fetched some of them is cut
    /// where they begin, or rewound to its start when they begin there, and released; the bytes it fetched past
    /// `range` are fetched again too.
    public mutating func refetch(_ range: Range<Int64>) {
        for index in segments.indices {
            let segment = segments[index]
            guard segment.start < range.upperBound, segment.end > range.lowerBound,
                segment.offset > max(segment.start, range.lowerBound)
            else { continue }
            isHeld[index] = false
            if segment.start < range.lowerBound {
                segments[index].end = range.lowerBound
                segments[index].offset = range.lowerBound
                segments.append(Segment(start: range.lowerBound, end: segment.end, offset: range.lowerBound))
                isHeld.append(false)
            } else {
                segments[index].offset = segment.start
            }
        }
    }

    /// `position` moved back to a multiple of `alignment`.
    func aligned(_ position: Int64) -> Int64 { alignment > 1 ? position - position % alignment : position }

    /// Where the first split cuts segment `victim` into equal parts: nil unless it is the only unfinished segment,
    /// more than one part fits, and its holder has at least `minimumSize` bytes left before the first cut.
    private func plannedCuts(_ victim: Int) -> [Int64]? {
        guard pieces > 1, segments.indices.allSatisfy({ $0 == victim || segments[$0].isComplete }) else { return nil }
        let segment = segments[victim]
        let span = segment.end - segment.start
        let parts = Int64(min(pieces, Int(min(span / minimumSize, Int64(Int.max)))))
        guard parts > 1 else { return nil }
        // start + span * i / parts, without overflow.
        var cuts: [Int64] = []
        for i in 1..<parts {
            let cut = aligned(segment.start + span / parts * i + span % parts * i / parts)
            if cut > (cuts.last ?? segment.start), cut < segment.end { cuts.append(cut) }
        }
        guard let first = cuts.first, first - segment.offset >= minimumSize else { return nil }
        return cuts
    }

    /// Whether `take()` would find work for one more connection.
    public var hasWorkToTake: Bool {
        segments.indices.contains { !isHeld[$0] && !segments[$0].isComplete } || splitCandidate() != nil
    }

    /// Whether `take(first:speeds:)` would find work: a free segment, a planned split, or a steal of at least
    /// `minimumSteal` bytes.
    public func hasWorkToTake(minimumSteal: Int64) -> Bool {
        hasWorkToTake
            || segments.indices.contains {
                isHeld[$0] && segments[$0].remaining >= minimumSteal + Self.keptAtLeast(minimumSteal)
            }
    }

    /// What a steal leaves the holder at least: its bytes already on their way (64 KiB, less for small steals).
    static func keptAtLeast(_ minimumSteal: Int64) -> Int64 { min(64 << 10, minimumSteal) }

    /// The held segment with the most bytes left, when it can be halved with both halves at least `minimumSize`.
    private func splitCandidate() -> Int? {
        let held = segments.indices.filter { isHeld[$0] && segments[$0].remaining >= 2 * minimumSize }
        return held.max { segments[$0].remaining < segments[$1].remaining }
    }

    /// How many of `count` bytes arriving at `position` for segment `index` belong to it (the rest lie past its end,
    /// which a split may have moved), and advances it past them. Returns 0 when `position` is not the segment's
    /// offset.
    public mutating func claim(_ index: Int, at position: Int64, count: Int64) -> Int64 {
        let segment = segments[index]
        guard position == segment.offset else { return 0 }
        let granted = max(0, min(count, segment.end - position))
        segments[index].offset += granted
        return granted
    }

    /// The connection on segment `index` is gone; its bytes from `offset` on are not fetched after all (they were
    /// claimed but not written), and the segment is free for another connection.
    public mutating func release(_ index: Int, keepingUpTo offset: Int64? = nil) {
        if let offset {
            let segment = segments[index]
            segments[index].offset = min(max(offset, segment.start), segment.offset)
        }
        isHeld[index] = false
    }

    /// Moves segment `index`'s offset back to `offset` (bytes claimed past it were not written), keeping it held.
    public mutating func rewind(_ index: Int, to offset: Int64) {
        let segment = segments[index]
        segments[index].offset = min(max(offset, segment.start), segment.offset)
    }

    /// The segments with each offset replaced by `offsets[i]` (for storing what is durable rather than claimed).
    public func segments(withOffsets offsets: [Int64]) -> [Segment] {
        segments.indices.map { index in
            var segment = segments[index]
            segment.offset = min(max(offsets[index], segment.start), segment.end)
            return segment
        }
    }
}
