import Foundation
import HaulCore
import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// What one piece file holds: a segment, or an init section.
struct StreamPiece: Sendable {
    var name: String
    var url: URL
    var range: Range<Int64>?
}

/// What a stream's file is made of: the pieces to hold (each once), and the file in order.
struct StreamPlan: Sendable {
    var pieces: [StreamPiece] = []
    var order: [StreamPart] = []
    /// The AES-128 keys, by the URI the playlist gives.
    var keys: [String: URL] = [:]
    /// Init sections and fragments (an `.mp4`), not MPEG-TS.
    var isFragmented = false
}

/// One piece's place in a stream's file, with the key and IV it is decrypted with.
struct StreamPart: Sendable {
    var name: String
    var keyURI: String? = nil
    var iv: [UInt8]? = nil
}

/// The requests of a stream's pieces, made from its fetching tasks at once: what they need of the runner, shared.
struct StreamFetcher: Sendable {
    let environment: RunnerEnvironment
    let options: DownloadOptions
    let source: String
    let id: DownloadID

    /// One GET with the download's headers, TLS and network options.
    func fetch(_ url: URL, range: Range<Int64>?) async throws -> TransportResponse {
        var headers: [(name: String, value: String)] = [("Accept-Encoding", "identity")]
        if let agent = options.userAgent { headers.append(("User-Agent", agent)) }
        headers += options.headers.map { ($0.name, $0.value) }
        if let range {
            headers.append(
                ("Range", "bytes=\(range.lowerBound)-\(range.upperBound == .max ? "" : String(range.upperBound - 1))"))
        }
        return try await environment.transport.send(
            TransportRequest(
                url: url, headers: headers, tls: options.tls, network: options.network,
                ownHost: URL(string: source)?.host))
    }

    /// Fetches `missing` with up to the download's connections at once.
    func fetchStreamPieces(_ missing: [StreamPiece], into pieces: HeldFolder, counter: StreamCounter) async throws {
        let parallel = max(1, options.maxConnectionsPerDownload)
        try await withThrowingTaskGroup(of: Void.self) { group in
            var next = missing.makeIterator()
            for _ in 0..<parallel {
                guard let piece = next.next() else { break }
                group.addTask { try await fetchStreamPiece(piece, into: pieces, counter: counter) }
            }
            while try await group.next() != nil {
                guard let piece = next.next() else { continue }
                group.addTask { try await fetchStreamPiece(piece, into: pieces, counter: counter) }
            }
        }
    }

    /// One piece: resumed from what its unfinished file holds, retried with backoff, kept once synced and renamed.
    func fetchStreamPiece(_ piece: StreamPiece, into pieces: HeldFolder, counter: StreamCounter) async throws {
        let partial = piece.name + ".part"
        var failures = 0
        while true {
            try Task.checkCancellation()
            do {
                try await fetchOnce(piece, partial: partial, into: pieces, counter: counter)
                counter.finished()
                emitStreamProgress(counter)
                return
            } catch let error as DownloadError where error.isRetryable {
                failures += 1
                switch environment.settings.retryPolicy.decide(failures: failures, error: error, jitter: 1) {
                case .giveUp: throw error
                case .retry(let delay):
                    environment.logger.notice("\(piece.url): \(error.message); retrying in \(delay.spoken)")
                    try await environment.clock.sleep(delay)
                }
            }
        }
    }

    func fetchOnce(_ piece: StreamPiece, partial: String, into pieces: HeldFolder, counter: StreamCounter)
        async throws
    {
        // What an earlier attempt or run left of this piece. The look, the create, the sync and the rename run on the
        // file-system threads: they wait on the disk.
        let opened = try await Blocking.run { () throws -> (Int32, Int64) in
            if let entry = try pieces.entry(partial), entry.kind == .regular, entry.links == 1 {
                return (try pieces.open(partial, as: entry, writing: true), entry.size)
            }
            switch pieces.create(partial) {
            case .success(let made): return (made, 0)
            case .failure(let failure):
                throw PartFile.fileError(failure.code, "cannot create \(pieces.path(of: partial))")
            }
        }
        let descriptor = opened.0
        var held = opened.1
        defer { close(descriptor) }
        let start = (piece.range?.lowerBound ?? 0) + held
        let asked: Range<Int64>? = held > 0 || piece.range != nil ? start..<(piece.range?.upperBound ?? .max) : nil
        // A slot of `--max-connections-per-host`, counted against the host of the download's URL, as any connection.
        let slot = try await environment.hostConnections.acquire(
            URL(string: source)?.host?.lowercased() ?? source, clock: environment.idleClock
        ) {}
        defer { slot.release() }
        let response = try await fetch(piece.url, range: asked)
        let head = response.head
        switch head.status {
        case 206:
            guard case .satisfied(let first, _, _) = head.contentRange, first == start else {
                throw DownloadError(.invalidResponse, "\(piece.url) answered another range than bytes \(start)-")
            }
        case 200 where piece.range == nil:
            // The whole segment again: what was held is replaced.
            held = 0
            guard ftruncate(descriptor, 0) == 0 else { throw PartFile.fileError(errno, "cannot truncate \(partial)") }
        case 200:
            throw DownloadError(
                .invalidResponse, "\(piece.url) ignores Range, and the playlist asks for a byte range of it")
        default:
            // Which segment: a playlist has hundreds, and a 404 of one says little without its URL.
            var error =
                LinkExpiry.error(for: head) ?? DownloadError.httpStatus(head.status, retryAfter: head.retryAfter)
            error.message = "\(piece.url): \(error.message)"
            throw error
        }
        let expected: Int64? = {
            if case .length(let length) = head.contentLength { return held + length }
            return nil
        }()
        var position = held
        for try await chunk in response.body {
            try Task.checkCancellation()
            let written = chunk.withUnsafeReadableBytes { buffer in
                pwrite(descriptor, buffer.baseAddress, buffer.count, off_t(position))
            }
            guard written == chunk.readableBytes else {
                throw PartFile.fileError(errno, "cannot write \(pieces.path(of: partial))")
            }
            position += Int64(written)
            counter.add(Int64(written))
            emitStreamProgress(counter)
            // The download's and all downloads' rate limits, as for any body.
            for limiter in environment.limiters { try await limiter.acquire(written) {} }
        }
        if let expected, position < expected {
            throw DownloadError(
                .bodyTooShort, "\(piece.url): connection closed after \(position - held) bytes", isRetryable: true)
        }
        if let range = piece.range, position != range.count {
            throw DownloadError(.invalidResponse, "\(piece.url) sent \(position) bytes of a \(range.count)-byte range")
        }
        try await Blocking.run { [descriptor] in
            guard fsync(descriptor) == 0 else { throw PartFile.fileError(errno, "cannot sync \(partial)") }
            let code = pieces.move(partial, to: piece.name, replacing: false)
            guard code == 0 || code == EEXIST else {
                throw PartFile.fileError(code, "cannot rename \(pieces.path(of: partial))")
            }
        }
    }

    func emitStreamProgress(_ counter: StreamCounter) {
        let (bytes, done, total) = counter.now
        guard counter.shouldReport(at: environment.idleClock.now()) else { return }
        // The total is not known before every segment is: it is estimated from the segments held so far.
        let scaled = bytes.multipliedReportingOverflow(by: Int64(total))
        let estimate = done > 0 && !scaled.overflow ? scaled.partialValue / Int64(done) : nil
        environment.events.emit(
            .progress(
                DownloadProgress(
                    id: id, receivedBytes: bytes, totalBytes: done == total ? bytes : estimate,
                    bytesPerSecond: counter.speed, secondsRemaining: nil,
                    connections: options.maxConnectionsPerDownload,
                    mirrors: nil)))
    }
}

/// The pieces and bytes of a stream so far, shared by its fetching tasks.
final class StreamCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var bytes: Int64 = 0
    private var done: Int
    private var total: Int
    private var lastReport: Duration?
    private var meter = SpeedMeter()
    private var lastTime: Duration = .zero

    init(total: Int, done: Int) {
        self.total = total
        self.done = done
    }

    func add(_ count: Int64) { lock.withLock { bytes += count } }
    /// A live recording's playlist listed `count` more pieces.
    func grow(by count: Int) { lock.withLock { total += count } }
    func finished() { lock.withLock { done += 1 } }
    var now: (Int64, Int, Int) { lock.withLock { (bytes, done, total) } }
    var speed: Double { lock.withLock { meter.bytesPerSecond } }

    /// Whether a progress event is due (at most ten a second); the speed is sampled only then, not for every chunk.
    func shouldReport(at time: Duration) -> Bool {
        lock.withLock {
            if let last = lastReport, time - last < .milliseconds(100), done < total { return false }
            lastReport = time
            meter.record(bytes: bytes, at: time)
            return true
        }
    }
}
