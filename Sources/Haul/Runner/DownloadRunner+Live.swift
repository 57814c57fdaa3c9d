import Foundation
import HaulCore

/// A live HLS playlist (no `EXT-X-ENDLIST`): recorded until the download is stopped (paused, cancelled, `haul get`
/// interrupted, the daemon stopping) or the playlist ends. The playlist is read again every half target duration; each
/// segment it adds is fetched as a piece named by its media sequence number, so a segment listed by two readings is
/// fetched once. Stopping completes the recording: the pieces held are assembled in order, and only then does the
/// final name appear. A segment that could not be fetched before the stop is left out.
extension DownloadRunner {
    func recordLive(_ first: HLSPlaylist.Media, base: URL) async throws -> RunOutcome {
        guard let folder else { throw DownloadError(.fileSystem, "download \(id) has no folder open") }
        let isFragmented = first.segments.contains { $0.map != nil }
        if part == nil {
            let stem = (FileNameSanitizer.name(contentDisposition: nil, finalURLPath: base.path) as NSString)
                .deletingPathExtension
            try await claimName(stem + (isFragmented ? ".mp4" : ".ts"), in: folder, from: 0, lease: nil)
        }
        guard let part, let destination = record.destination else {
            throw DownloadError(.fileSystem, "nothing to write the stream of \(source) to")
        }
        try part.relock()
        defer { part.unlock() }
        let name = PathName.lastComponent(of: destination)
        let pieces = try folder.folder.folder(at: name + ".part-segments", creating: true)
        var plan = StreamPlan()
        plan.isFragmented = isFragmented
        var maps: [HLSPlaylist.Map] = []
        var current: HLSPlaylist.Map?
        var seen = Set<Int>()
        var keys: [String: [UInt8]] = [:]
        var media = first
        let counter = StreamCounter(total: 0, done: 0)
        environment.logger.notice("\(source): recording a live stream until it is stopped or ends")
        recording: while true {
            var added: [StreamPiece] = []
            for segment in media.segments where !seen.contains(segment.sequence) {
                seen.insert(segment.sequence)
                if let map = segment.map, map != current {
                    if !maps.contains(map) {
                        maps.append(map)
                        let piece = StreamPiece(
                            name: "init-\(maps.count - 1)", url: try resolve(map.uri, against: base),
                            range: map.byteRange.map { $0.offset..<$0.offset + $0.length })
                        plan.pieces.append(piece)
                        added.append(piece)
                    }
                    plan.order.append(StreamPart(name: "init-\(maps.firstIndex(of: map)!)"))
                    current = map
                }
                let pieceName = String(format: "s%012d", segment.sequence)
                let piece = StreamPiece(
                    name: pieceName, url: try resolve(segment.uri, against: base),
                    range: segment.byteRange.map { $0.offset..<$0.offset + $0.length })
                plan.pieces.append(piece)
                added.append(piece)
                if let key = segment.key {
                    // Keys are fetched as they appear: a stop cancels the requests that would come after it.
                    if keys[key.uri] == nil {
                        plan.keys[key.uri] = try resolve(key.uri, against: base)
                        keys[key.uri] = try await fetchKey(plan.keys[key.uri]!)
                    }
                    plan.order.append(
                        StreamPart(name: pieceName, keyURI: key.uri, iv: key.iv ?? Self.sequenceIV(segment.sequence)))
                } else {
                    plan.order.append(StreamPart(name: pieceName))
                }
            }
            counter.grow(by: added.count)
            let missing = added.filter { (try? pieces.entry($0.name)) == nil }
            for _ in 0..<(added.count - missing.count) { counter.finished() }
            do {
                try await fetcher.fetchStreamPieces(missing, into: pieces, counter: counter)
            } catch  where Self.isCancellation(error) {
                break recording
            }
            if media.isEnded { break }
            do {
                // Half the target duration between reloads, within half a second and an hour: the playlist is a
                // server's text, and a target of 1e300 seconds must neither trap nor stop the recording for ever.
                let wait = min(max(0.5, media.targetDuration / 2), 3600)
                try await environment.clock.sleep(.milliseconds(Int64(wait * 1000)))
                let response = try await fetcher.fetch(base, range: nil)
                guard response.head.status == 200 else {
                    throw LinkExpiry.error(for: response.head) ?? DownloadError.httpStatus(response.head.status)
                }
                let text = try await Self.readSmall(response, largest: Self.largestPlaylist, what: "the playlist")
                guard case .media(let reread) = try HLSPlaylist.parse(String(decoding: text, as: UTF8.self)) else {
                    throw DownloadError(.invalidResponse, "the live playlist \(base) became a master playlist")
                }
                media = reread
            } catch  where Self.isCancellation(error) {
                break recording
            }
        }
        // Stopped or ended: what is held is the recording.
        plan.order = plan.order.filter { (try? pieces.entry($0.name)) != nil }
        guard plan.order.contains(where: { !$0.name.hasPrefix("init-") }) else {
            throw DownloadError(.invalidResponse, "the live stream \(source) was stopped before any segment arrived")
        }
        let recorded = plan
        let heldKeys = keys
        let length = try await Blocking.run { try Self.assemble(recorded, keys: heldKeys, pieces: pieces, into: part) }
        try await tellManager(.finishing)
        result = try await finalize(total: length)
        for piece in plan.pieces {
            if let entry = try? pieces.entry(piece.name) { pieces.removeFile(piece.name, identity: entry.identity) }
        }
        for leftover in pieces.names() where leftover.hasSuffix(".part") {
            if let entry = try? pieces.entry(leftover) { pieces.removeFile(leftover, identity: entry.identity) }
        }
        _ = folder.folder.removeFolder(name + ".part-segments")
        guard let result else { throw DownloadError(.fileSystem, "\(source) completed with no file") }
        return .completed(result)
    }
}
