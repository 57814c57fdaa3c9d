import HaulCore
import Testing

@Suite("Segment map")
struct SegmentMapTests {
    /// Checks the map's invariants: the segments tile 0..<total with no gap and no overlap, and offsets lie inside.
    static func expectTiling(_ map: SegmentMap, sourceLocation: SourceLocation = #_sourceLocation) {
        var position: Int64 = 0
        for segment in map.segments.sorted(by: { $0.start < $1.start }) {
            #expect(segment.start == position, "gap or overlap at \(position)", sourceLocation: sourceLocation)
            #expect(segment.offset >= segment.start && segment.offset <= segment.end, sourceLocation: sourceLocation)
            position = segment.end
        }
        #expect(position == map.total, sourceLocation: sourceLocation)
    }

    struct Row: Sendable, CustomTestStringConvertible {
        var total: Int64
        var minimum: Int64
        var connections: Int
        /// The start of the segment each connection gets, in order.
        var starts: [Int64]
        var testDescription: String { "\(total) bytes, min \(minimum), \(connections) connections" }
    }

    static let rows: [Row] = [
        Row(total: 100, minimum: 10, connections: 1, starts: [0]),
        Row(total: 100, minimum: 10, connections: 2, starts: [0, 50]),
        Row(total: 100, minimum: 10, connections: 3, starts: [0, 50, 25]),
        Row(total: 100, minimum: 10, connections: 4, starts: [0, 50, 25, 75]),
        // 19 bytes cannot be halved into two of at least 10: only one connection.
        Row(total: 19, minimum: 10, connections: 2, starts: [0]),
        Row(total: 20, minimum: 10, connections: 2, starts: [0, 10]),
        // 0..<39 splits at 19, then 19..<39 at 29; 10 bytes are too few to split again.
        Row(total: 39, minimum: 10, connections: 4, starts: [0, 19, 29]),
    ]

    @Test("take and split, as a table", arguments: rows)
    func takeAndSplit(row: Row) {
        let (total, minimum, connections) = (row.total, row.minimum, row.connections)
        var map = SegmentMap(total: total, minimumSize: minimum)
        var taken: [Int] = []
        for _ in 0..<connections {
            guard let index = map.take() else { break }
            taken.append(index)
        }
        // Each connection's segment starts where it was split off; later splits only shorten it.
        #expect(taken.map { map.segments[$0].start } == row.starts)
        Self.expectTiling(map)
        for segment in map.segments where segment.end - segment.start < minimum {
            Issue.record("segment \(segment) is smaller than the minimum \(minimum)")
        }
    }

    @Test func theFirstSplitCutsTheFileIntoEqualPartsAndLaterConnectionsTakeThem() {
        var map = SegmentMap(total: 800, minimumSize: 10, pieces: 4)
        let first = map.take()!
        _ = map.claim(first, at: 0, count: 30)  // the first connection ran alone for a while
        let second = map.take()!
        // Cut at 200, 400 and 600 of the file, not of what is left: the first connection keeps 0..<200.
        #expect(map.segments.map { [$0.start, $0.end] } == [[0, 200], [200, 400], [400, 600], [600, 800]])
        #expect(map.segments[second].start == 200)
        #expect(map.isHeld == [true, true, false, false])
        // The next connections take the waiting parts; nothing is halved while one is free.
        #expect(map.take() == 2)
        #expect(map.take() == 3)
        #expect(map.segments.count == 4)
        Self.expectTiling(map)
    }

    @Test func aFirstConnectionAlreadyInTheSecondPartIsHalvedInstead() {
        var map = SegmentMap(total: 800, minimumSize: 10, pieces: 4)
        let first = map.take()!
        _ = map.claim(first, at: 0, count: 195)  // 5 bytes before the first cut: fewer than the minimum
        let second = map.take()!
        #expect(map.segments.count == 2)
        #expect(map.segments[second].start == 195 + 605 / 2)
        Self.expectTiling(map)
    }

    @Test func theFirstSplitMakesNoPartSmallerThanTheMinimum() {
        // 100 bytes with a minimum of 30: three parts, not eight.
        var map = SegmentMap(total: 100, minimumSize: 30, pieces: 8)
        _ = map.take()
        _ = map.take()
        #expect(map.segments.map { [$0.start, $0.end] } == [[0, 33], [33, 66], [66, 100]])
        Self.expectTiling(map)
    }

    @Test func aResumedDownloadPlansOverWhatIsLeft() {
        // 100 bytes held from an earlier single-connection run: the parts divide 100..<900.
        var map = SegmentMap(total: 900, minimumSize: 10, fetched: 100, pieces: 2)
        let first = map.take()!
        #expect(map.segments[first].start == 100)
        let second = map.take()!
        #expect(map.segments[second].start == 500 && map.segments[second].end == 900)
        Self.expectTiling(map)
    }

    @Test func onlyTheFirstSplitIsPlanned() {
        // Two unfinished segments (a restored map): a connection that needs work halves one, as before.
        let stored = [Segment(start: 0, end: 400, offset: 0), Segment(start: 400, end: 800, offset: 400)]
        var map = SegmentMap(restoring: stored, total: 800, minimumSize: 10, pieces: 8)!
        _ = map.take()
        _ = map.take()
        let third = map.take()!
        #expect(map.segments.count == 3)
        #expect(map.segments[third].start == 200)
        Self.expectTiling(map)
    }

    @Test func aFinishedConnectionTakesHalfOfTheLargestRemainingSegment() {
        var map = SegmentMap(total: 1000, minimumSize: 10)
        let first = map.take()!
        let second = map.take()!  // 500..<1000
        _ = map.claim(first, at: 0, count: 100)  // first has 400 left
        _ = map.claim(second, at: 500, count: 500)  // second is done
        map.release(second)
        // The second connection steals the back half of what the first has left: 100 + 400 / 2 = 300.
        let third = map.take()!
        #expect(map.segments[third].start == 300 && map.segments[third].end == 500)
        #expect(map.segments[first].end == 300)
        Self.expectTiling(map)
    }

    @Test func freeSegmentsAreTakenBeforeAnyIsSplitTheLargestFirst() {
        let stored = [
            Segment(start: 0, end: 40, offset: 40),
            Segment(start: 40, end: 70, offset: 45),
            Segment(start: 70, end: 100, offset: 71),
        ]
        var map = SegmentMap(restoring: stored, total: 100, minimumSize: 5)!
        #expect(map.take() == 2)  // 29 left
        #expect(map.take() == 1)  // 25 left
        #expect(map.segments.count == 3)
        // Now only a split can give work: the back half of the 29 bytes left in 71..<100.
        #expect(map.take() == 3)
        #expect(map.segments[3].start == 71 + 14 && map.segments[3].end == 100)
        Self.expectTiling(map)
    }

    @Test(
        "restoring rejects maps that do not tile the file",
        arguments: [
            [Segment(start: 0, end: 50, offset: 50), Segment(start: 60, end: 100, offset: 60)],  // gap
            [Segment(start: 0, end: 60, offset: 50), Segment(start: 50, end: 100, offset: 60)],  // overlap
            [Segment(start: 0, end: 50, offset: 51), Segment(start: 50, end: 100, offset: 60)],  // offset outside
            [Segment(start: 0, end: 50, offset: 50)],  // short of the total
            [],
        ])
    func restoringRejects(segments: [Segment]) {
        #expect(SegmentMap(restoring: segments, total: 100, minimumSize: 10) == nil)
    }

    @Test func claimsStopAtAMovedEnd() {
        var map = SegmentMap(total: 100, minimumSize: 10)
        let first = map.take()!
        #expect(map.claim(first, at: 0, count: 20) == 20)
        let second = map.take()!  // splits 20..<100 at 60
        #expect(map.segments[second].start == 60)
        #expect(map.claim(first, at: 20, count: 50) == 40)  // only up to 60
        #expect(map.claim(first, at: 60, count: 1) == 0)
        // A claim at the wrong position is refused.
        #expect(map.claim(second, at: 61, count: 5) == 0)
    }

    @Test func releasingHandsBackClaimedButUnwrittenBytes() {
        var map = SegmentMap(total: 100, minimumSize: 10)
        let first = map.take()!
        _ = map.claim(first, at: 0, count: 30)
        map.release(first, keepingUpTo: 10)
        #expect(map.segments[first].offset == 10)
        #expect(map.take() == first)
    }

    /// Many random interleavings of claims, completions, failures and new connections: the map always tiles the file,
    /// no byte is claimed twice unless a connection failed before writing it, no split makes a segment smaller than
    /// the minimum, and every byte ends up claimed.
    @Test(arguments: Array(UInt64(1)...UInt64(40)))
    func randomInterleavings(seed: UInt64) {
        var random = seed &* 6_364_136_223_846_793_005 &+ 1
        func next(_ bound: Int) -> Int {
            random = random &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((random >> 33) % UInt64(bound))
        }
        let total = Int64(1000 + next(100_000))
        let minimum = Int64(1 + next(5000))
        var map = SegmentMap(total: total, minimumSize: minimum, pieces: 1 + next(16))
        var claimedAt = [Int](repeating: 0, count: Int(total))
        var active: [Int] = []
        let connections = 1 + next(8)
        var steps = 0
        while !map.isComplete {
            steps += 1
            #expect(steps < 100_000, "no progress")
            if steps >= 100_000 { break }
            if active.count < connections {
                let count = map.segments.count
                if let index = map.take() {
                    if map.segments.count > count {
                        // A split: both halves keep at least the minimum.
                        let new = map.segments[index]
                        let victim = map.segments.first { $0.end == new.start }!
                        #expect(new.end - new.start >= minimum)
                        #expect(victim.end - victim.offset >= minimum)
                    }
                    active.append(index)
                    continue
                }
            }
            guard !active.isEmpty else { break }
            let pick = next(active.count)
            let index = active[pick]
            let segment = map.segments[index]
            switch next(10) {
            case 0:
                // The connection fails before writing what it claimed last: nothing of it counts.
                map.release(index)
                active.remove(at: pick)
            default:
                let count = Int64(1 + next(3000))
                let granted = map.claim(index, at: segment.offset, count: count)
                for byte in segment.offset..<(segment.offset + granted) { claimedAt[Int(byte)] += 1 }
                if map.segments[index].isComplete {
                    map.release(index)
                    active.remove(at: pick)
                }
            }
            Self.expectTiling(map)
        }
        #expect(map.isComplete)
        #expect(claimedAt.allSatisfy { $0 == 1 }, "every byte claimed exactly once")
        #expect(map.fetchedBytes == total)
    }

    @Test(
        "with an alignment, every cut falls on a multiple of it: planned parts, halves, steals and the separated tail")
    func aligned() {
        var map = SegmentMap(total: 1000, minimumSize: 50, pieces: 4)
        map.alignment = 64
        map.separate(from: 990)
        #expect(map.segments.map(\.start) == [0, 960])
        _ = map.take()
        _ = map.take()
        _ = map.take()
        let speeds = SegmentMap.Speeds(holder: { _ in 10 }, taker: 30, minimumSteal: 50)
        while map.take(first: nil, speeds: speeds) != nil {}
        Self.expectTiling(map)
        #expect(map.segments.count > 3)
        #expect(map.segments.allSatisfy { $0.start % 64 == 0 }, "\(map.segments)")
        // Bytes handed out again (a piece that failed) start at the piece; a segment that starts there is rewound.
        var one = SegmentMap(total: 1000, minimumSize: 50)
        _ = one.take()
        _ = one.claim(0, at: 0, count: 500)
        one.refetch(128..<192)
        Self.expectTiling(one)
        #expect(
            one.segments == [Segment(start: 0, end: 128, offset: 128), Segment(start: 128, end: 1000, offset: 128)])
        #expect(one.isHeld == [false, false])
        one.refetch(128..<192)
        #expect(one.segments.count == 2, "nothing fetched there: nothing changes")
        _ = one.claim(1, at: 128, count: 100)
        one.refetch(128..<192)
        #expect(one.segments[1] == Segment(start: 128, end: 1000, offset: 128))
    }
}
