import Crypto
import Foundation
import HaulCore
import NIOCore
import _CryptoExtras

#if canImport(Glibc)
    import Glibc
#endif

/// HLS: a URL that answers a playlist (`application/vnd.apple.mpegurl`, or a `.m3u8` of a text type) is downloaded as
/// the one playable file its segments make. A master playlist's variant is chosen (`--variant`, else the highest
/// bandwidth); the media playlist's segments are fetched in parallel, up to the download's connections, each into a
/// piece file of its own in a folder beside the part file (`NAME.part-segments`), resumed with a Range request after a
/// break, and kept only once synced and renamed to its number. A stop (pause, kill -9) keeps every finished segment;
/// the next run fetches only the others. Once every segment is held they are assembled in order into the part file
/// (init sections of `EXT-X-MAP` before the segments that follow them, AES-128 segments decrypted), which is synced
/// and moved into place as any download's: the final name appears only then.
extension DownloadRunner {
    /// The largest playlist read.
    static let largestPlaylist = 8 << 20

    /// A DASH manifest's stream: the best video representation (or the one `--variant` names) into the download's
    /// file, and the best audio one into a file beside it (`NAME.audio.mp4`); an audio-only manifest is one file.
    func dashStream(_ text: [UInt8], url: URL) async throws -> RunOutcome {
        let manifest = try DASHManifest.parse(String(decoding: text, as: UTF8.self))
        let video = manifest.best(.video, choice: options.streamVariant)
        if video == nil, let choice = options.streamVariant, !choice.isEmpty {
            let known = manifest.representations.filter { $0.kind == .video }.map(\.id).joined(separator: ", ")
            throw DownloadError(.invalidArgument, "no video of \(source) is '\(choice)' (it has \(known))")
        }
        let audio = manifest.best(.audio)
        guard let main = video ?? audio ?? manifest.representations.first else {
            throw DownloadError(.invalidResponse, "\(source) has no representation to download")
        }
        environment.logger.info("\(source): representation \(main.id) (\(main.bandwidth) b/s)")
        let extra = video != nil ? try audio.map { try dashPlan($0, manifest: url) } : nil
        return try await download(try dashPlan(main, manifest: url), extra: extra, base: url)
    }

    /// Reads an answer's body, at most `largest` bytes.
    static func readSmall(_ response: TransportResponse, largest: Int, what: String) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        for try await chunk in response.body {
            bytes += chunk.readableBytesView
            guard bytes.count <= largest else {
                throw DownloadError(.invalidResponse, "\(what) is larger than \(largest >> 20) MiB")
            }
        }
        return bytes
    }

    /// The media playlist to download, from the playlist the URL answered (a master's chosen variant, fetched).
    func mediaPlaylist(_ text: [UInt8], url: URL) async throws -> (HLSPlaylist.Media, URL) {
        switch try HLSPlaylist.parse(String(decoding: text, as: UTF8.self)) {
        case .media(let media):
            return (media, url)
        case .master(let master):
            guard let variant = master.variant(options.streamVariant) else {
                let known = master.variants.map { $0.resolution ?? String($0.bandwidth) }.joined(separator: ", ")
                throw DownloadError(
                    .invalidArgument, "no variant of \(source) is '\(options.streamVariant ?? "")' (it has \(known))")
            }
            let variantURL = try resolve(variant.uri, against: url)
            environment.logger.info(
                "\(source): variant \(variant.resolution ?? "") \(variant.bandwidth) b/s: \(variantURL.absoluteString)")
            let response = try await fetcher.fetch(variantURL, range: nil)
            guard response.head.status == 200 else {
                throw DownloadError.httpStatus(response.head.status)
            }
            let body = try await Self.readSmall(response, largest: Self.largestPlaylist, what: "the variant's playlist")
            guard case .media(let media) = try HLSPlaylist.parse(String(decoding: body, as: UTF8.self)) else {
                throw DownloadError(.invalidResponse, "the variant \(variantURL) is a master playlist again")
            }
            return (media, response.finalURL)
        }
    }

    /// What the stream's fetching tasks share of this runner.
    var fetcher: StreamFetcher { StreamFetcher(environment: environment, options: options, source: source, id: id) }

    func resolve(_ reference: String, against base: URL) throws -> URL {
        guard let url = URL(string: reference, relativeTo: base)?.absoluteURL,
            let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https"
        else { throw DownloadError(.invalidResponse, "the playlist names '\(reference)', which is not an HTTP URL") }
        return url
    }

    /// Downloads the stream the URL answered, to its end.
    func runStream(_ text: [UInt8], url: URL) async -> RunOutcome {
        do {
            if !text.starts(with: Array("#EXTM3U".utf8)), text.contains(UInt8(ascii: "<")) {
                return try await dashStream(text, url: url)
            }
            let (media, base) = try await mediaPlaylist(text, url: url)
            guard media.isEnded else { return try await recordLive(media, base: base) }
            guard !media.segments.isEmpty else { throw DownloadError(.invalidResponse, "\(source) lists no segment") }
            return try await download(try hlsPlan(media, base: base), base: base)
        } catch {
            if Self.isCancellation(error) { return .stopped }
            return .failed((error as? DownloadError) ?? DownloadError(.fileSystem, String(describing: error)))
        }
    }

    /// The plan of an HLS media playlist: each init section once, then each segment; in the file, each init section
    /// before the first segment that uses it (and again where a later one changes it), each segment with its key.
    func hlsPlan(_ media: HLSPlaylist.Media, base: URL) throws -> StreamPlan {
        var plan = StreamPlan()
        var maps: [HLSPlaylist.Map] = []
        var current: HLSPlaylist.Map?
        for (index, segment) in media.segments.enumerated() {
            if let map = segment.map, map != current {
                if !maps.contains(map) {
                    maps.append(map)
                    plan.pieces.append(
                        StreamPiece(
                            name: "init-\(maps.count - 1)", url: try resolve(map.uri, against: base),
                            range: map.byteRange.map { $0.offset..<$0.offset + $0.length }))
                }
                plan.order.append(StreamPart(name: "init-\(maps.firstIndex(of: map)!)"))
                current = map
            }
            let name = String(format: "%06d", index)
            plan.pieces.append(
                StreamPiece(
                    name: name, url: try resolve(segment.uri, against: base),
                    range: segment.byteRange.map { $0.offset..<$0.offset + $0.length }))
            if let key = segment.key {
                plan.keys[key.uri] = try resolve(key.uri, against: base)
                plan.order.append(
                    StreamPart(name: name, keyURI: key.uri, iv: key.iv ?? Self.sequenceIV(segment.sequence)))
            } else {
                plan.order.append(StreamPart(name: name))
            }
        }
        plan.isFragmented = !maps.isEmpty
        return plan
    }

    /// The plan of a DASH representation: its init section, then its segments, each resolved through its base URLs.
    func dashPlan(_ representation: DASHManifest.Representation, manifest: URL) throws -> StreamPlan {
        var base = manifest
        for reference in representation.bases where !reference.isEmpty { base = try resolve(reference, against: base) }
        var plan = StreamPlan()
        plan.isFragmented = true
        func piece(_ name: String, _ reference: DASHManifest.Reference) throws -> StreamPiece {
            StreamPiece(
                name: name, url: reference.uri.isEmpty ? base : try resolve(reference.uri, against: base),
                range: reference.range.map { $0.offset..<$0.offset + $0.length })
        }
        if let initialization = representation.initialization {
            plan.pieces.append(try piece("init-0", initialization))
            plan.order.append(StreamPart(name: "init-0"))
        }
        for (index, segment) in representation.segments.enumerated() {
            let name = String(format: "%06d", index)
            plan.pieces.append(try piece(name, segment))
            plan.order.append(StreamPart(name: name))
        }
        return plan
    }

    /// Downloads `plan` into the download's file, and `extra` (a DASH audio track) into a file beside it; the final
    /// names appear once both are assembled.
    func download(_ plan: StreamPlan, extra: StreamPlan? = nil, base: URL) async throws -> RunOutcome {
        if part == nil {
            // A folder download: named after the playlist, as the file it becomes (fMP4 with init sections, else TS),
            // and sorted as that video is, by its name and its type.
            let stem = (FileNameSanitizer.name(contentDisposition: nil, finalURLPath: url(of: base).path) as NSString)
                .deletingPathExtension
            let name = stem + (plan.isFragmented ? ".mp4" : ".ts")
            let folder = try enterFolder(for: name, contentType: plan.isFragmented ? "video/mp4" : "video/mp2t")
            try await claimName(name, in: folder, from: 0, lease: nil)
        }
        guard let folder else { throw DownloadError(.fileSystem, "download \(id) has no folder open") }
        guard let part, let destination = record.destination else {
            throw DownloadError(.fileSystem, "nothing to write the stream of \(source) to")
        }
        try part.relock()
        defer { part.unlock() }
        let name = PathName.lastComponent(of: destination)
        let extraName = ((name as NSString).deletingPathExtension) + ".audio.mp4"
        let total = plan.pieces.count + (extra?.pieces.count ?? 0)
        let counter = StreamCounter(total: total, done: 0)
        let pieces = try await hold(plan, in: name + ".part-segments", counter: counter)
        var extraPieces: HeldFolder?
        if let extra { extraPieces = try await hold(extra, in: extraName + ".part-segments", counter: counter) }
        try Task.checkCancellation()
        // Every piece is held: assembled in order into the part file (and the audio's beside it).
        let keys = try await fetchKeys(plan)
        let length: Int64
        if let extra, let extraPieces, options.streamMux, let ffmpeg = NoticeDelivery.executable("ffmpeg") {
            length = try await mux(plan, extra, pieces: pieces, extraPieces: extraPieces, into: part, ffmpeg: ffmpeg)
        } else {
            if options.streamMux, extra != nil {
                environment.logger.warning("\(source): ffmpeg is not installed: the video and audio stay two files")
            }
            length = try await Blocking.run { try Self.assemble(plan, keys: keys, pieces: pieces, into: part) }
            if let extra, let extraPieces {
                try await finishBeside(extra, pieces: extraPieces, as: extraName, in: folder)
            }
        }
        try await tellManager(.finishing)
        result = try await finalize(total: length)
        // The pieces go once the files are in place.
        Self.removePieces(of: plan, in: pieces, folder: folder, named: name + ".part-segments")
        if let extra, let extraPieces {
            Self.removePieces(of: extra, in: extraPieces, folder: folder, named: extraName + ".part-segments")
        }
        guard let result else { throw DownloadError(.fileSystem, "\(source) completed with no file") }
        return .completed(result)
    }

    /// `--mux`: the video and the audio assembled into two files beside the part file, and ffmpeg's copy of both
    /// streams into one (fragmented MP4, written to its standard output) into the part file; the two go then.
    private func mux(
        _ video: StreamPlan, _ audio: StreamPlan, pieces: HeldFolder, extraPieces: HeldFolder, into part: PartFile,
        ffmpeg: String
    ) async throws -> Int64 {
        guard let folder else { throw DownloadError(.fileSystem, "download \(id) has no folder open") }
        var made: [PartFile] = []
        defer {
            for file in made {
                file.unlock()
                folder.folder.removeFile(file.name, identity: file.identity)
            }
        }
        for (plan, held, suffix) in [(video, pieces, ".video.part"), (audio, extraPieces, ".audio.part")] {
            let name = PathName.lastComponent(of: part.name.replacingOccurrences(of: ".part", with: "")) + suffix
            if let entry = try folder.entry(name), entry.kind == .regular, entry.links == 1 {
                folder.folder.removeFile(name, identity: entry.identity)
            }
            guard let file = try folder.makePart(name) else {
                throw DownloadError(.untrustedFile, "\(folder.path)/\(name) is not Haul's; it is left as it is")
            }
            made.append(file)
            _ = try await Blocking.run { try Self.assemble(plan, keys: [:], pieces: held, into: file) }
        }
        try part.truncate(to: 0)
        let arguments = [
            "-v", "error", "-i", made[0].path, "-i", made[1].path, "-map", "0", "-map", "1", "-c", "copy", "-f", "mp4",
            "-movflags", "frag_keyframe+empty_moov+default_base_moof", "pipe:1",
        ]
        return try await Blocking.run { () throws -> Int64 in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: ffmpeg)
            process.arguments = arguments
            let output = Pipe()
            let errors = Pipe()
            process.standardOutput = output
            process.standardError = errors
            process.standardInput = FileHandle.nullDevice
            try process.run()
            var offset: Int64 = 0
            while true {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                try part.write(ByteBuffer(bytes: chunk), at: offset)
                offset += Int64(chunk.count)
            }
            let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            guard process.terminationStatus == 0, offset > 0 else {
                throw DownloadError(.fileSystem, "ffmpeg could not put the video and audio in one file: \(message)")
            }
            return offset
        }
    }

    /// Fetches what `plan` lacks into the folder `name` beside the part file (made when missing).
    private func hold(_ plan: StreamPlan, in name: String, counter: StreamCounter) async throws -> HeldFolder {
        guard let folder else { throw DownloadError(.fileSystem, "download \(id) has no folder open") }
        let pieces = try folder.folder.folder(at: name, creating: true)
        let missing = plan.pieces.filter { (try? pieces.entry($0.name)) == nil }
        for _ in 0..<(plan.pieces.count - missing.count) { counter.finished() }
        environment.logger.info("\(source): \(plan.pieces.count) pieces, \(missing.count) to fetch")
        try await fetcher.fetchStreamPieces(missing, into: pieces, counter: counter)
        return pieces
    }

    /// Assembles `plan` into the file `name` beside the download's: made anew (`NAME.part`), synced, and moved into
    /// place without replacing anything. All of it on the file-system threads: the create, the move and the folder's
    /// sync wait on the disk.
    private func finishBeside(_ plan: StreamPlan, pieces: HeldFolder, as name: String, in folder: DownloadFolder)
        async throws
    {
        try await Blocking.run {
            if let entry = try folder.entry(name + ".part") {
                // What an earlier run began: Haul's only when it is a regular file with one link.
                guard entry.kind == .regular, entry.links == 1 else {
                    throw DownloadError(
                        .untrustedFile, "\(folder.path)/\(name).part is not Haul's; it is left as it is")
                }
                folder.folder.removeFile(name + ".part", identity: entry.identity)
            }
            guard let made = try folder.makePart(name + ".part") else {
                throw DownloadError(.destinationExists, "\(folder.path)/\(name).part appeared meanwhile")
            }
            defer { made.unlock() }
            _ = try Self.assemble(plan, keys: [:], pieces: pieces, into: made)
            try made.sync()
            let code = folder.folder.move(name + ".part", to: name, replacing: false)
            guard code == 0 else {
                throw code == EEXIST
                    ? DownloadError(
                        .destinationExists, "\(folder.path)/\(name) exists already; Haul did not replace it")
                    : PartFile.fileError(code, "cannot move \(name).part into place")
            }
            folder.folder.sync()
        }
    }

    /// Deletes the pieces of `plan` and their folder.
    private static func removePieces(of plan: StreamPlan, in pieces: HeldFolder, folder: DownloadFolder, named: String)
    {
        for piece in plan.pieces {
            if let entry = try? pieces.entry(piece.name) { pieces.removeFile(piece.name, identity: entry.identity) }
        }
        _ = folder.folder.removeFolder(named)
    }

    private func url(of base: URL) -> URL { URL(string: source) ?? base }

    /// The AES-128 keys the plan names, fetched once each.
    private func fetchKeys(_ plan: StreamPlan) async throws -> [String: [UInt8]] {
        var keys: [String: [UInt8]] = [:]
        for (name, url) in plan.keys { keys[name] = try await fetchKey(url) }
        return keys
    }

    /// One AES-128 key: 16 bytes.
    func fetchKey(_ url: URL) async throws -> [UInt8] {
        let response = try await fetcher.fetch(url, range: nil)
        guard response.head.status == 200 else {
            throw LinkExpiry.error(for: response.head) ?? DownloadError.httpStatus(response.head.status)
        }
        let bytes = try await Self.readSmall(response, largest: 1 << 20, what: "the key \(url)")
        guard bytes.count == 16 else {
            throw DownloadError(.invalidResponse, "the key \(url) is \(bytes.count) bytes, not AES-128's 16")
        }
        return bytes
    }

    /// Writes the stream into `part` from its start, in the plan's order, each part decrypted when it has a key.
    /// Returns the length.
    static func assemble(_ plan: StreamPlan, keys: [String: [UInt8]], pieces: HeldFolder, into part: PartFile) throws
        -> Int64
    {
        try part.truncate(to: 0)
        var offset: Int64 = 0
        func append(_ bytes: [UInt8]) throws {
            var written = 0
            while written < bytes.count {
                let count = bytes[written...].withUnsafeBytes { buffer in
                    pwrite(part.fileDescriptor, buffer.baseAddress, buffer.count, off_t(offset) + off_t(written))
                }
                guard count > 0 else { throw PartFile.fileError(errno, "cannot write \(part.path)") }
                written += count
            }
            offset += Int64(bytes.count)
        }
        for entry in plan.order {
            var bytes = try read(entry.name, in: pieces)
            if let uri = entry.keyURI, let iv = entry.iv {
                guard let secret = keys[uri] else { throw DownloadError(.invalidResponse, "no key \(uri) was fetched") }
                do {
                    bytes = Array(
                        try AES._CBC.decrypt(bytes, using: SymmetricKey(data: secret), iv: try AES._CBC.IV(ivBytes: iv))
                    )
                } catch {
                    throw DownloadError(
                        .invalidResponse, "the piece \(entry.name) does not decrypt with its key: \(error)")
                }
            }
            try append(bytes)
        }
        return offset
    }

    /// The bytes of the piece `name`.
    static func read(_ name: String, in pieces: HeldFolder) throws -> [UInt8] {
        guard let entry = try pieces.entry(name), entry.kind == .regular else {
            throw DownloadError(.fileSystem, "the piece \(pieces.path(of: name)) is gone")
        }
        let descriptor = try pieces.open(name, as: entry, writing: false)
        defer { close(descriptor) }
        var bytes = [UInt8](repeating: 0, count: Int(entry.size))
        var done = 0
        while done < bytes.count {
            let count = bytes[done...].withUnsafeMutableBytes {
                pread(descriptor, $0.baseAddress, $0.count, off_t(done))
            }
            guard count > 0 else { throw PartFile.fileError(errno, "cannot read \(pieces.path(of: name))") }
            done += count
        }
        return bytes
    }

    /// The IV of a segment without one: its media sequence number, big-endian, in 16 bytes.
    static func sequenceIV(_ sequence: Int) -> [UInt8] {
        var iv = [UInt8](repeating: 0, count: 16)
        var value = UInt64(sequence)
        for index in stride(from: 15, through: 8, by: -1) {
            iv[index] = UInt8(value & 0xff)
            value >>= 8
        }
        return iv
    }
}
