import Foundation
import HaulCore
import NIOCore

extension DownloadRunner {
    /// Performs one action; returns the machine's next actions when the action itself had an answer for it.
    func perform(_ action: TransferMachine.Action) async throws -> [TransferMachine.Action] {
        switch action {
        case .send(let id, let request):
            try Task.checkCancellation()
            let generation = renew(id)
            connections[id]?.source = request.source
            connections[id]?.task = Task { [connector, inbox] in
                await connector.connect(id, generation, request: request, events: inbox)
            }
        case .stream(let id, let body):
            guard let answer = connections[id]?.answer else { return [] }
            connections[id]?.answer = nil
            let kind = answer.body
            if part == nil, kind == .metalink, !options.followedMetalink {
                // The URL answers a Metalink: read it (it is small), and the run ends for the download to follow it.
                defer { answer.decline() }
                metalink = try await readMetalink(answer.response)
                return machine.stop()
            }
            if kind == .playlist || kind == .manifest {
                // The URL answers an HLS playlist or a DASH manifest: read it, and the run downloads its stream instead.
                defer { answer.decline() }
                let text = try await Self.readSmall(
                    answer.response, largest: Self.largestPlaylist, what: "the playlist of \(source)")
                playlist = (text, answer.response.finalURL)
                return machine.stop()
            }
            do {
                try await prepareBody(answer.response, source: connections[id]?.source ?? 0)
            } catch {
                answer.decline()
                throw error
            }
            if let part { connections[id]?.writeback = WritebackStarter(part: part, from: body.start) }
            if let credit = answer.credit {
                // Its task reads already; its chunks wait in the inbox behind the answer.
                connections[id]?.credit = credit
            } else {
                let credit = BodyCredit()
                connections[id]?.credit = credit
                answer.take?.resume(returning: credit)
            }
        case .discard(let id), .close(let id):
            closeConnection(id)
        case .truncate(let length):
            try await truncate(to: length)
        case .checkpoint(let mark):
            startCheckpoint(mark)
        case .wait(let id, let delay):
            let generation = renew(id)
            connections[id]?.task = Task { [environment, inbox] in
                do { try await environment.clock.sleep(delay) } catch { return }
                inbox.yield(.waitEnded(id, generation))
            }
        case .report(let report):
            try await tell(report)
        case .progress(let progress):
            environment.events.emit(
                .progress(
                    DownloadProgress(
                        id: id, receivedBytes: progress.receivedBytes, totalBytes: progress.totalBytes,
                        bytesPerSecond: progress.bytesPerSecond, secondsRemaining: progress.secondsRemaining,
                        connections: progress.connections, mirrors: progress.mirrors.isEmpty ? nil : progress.mirrors)))
        case .finalize(let total):
            // A checkpoint in flight ends first: its mark must not land after the finished length.
            await checkpoint?.value
            try await tellManager(.finishing)
            do {
                result = try await finalize(total: total)
                return machine.finalized(.completed, now: now())
            } catch let error as DownloadError where error.code == .checksumMismatch {
                try await tellManager(.transferring)
                return machine.finalized(.checksumMismatch(error), now: now())
            }
        case .checkPiece(let index, let range, let ticket):
            checkPiece(index, range: range, ticket: ticket)
        case .end:
            break
        }
        return []
    }

    /// Hashes piece `index` of the part file after the checks before it, and tells the loop whether it matched.
    func checkPiece(_ index: Int, range: Range<Int64>, ticket: UInt64) {
        guard let part, let pieces = options.pieces else { return }
        let previous = pieceChecks
        pieceChecks = Task { [inbox] in
            await previous?.value
            let expected = index < pieces.hashes.count ? pieces.hashes[index].lowercased() : ""
            let digest = try? await Blocking.run {
                try part.hexDigests(algorithms: [pieces.algorithm], range: range)[pieces.algorithm]
            }
            inbox.yield(.pieceChecked(index, ticket, digest?.lowercased() == expected))
        }
    }

    /// Before the first byte of a body: the name a folder download takes, then one write for what the answer
    /// told (the name, the final URL, the remote file's facts).
    func prepareBody(_ response: TransportResponse, source: Int = 0) async throws {
        // The final URL is the download's own URL's, never a mirror's.
        if source == 0 { record.finalURL = response.finalURL.absoluteString }
        // A folder download's name is chosen now, and stored with all of this as it is claimed (`claimName`).
        if part == nil { return try await resolveDestination(response: response) }
        // The identity of a part file just made is in the store before any byte is written: after a crash the part
        // file is found as this download's own, not left behind while another name is chosen. The part file's name
        // need not be on the disk yet: nothing stored counts bytes of it until a sync of its folder
        // (`isPartNameDurable`).
        let unsaved = !isPartIdentityStored
        try await save(transferReport(mark: nil), waiting: unsaved)
        isPartIdentityStored = true
    }

    /// A new generation of connection `id`, replacing the old one (whose task is cancelled, its events stale).
    func renew(_ id: Int) -> UInt64 {
        closeConnection(id)
        nextGeneration += 1
        connections[id] = ConnectionTask(generation: nextGeneration)
        return nextGeneration
    }

    /// Stops connection `id`: its task is cancelled, an answer waiting for a decision is declined, and what it
    /// still reports is stale.
    func closeConnection(_ id: Int) {
        guard let connection = connections.removeValue(forKey: id) else { return }
        connection.answer?.decline()
        connection.credit?.stop()
        if let task = connection.task {
            task.cancel()
            retired.append(task)
        }
    }
}
