import Foundation
import PropertyBased
import Testing

@testable import HaulCore

/// One download played out with no socket, no file and no clock: an honest server whose file may change and which
/// may stop honouring ranges, a part file whose every byte remembers the version it came from, a store of what was
/// checkpointed, and faults chosen by the property test (breaks, 503s, idle connections, pauses, `kill -9`). The
/// world performs the machine's actions as the runner does and checks after every step what must always hold.
struct World {
    // The server.
    let total: Int64
    let strongValidator: Bool
    var version = 1
    var honoursRanges = true
    var serverChanges = 0

    // The disk and the store.
    /// The part file: for each byte, the version it came from (0: a hole); nil when there is no part file.
    var part: [Int]? = nil
    /// What the last checkpoint synced.
    var synced: [Int]? = nil
    var storedOffset: Int64 = 0
    var storedSegments: [Segment]? = nil
    var storedFacts: RemoteFacts? = nil
    /// Bytes written since the part file last lost them (a truncate, a kill): none may be written twice.
    var writtenOnce: [Bool]

    // The runner.
    var machine: TransferMachine
    let settings: TransferMachine.Settings
    var now: Duration = .zero
    enum Link: Equatable {
        case requested(RangeRequest)
        case answered(version: Int, start: Int64, end: Int64)
        case streaming(version: Int, position: Int64, end: Int64)
        /// A chunk is claimed and being written (the runner's write between `claim` and `wrote`).
        case writing(version: Int, position: Int64, end: Int64, grant: TransferMachine.Grant, count: Int)
        case waiting(until: Duration)
    }
    var links: [Int: Link] = [:]
    var pendingCheckpoints: [TransferMachine.Checkpoint] = []
    var finished = false
    var failure: DownloadError?
    var restarts = 0
    var violation: String?

    init(total: Int64, strongValidator: Bool, settings: TransferMachine.Settings) {
        self.total = total
        self.strongValidator = strongValidator
        self.settings = settings
        writtenOnce = Array(repeating: false, count: Int(total))
        machine = TransferMachine(settings: settings)
    }

    var isOver: Bool { finished || failure != nil || violation != nil }

    mutating func violated(_ text: String) {
        if violation == nil { violation = text }
    }

    // MARK: Running

    mutating func begin() {
        let start = TransferMachine.Start(
            partLength: part.map { Int64($0.count) }, durableOffset: storedOffset, segments: storedSegments,
            isPartVerified: true, facts: storedFacts)
        let next = machine.start(start, now: now)
        perform(next)
    }

    mutating func perform(_ actions: [TransferMachine.Action]) {
        for action in actions where violation == nil { perform(action) }
        check()
    }

    mutating func perform(_ action: TransferMachine.Action) {
        switch action {
        case .send(let id, let request):
            links[id] = .requested(request)
        case .stream(let id, let body):
            guard case .answered(let version, let start, let end) = links[id] else {
                return violated("stream on \(id) without an answer")
            }
            if body.start != start { violated("body planned at \(body.start) but the answer starts at \(start)") }
            if let planned = body.end, planned != end { violated("body planned to end at \(planned), not \(end)") }
            if part == nil { part = [] }
            links[id] = .streaming(version: version, position: start, end: end)
        case .discard(let id), .close(let id):
            links[id] = nil
        case .truncate(let length):
            // The runner stores first what the part file will hold: the machine's facts, no segments.
            storedOffset = min(storedOffset, length)
            storedSegments = nil
            storedFacts = machine.remoteFacts
            if part == nil { part = [] }
            part = Array(part!.prefix(Int(length)))
            synced = synced.map { Array($0.prefix(Int(length))) }
            for index in Int(min(length, total))..<Int(total) { writtenOnce[index] = false }
        case .checkpoint(let mark):
            store(mark, "checkpoint")
            pendingCheckpoints.append(mark)
        case .wait(let id, let delay):
            links[id] = .waiting(until: now + delay)
        case .report(let report):
            switch report {
            case .factsLearned(let facts): storedFacts = facts
            case .restarted: restarts += 1
            default: break
            }
        case .progress(let progress):
            if progress.receivedBytes < 0 || progress.receivedBytes > total {
                violated("progress \(progress.receivedBytes) of \(total)")
            }
        case .finalize(let length):
            if length != total { violated("finalised \(length) bytes of \(total)") }
            let bytes = part ?? []
            if bytes.count < Int(length) { violated("finalised with \(bytes.count) of \(length) bytes on disk") }
            let versions = Set(bytes.prefix(Int(length)))
            if versions.count != 1 || versions.contains(0) {
                violated("finalised a file of versions \(versions.sorted()) (0: a hole)")
            }
            finished = true
            let next = machine.finalized(.completed, now: now)
            perform(next)
        case .checkPiece:
            violated("a piece check without piece hashes")
        case .end(let ending):
            links.removeAll()
            switch ending {
            case .completed: finished = true
            case .failed(let error, let fate):
                failure = error
                settle(fate, "failure")
            case .stopped(let fate): settle(fate, "stop")
            }
        }
    }

    /// What the runner does with the part file of a run that ends without completing.
    mutating func settle(_ fate: TransferMachine.PartFate, _ what: String) {
        switch fate {
        case .keep(let mark): store(mark, what)
        case .leave, .handBack: break
        case .discard:
            part = nil
            synced = nil
        }
    }

    /// The runner syncs, then stores `mark`: every byte it counts must be on disk, of one version.
    mutating func store(_ mark: TransferMachine.Checkpoint, _ what: String) {
        synced = part
        let bytes = part ?? []
        func covered(_ range: Range<Int64>) {
            guard !range.isEmpty else { return }
            if range.upperBound > Int64(bytes.count) || bytes[Int(range.lowerBound)..<Int(range.upperBound)].contains(0)
            {
                violated("\(what) counts bytes \(range) that are not on disk (\(bytes.count) bytes)")
            }
        }
        switch mark {
        case .offset(let offset):
            covered(0..<offset)
            storedOffset = offset
            storedSegments = nil
        case .segments(let segments, let count):
            var position: Int64 = 0
            for segment in segments.sorted(by: { $0.start < $1.start }) {
                if segment.start != position { violated("\(what) segments leave a gap or overlap at \(position)") }
                covered(segment.start..<segment.offset)
                position = segment.end
            }
            if position != total { violated("\(what) segments end at \(position), not \(total)") }
            if count != segments.reduce(0, { $0 + $1.offset - $1.start }) { violated("\(what) count \(count) is off") }
            storedSegments = segments
            storedOffset = count
        }
        if countedVersions.subtracting([0]).count > 1 { violated("the bytes counted at a \(what) mix versions") }
    }

    /// The versions of the bytes the machine counts as written (and so the store, which holds no more than them).
    /// Bytes past them may be an older version's, landed by a write in flight when its connection closed: they are
    /// never counted, are written over before they are, and are cut at the end.
    var countedVersions: Set<Int> {
        let bytes = part ?? []
        var ranges: [Range<Int>] = []
        switch machine.mode {
        case .single: ranges.append(0..<Int(machine.written))
        case .segmented(let map):
            for (index, segment) in map.segments.enumerated() where index < machine.segmentWritten.count {
                ranges.append(Int(segment.start)..<Int(machine.segmentWritten[index]))
            }
        }
        switch storedSegments {
        case nil: ranges.append(0..<Int(storedOffset))
        case let segments?: ranges += segments.map { Int($0.start)..<Int($0.offset) }
        }
        var versions = Set<Int>()
        for range in ranges where !range.isEmpty {
            versions.formUnion(bytes[range.clamped(to: 0..<bytes.count)])
        }
        return versions
    }

    /// What must hold after every step.
    mutating func check() {
        guard violation == nil else { return }
        if let part {
            if part.count > Int(total) { violated("the part file grew past the total: \(part.count) > \(total)") }
            if countedVersions.subtracting([0]).count > 1 { violated("the bytes counted mix versions") }
        }
        switch machine.mode {
        case .single:
            if machine.phase == .transferring, machine.written > 0 {
                let bytes = part ?? []
                if Int(machine.written) > bytes.count || bytes.prefix(Int(machine.written)).contains(0) {
                    violated("\(machine.written) bytes counted but not all on disk")
                }
            }
        case .segmented(let map):
            if map.total != total { violated("the map's total is \(map.total)") }
            var position: Int64 = 0
            for (index, segment) in map.segments.enumerated().sorted(by: { $0.element.start < $1.element.start }) {
                if segment.start != position { violated("the segment map has a gap or an overlap at \(position)") }
                if segment.offset < segment.start || segment.offset > segment.end {
                    violated("segment \(index) has its offset outside it: \(segment)")
                }
                guard index < machine.segmentWritten.count else {
                    violated("segment \(index) has no written count")
                    continue
                }
                let written = machine.segmentWritten[index]
                if written < segment.start || written > segment.offset {
                    violated("segment \(index) has \(written) written but \(segment.offset) claimed")
                }
                let bytes = part ?? []
                if written > segment.start,
                    Int(written) > bytes.count || bytes[Int(segment.start)..<Int(written)].contains(0)
                {
                    violated("segment \(index) counts bytes up to \(written) that are not on disk")
                }
                position = segment.end
            }
            if position != total { violated("the segment map ends at \(position), not \(total)") }
        }
        if machine.heldBytes > total { violated("\(machine.heldBytes) bytes held of \(total)") }
    }

    // MARK: The server

    var etag: String? { strongValidator ? "\"v\(version)\"" : nil }

    func head(for request: RangeRequest) -> (ResponseHead, start: Int64, end: Int64) {
        var headers: [(name: String, value: String)] = [("Date", "Tue, 02 Jan 2024 00:00:00 GMT")]
        if let etag { headers.append(("ETag", etag)) }
        if honoursRanges { headers.append(("Accept-Ranges", "bytes")) }
        if let first = request.rangeStart, honoursRanges, request.ifRange == nil || request.ifRange == etag {
            if first >= total {
                headers.append(("Content-Range", "bytes */\(total)"))
                return (ResponseHead(status: 416, headers: headers), first, first)
            }
            let end = min(request.end ?? total, total)
            headers += [("Content-Range", "bytes \(first)-\(end - 1)/\(total)"), ("Content-Length", "\(end - first)")]
            return (ResponseHead(status: 206, headers: headers), first, end)
        }
        headers.append(("Content-Length", "\(total)"))
        return (ResponseHead(status: 200, headers: headers), 0, total)
    }

    // MARK: Steps

    func ids(_ matching: (Link) -> Bool) -> [Int] { links.filter { matching($0.value) }.keys.sorted() }

    mutating func answer(_ pick: Int, status: Int? = nil) {
        let waiting = ids { if case .requested = $0 { true } else { false } }
        guard !waiting.isEmpty else { return }
        let id = waiting[pick % waiting.count]
        guard case .requested(let request) = links[id] else { return }
        if let status {
            links[id] = nil
            let next = machine.responseReceived(
                id, ResponseHead(status: status, headers: [("Retry-After", "1")]), now: now)
            perform(next)
            return
        }
        let (head, start, end) = head(for: request)
        links[id] = .answered(version: version, start: start, end: end)
        let next = machine.responseReceived(id, head, now: now)
        perform(next)
        if case .answered = links[id] { links[id] = nil }  // not taken: discarded with no action
    }

    /// A chunk of `size` bytes arrives on a streaming connection: claimed, compared and written, then `wrote`, in
    /// one step of the loop, as the runner does (no other event comes between them).
    mutating func deliver(_ pick: Int, size: Int) {
        let streaming = ids { if case .streaming = $0 { true } else { false } }
        guard !streaming.isEmpty else { return }
        let id = streaming[pick % streaming.count]
        guard case .streaming(let version, let position, let end) = links[id] else { return }
        let count = Int(min(Int64(size), end - position))
        if count == 0 {
            links[id] = nil
            let next = machine.bodyEnded(id, now: now)
            perform(next)
            return
        }
        let grant = machine.claim(id, count: count)
        if grant.offset != position { return violated("claim at \(grant.offset) but the body is at \(position)") }
        if grant.compare + grant.write > count { return violated("granted more than arrived") }
        if grant.compare > 0 {
            let bytes = part ?? []
            let range = Int(grant.offset)..<Int(grant.offset) + grant.compare
            if range.upperBound > bytes.count || bytes[range].contains(where: { $0 != version }) {
                links[id] = nil
                let next = machine.overlapDiffered(id, now: now)
                perform(next)
                return
            }
        }
        links[id] = .writing(version: version, position: position, end: end, grant: grant, count: count)
        finishWrite(id)
    }

    /// The chunk lands: `wrote`, then the end of the body when the chunk was its last.
    mutating func finishWrite(_ id: Int) {
        guard case .writing(let version, let position, let end, let grant, let count) = links[id] else { return }
        land(grant, version: version, counted: true)
        links[id] = .streaming(version: version, position: position + Int64(count), end: end)
        let next = machine.wrote(id, now: now)
        perform(next)
        guard links[id] != nil else { return }
        if grant.overrun {
            links[id] = nil
            let failed = machine.connectionFailed(
                id, DownloadError(.bodyTooLong, "overrun", isRetryable: true), now: now)
            perform(failed)
        } else if grant.stop || position + Int64(count) == end {
            links[id] = nil
            let ended = machine.bodyEnded(id, now: now)
            perform(ended)
        }
    }

    /// Puts the granted bytes of a chunk on disk; `counted` ones must not have been written since the last loss.
    mutating func land(_ grant: TransferMachine.Grant, version: Int, counted: Bool) {
        let from = Int(grant.offset) + grant.compare
        guard grant.write > 0 else { return }
        if from + grant.write > Int(total) { return violated("a write past the total: \(from + grant.write)") }
        if part == nil { part = [] }
        if part!.count < from + grant.write { part! += Array(repeating: 0, count: from + grant.write - part!.count) }
        for index in from..<from + grant.write {
            if counted {
                if writtenOnce[index] { violated("byte \(index) written twice") }
                writtenOnce[index] = true
            }
            part![index] = version
        }
    }

    mutating func breakLink(_ pick: Int, refused: Bool) {
        let open = ids {
            switch $0 {
            case .waiting, .writing: false
            default: true
            }
        }
        guard !open.isEmpty else { return }
        let id = open[pick % open.count]
        let requested = if case .requested = links[id] { true } else { false }
        links[id] = nil
        let error =
            refused && requested
            ? DownloadError(.connectionFailed, "connection refused")
            : DownloadError(.connectionLost, "connection reset", isRetryable: true)
        let next = machine.connectionFailed(id, error, now: now, jitter: 0.5)
        perform(next)
    }

    mutating func endWait(_ pick: Int) {
        let waiting = ids { if case .waiting = $0 { true } else { false } }
        guard !waiting.isEmpty else { return }
        let id = waiting[pick % waiting.count]
        if case .waiting(let until) = links[id] { now = max(now, until) }
        links[id] = nil
        let next = machine.waitEnded(id, now: now)
        perform(next)
    }

    mutating func tick(_ milliseconds: Int) {
        now += .milliseconds(milliseconds)
        let next = machine.tick(now: now, jitter: 0.5)
        perform(next)
    }

    mutating func completeCheckpoint() {
        guard !pendingCheckpoints.isEmpty else { return }
        let next = machine.checkpointed(pendingCheckpoints.removeFirst(), now: now)
        perform(next)
    }

    /// A pause and a resume: everything written is stored exactly, so nothing is fetched twice.
    mutating func pauseAndResume() {
        let next = machine.stop()
        perform(next)
        guard violation == nil else { return }
        relaunch()
    }

    /// `kill -9` and a rerun: the store has the last checkpoint; the part file has what was synced, or more.
    mutating func kill(keepingUnsynced: Bool) {
        if !keepingUnsynced, part != nil {
            part = synced ?? []
        }
        writtenOnce = Array(repeating: false, count: Int(total))
        relaunch()
    }

    private mutating func relaunch() {
        links.removeAll()
        pendingCheckpoints.removeAll()
        machine = TransferMachine(settings: settings)
        begin()
    }

    /// The faults are over: an honest network until the download ends (bounded, so a machine that stops asking
    /// for anything fails the property instead of hanging).
    mutating func drain() {
        var steps = 0
        while !isOver, steps < 200_000 {
            steps += 1
            if !pendingCheckpoints.isEmpty {
                completeCheckpoint()
            } else if !ids({ if case .requested = $0 { true } else { false } }).isEmpty {
                answer(0)
            } else if !ids({ if case .streaming = $0 { true } else { false } }).isEmpty {
                deliver(0, size: 97)
            } else if !ids({ if case .waiting = $0 { true } else { false } }).isEmpty {
                endWait(0)
            } else {
                tick(100)
                if links.isEmpty, machine.phase == .transferring, machine.connections.isEmpty {
                    violated("the machine is transferring with nothing open and nothing asked")
                }
            }
        }
        if !isOver { violated("the download did not end") }
    }

    /// Plays one step of the fault script.
    mutating func step(_ code: Int, budget: inout (changes: Int, pauses: Int, kills: Int)) {
        let argument = code / 16
        switch code % 16 {
        case 0, 1, 2: deliver(argument, size: 1 + argument % 211)
        case 3, 4: deliver(argument, size: 1 + argument % 1021)
        case 5, 6: answer(argument)
        case 7: tick(argument % 400)
        case 8: completeCheckpoint()
        case 9: endWait(argument)
        case 10: breakLink(argument, refused: argument % 3 == 0)
        case 11: answer(argument, status: argument % 2 == 0 ? 503 : 429)
        case 12:
            guard budget.changes > 0 else { return }
            budget.changes -= 1
            if argument % 3 == 0 { honoursRanges.toggle() } else { version += 1 }
        case 13:
            guard budget.pauses > 0 else { return }
            budget.pauses -= 1
            pauseAndResume()
        case 14:
            guard budget.kills > 0 else { return }
            budget.kills -= 1
            kill(keepingUnsynced: argument % 2 == 0)
        default: tick(argument % 3000)
        }
    }
}

/// `default` cases per property, times `HAUL_PROPERTY_SCALE` when it is set (a deeper search: `HAUL_PROPERTY_SCALE=50
/// swift test --filter Property`).
func cases(_ default: Int) -> Int {
    let scale = ProcessInfo.processInfo.environment["HAUL_PROPERTY_SCALE"].flatMap(Int.init) ?? 1
    return `default` * max(1, scale)
}

@Suite("The transfer machine, over random interleavings")
struct TransferMachinePropertyTests {
    static func settings(connections: Int, split: Int64) -> TransferMachine.Settings {
        TransferMachine.Settings(
            maxConnections: connections, minimumSplitSize: split, overlapLength: 16,
            retryPolicy: RetryPolicy(maximumAttemptsWithoutProgress: 1000, initialDelay: .milliseconds(100)),
            idleTimeout: .seconds(2), checkpointBytes: 300, checkpointInterval: .milliseconds(500),
            progressInterval: .milliseconds(50), rampWindow: .milliseconds(100))
    }

    /// A restart in a row after the third is a failure by design (a server that changes under every answer); with
    /// at most three server changes a script can still cause one by changing the file between answers.
    static func allowed(_ failure: DownloadError) -> Bool {
        failure.message.contains("restarts in a row")
    }

    /// Completions, breaks, refusals, 503s, idle timeouts, splits, file changes, ignored ranges, pauses and kills in
    /// any order: the segments tile the file with no gap and no overlap, nothing is written past the total or twice
    /// between two losses, every checkpoint counts only bytes on disk (the durable offset never ahead of the synced
    /// bytes), versions never mix, and the download ends with the whole file of one version.
    @Test("any interleaving of answers, bytes, breaks, splits, changes, pauses and kills keeps every invariant")
    func randomInterleavings() async {
        await propertyCheck(
            count: cases(400), input: Gen.int(in: 1...3000), Gen.int(in: 1...5), Gen.int(in: 20...400), Gen.bool,
            Gen.int(in: 0...Int(UInt32.max)).array(of: 0...300)
        ) { total, connections, split, strong, script in
            var world = World(
                total: Int64(total), strongValidator: strong,
                settings: Self.settings(connections: connections, split: Int64(split)))
            world.begin()
            var budget = (changes: 3, pauses: 3, kills: 3)
            for code in script {
                if world.isOver { break }
                world.step(code, budget: &budget)
            }
            world.drain()
            #expect(world.violation == nil, "\(world.violation ?? "")")
            let (finished, failure) = (world.finished, world.failure)
            if let failure {
                #expect(Self.allowed(failure), "failed: \(failure.message)")
            } else {
                #expect(finished, "the download neither finished nor failed")
            }
        }
    }

    /// Interleavings the search once found to break a rule, replayed every run.
    static let found: [(total: Int, connections: Int, split: Int, strong: Bool, script: [Int])] = [
        // A write in flight lands old bytes after its idle connection closed and the file changed: only the
        // counted bytes must be of one version (the stale ones are written over, or cut at the end).
        (98, 1, 20, false, [1_699_401_429, 717_224_371, 1_690_006_399, 580_865_692, 744_860_223]),
        // The ramp retired one of two connections, then the other finished its segment and closed: the retiring
        // one was the last and must stay, not leave its segment's last byte to no one.
        (
            430, 2, 50, true,
            [
                1_176_971_445, 254_392_663, 1_750_326_992, 855_547_695, 0, 1_734_972_741, 2_493_851_728, 20_438_447,
                195_379_119,
            ]
        ),
    ]

    @Test("interleavings that once broke a rule", arguments: 0..<found.count)
    func foundInterleavings(_ index: Int) {
        let (total, connections, split, strong, script) = Self.found[index]
        var world = World(
            total: Int64(total), strongValidator: strong,
            settings: Self.settings(connections: connections, split: Int64(split)))
        world.begin()
        var budget = (changes: 3, pauses: 3, kills: 3)
        for code in script where !world.isOver { world.step(code, budget: &budget) }
        world.drain()
        let (violation, finished) = (world.violation, world.finished)
        #expect(violation == nil && finished, "\(violation ?? "not finished")")
    }

    @Test("with no fault at all, every byte is fetched exactly once and no restart happens")
    func honestNetwork() async {
        await propertyCheck(
            count: cases(200), input: Gen.int(in: 1...5000), Gen.int(in: 1...8), Gen.int(in: 20...400), Gen.bool
        ) { total, connections, split, strong in
            var world = World(
                total: Int64(total), strongValidator: strong,
                settings: Self.settings(connections: connections, split: Int64(split)))
            world.begin()
            world.drain()
            #expect(world.violation == nil, "\(world.violation ?? "")")
            let (finished, failed, restarts) = (world.finished, world.failure != nil, world.restarts)
            let everyByte = world.writtenOnce.allSatisfy { $0 }
            #expect(finished && !failed && restarts == 0 && everyByte)
        }
    }
}

@Suite("The segment map, over random operations")
struct SegmentMapPropertyTests {
    /// Take, claim, release, rewind in any order: the segments tile 0..<total, offsets stay inside their segments,
    /// claims never pass a segment's end, a taken segment was free and unfinished, and the work left always finishes.
    @Test("take, claim, release and rewind in any order: no gap, no overlap, no byte past a segment's end")
    func randomOperations() async {
        await propertyCheck(
            count: cases(500), input: Gen.int(in: 1...100_000), Gen.int(in: 1...5000), Gen.int(in: 1...16),
            Gen.int(in: 0...Int(UInt32.max)).array(of: 0...200)
        ) { total, minimum, pieces, script in
            var map = SegmentMap(total: Int64(total), minimumSize: Int64(minimum), pieces: pieces)
            var held: Set<Int> = []
            var fetched: Int64 = 0
            for code in script {
                let argument = code / 4
                switch code % 4 {
                case 0:
                    let before = map
                    if let index = map.take() {
                        #expect(!held.contains(index), "took a held segment")
                        if index < before.segments.count {
                            #expect(!before.segments[index].isComplete, "took a finished segment")
                        }
                        held.insert(index)
                    } else {
                        #expect(!before.hasWorkToTake, "no work though hasWorkToTake said there was")
                    }
                case 1:
                    guard !held.isEmpty else { continue }
                    let index = held.sorted()[argument % held.count]
                    let segment = map.segments[index]
                    let count = Int64(argument % 7000)
                    let granted = map.claim(index, at: segment.offset, count: count)
                    #expect(granted >= 0 && granted <= count && segment.offset + granted <= segment.end)
                    #expect(map.claim(index, at: segment.offset + granted + 1, count: 1) == 0, "a claim out of order")
                    fetched += granted
                case 2:
                    guard !held.isEmpty else { continue }
                    let index = held.sorted()[argument % held.count]
                    let segment = map.segments[index]
                    let keep =
                        argument % 2 == 0 ? nil : segment.start + Int64(argument) % (segment.offset - segment.start + 1)
                    map.release(index, keepingUpTo: keep)
                    fetched -= segment.offset - map.segments[index].offset
                    held.remove(index)
                default:
                    guard !held.isEmpty else { continue }
                    let index = held.sorted()[argument % held.count]
                    let segment = map.segments[index]
                    let to = segment.start + Int64(argument) % (segment.offset - segment.start + 1)
                    map.rewind(index, to: to)
                    fetched -= segment.offset - map.segments[index].offset
                }
                var position: Int64 = 0
                for segment in map.segments.sorted(by: { $0.start < $1.start }) {
                    #expect(segment.start == position, "a gap or an overlap at \(position)")
                    #expect(
                        segment.start <= segment.offset && segment.offset <= segment.end && segment.start < segment.end)
                    position = segment.end
                }
                #expect(position == Int64(total))
                #expect(map.fetchedBytes == fetched, "bytes claimed are all counted")
                #expect(map.isHeld.indices.filter { map.isHeld[$0] } == held.sorted())
            }
            // Whatever happened, connections taking and claiming finish the file.
            for index in held { map.release(index) }
            var rounds = 0
            while let index = map.take(), rounds < 100_000 {
                rounds += 1
                _ = map.claim(index, at: map.segments[index].offset, count: map.segments[index].remaining)
                map.release(index)
            }
            #expect(map.isComplete && map.fetchedBytes == Int64(total))
        }
    }
}
