/// The rules of piece hashes (a Metalink's `<pieces>`): each piece is checked as soon as its last byte is written,
/// and the file is finished only once every piece matched.
///
/// The runner hashes a piece off the loop (`checkPiece`) and tells the result with the check's ticket, so a result
/// for bytes written again since is ignored. A piece that does not match is fetched again: the servers that sent any
/// of its bytes are dropped when another trusted server can send it, and with no other server the same one is asked
/// again, twice at most, before the download fails. Bytes held from an earlier run are checked when the run starts.
extension TransferMachine {
    /// Where one piece stands.
    enum PieceCheck: Sendable, Equatable {
        case unchecked
        /// A check is out with this ticket.
        case checking(UInt64)
        case verified
    }

    /// One piece's state, what sent its bytes, and how often it failed.
    struct Piece: Sendable, Equatable {
        var check = PieceCheck.unchecked
        var writers: Set<Int> = []
        var failures = 0
    }

    var hasPieces: Bool { settings.pieceLength != nil }

    /// The pieces of a file of `total` bytes, made once the length is known.
    mutating func preparePieces(total: Int64) {
        guard let length = settings.pieceLength, length > 0 else { return }
        let count = Int((total + length - 1) / length)
        if pieces.count != count { pieces = Array(repeating: Piece(), count: count) }
    }

    func pieceRange(_ index: Int, total: Int64) -> Range<Int64> {
        let length = settings.pieceLength ?? total
        return Int64(index) * length..<min(Int64(index + 1) * length, total)
    }

    /// Whether every byte of `range` is written.
    func isWritten(_ range: Range<Int64>) -> Bool {
        switch mode {
        case .single: return written >= range.upperBound
        case .segmented(let map):
            return zip(map.segments, segmentWritten).allSatisfy { segment, written in
                segment.end <= range.lowerBound || segment.start >= range.upperBound
                    || written >= min(range.upperBound, segment.end)
            }
        }
    }

    /// The checks due now that `range` is written by `source`.
    mutating func piecesWritten(_ range: Range<Int64>, by source: Int) -> [Action] {
        guard let length = settings.pieceLength, let total = totalBytes, !range.isEmpty else { return [] }
        preparePieces(total: total)
        let first = Int(range.lowerBound / length)
        let last = min(Int((range.upperBound - 1) / length), pieces.count - 1)
        guard first <= last else { return [] }
        var actions: [Action] = []
        for index in first...last {
            pieces[index].writers.insert(source)
            actions += checkIfWritten(index, total: total)
        }
        return actions
    }

    /// A check of piece `index` when every byte of it is written and none is out.
    mutating func checkIfWritten(_ index: Int, total: Int64) -> [Action] {
        guard pieces[index].check == .unchecked else { return [] }
        let range = pieceRange(index, total: total)
        guard isWritten(range) else { return [] }
        pieceTicket += 1
        pieces[index].check = .checking(pieceTicket)
        return [.checkPiece(index: index, range: range, ticket: pieceTicket)]
    }

    /// Checks of every piece held now (at the start of a run, or before finishing).
    mutating func checkHeldPieces() -> [Action] {
        guard hasPieces, let total = totalBytes else { return [] }
        preparePieces(total: total)
        return pieces.indices.flatMap { checkIfWritten($0, total: total) }
    }

    /// Every byte is written: the file is finished once every piece matched; until then the run waits for the checks.
    mutating func finishing(total: Int64) -> [Action] {
        guard hasPieces else {
            phase = .finalizing
            return [.finalize(total: total)]
        }
        preparePieces(total: total)
        let checks = checkHeldPieces()
        if pieces.allSatisfy({ $0.check == .verified }) {
            phase = .finalizing
            return checks + [.finalize(total: total)]
        }
        awaitingPieces = total
        return checks
    }

    /// The runner hashed piece `index` for the check `ticket`: whether it matched.
    public mutating func pieceChecked(_ index: Int, ticket: UInt64, matches: Bool, now: Duration) -> [Action] {
        guard phase == .transferring, pieces.indices.contains(index), pieces[index].check == .checking(ticket),
            let total = totalBytes
        else { return [] }
        if matches {
            pieces[index].check = .verified
            if let waiting = awaitingPieces, pieces.allSatisfy({ $0.check == .verified }) {
                awaitingPieces = nil
                phase = .finalizing
                return [.finalize(total: waiting)]
            }
            return []
        }
        awaitingPieces = nil
        let range = pieceRange(index, total: total)
        let writers = pieces[index].writers
        pieces[index].check = .unchecked
        pieces[index].writers = []
        pieces[index].failures += 1
        let reason = "piece \(index) (bytes \(range.lowerBound)-\(range.upperBound - 1)) does not match its hash"
        var actions: [Action] = []
        let others = isMirrored ? sources.indices.filter { isTrusted($0) && !writers.contains($0) } : []
        if !others.isEmpty {
            for source in writers.sorted() where sources[source].status.state != .dropped {
                actions += drop(source, reason: "it sent \(reason)", now: now)
                guard phase == .transferring else { return actions }
            }
        } else if pieces[index].failures > 2 {
            let error = DownloadError(
                .checksumMismatch, "\(reason), fetched \(pieces[index].failures) times")
            return actions + fail(error)
        } else {
            actions.append(.report(.restarted(reason: "\(reason); fetching it again")))
        }
        return actions + refetch(range, now: now)
    }

    /// Fetches the bytes of `range` again: the connections writing into it close, the part file forgets them, and
    /// the pieces they belong to are unchecked.
    mutating func refetch(_ range: Range<Int64>, now: Duration) -> [Action] {
        switch mode {
        case .single:
            let ids = connections.keys.sorted()
            connections.removeAll()
            let from = min(written, range.lowerBound)
            uncheck(from..<written)
            written = from
            durable = min(durable, from)
            lastCheckpoint.bytes = min(lastCheckpoint.bytes, from)
            let id = newConnection(now: now)
            return ids.map { .close($0) } + [truncating(to: from)] + resendSingle(id, now: now)
        case .segmented(var map):
            var actions: [Action] = []
            for (id, connection) in connections.sorted(by: { $0.key < $1.key }) {
                guard let segment = connection.segment else { continue }
                let bounds = map.segments[segment]
                guard bounds.start < range.upperBound, bounds.end > range.lowerBound else { continue }
                map.release(segment, keepingUpTo: segmentWritten[segment])
                connections[id] = nil
                actions.append(.close(id))
            }
            let count = map.segments.count
            map.refetch(range)
            for index in map.segments.indices {
                let offset = map.segments[index].offset
                if index < count {
                    if segmentWritten[index] > offset {
                        uncheck(offset..<segmentWritten[index])
                        segmentWritten[index] = offset
                    }
                } else {
                    segmentWritten.append(offset)
                }
            }
            mode = .segmented(map)
            if connections.isEmpty {
                actions += isMirrored ? addConnection(now: now) : takeWork(newConnection(now: now), now: now)
            }
            return actions
        }
    }

    /// The pieces overlapping `range`, whose bytes are gone, are unchecked (a check out for them is ignored).
    mutating func uncheck(_ range: Range<Int64>) {
        guard let length = settings.pieceLength, !range.isEmpty, !pieces.isEmpty else { return }
        let first = Int(range.lowerBound / length)
        let last = min(Int((range.upperBound - 1) / length), pieces.count - 1)
        guard first <= last else { return }
        for index in first...last {
            pieces[index].check = .unchecked
            pieces[index].writers = []
        }
    }
}
