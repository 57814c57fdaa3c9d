import Foundation
import HaulCore
import Logging
import NIOCore
import Synchronization

extension DownloadRunner {
    // MARK: Bodies

    /// Streams an accepted answer into the part file, as the machine grants each chunk.
    func stream(
        _ id: Int, _ generation: UInt64, response: TransportResponse, body: TransferMachine.Body,
        continuation: AsyncStream<Event>.Continuation
    ) async {
        guard let part else {
            continuation.yield(.failed(id, generation, DownloadError(.fileSystem, "no part file for \(source)")))
            return
        }
        var writeback = WritebackStarter(part: part, from: body.start)
        let limiters = environment.limiters
        let clock = environment.clock
        do {
            for try await chunk in response.body {
                let count = chunk.readableBytes
                let grant = machine.withLock { $0.claim(id, count: count) }
                var index = chunk.readerIndex
                if grant.compare > 0 {
                    let held = try part.read(count: grant.compare, at: grant.offset)
                    guard let received = chunk.getBytes(at: index, length: grant.compare), held == received else {
                        continuation.yield(.overlapDiffered(id, generation))
                        return
                    }
                    index += grant.compare
                }
                if grant.write > 0, let slice = chunk.getSlice(at: index, length: grant.write) {
                    try part.write(slice, at: grant.offset + Int64(grant.compare))
                    writeback.wrote(upTo: grant.offset + Int64(grant.compare + grant.write))
                }
                let actions = machine.withLock { $0.wrote(id, now: environment.idleClock.now()) }
                if !actions.isEmpty { continuation.yield(.actions(actions)) }
                if grant.overrun {
                    let error = DownloadError(
                        .bodyTooLong, "server sent more than it announced; not saving the excess", isRetryable: true)
                    continuation.yield(.failed(id, generation, error))
                    return
                }
                if grant.stop {
                    continuation.yield(.bodyEnded(id, generation))
                    return
                }
                for limiter in limiters {
                    try await limiter.acquire(count, clock: clock) { machine.withLock { $0.touch(id) } }
                }
            }
            continuation.yield(.bodyEnded(id, generation))
        } catch {
            if Task.isCancelled || error is CancellationError { return }
            if let error = error as? DownloadError, !error.isRetryable || error.code == .diskFull {
                continuation.yield(.failed(id, generation, error))
                return
            }
            let host = response.finalURL.host ?? source
            var failure = LiveTransport.classify(error, connecting: false).error(host: host)
            if failure.code != .tls { failure.isRetryable = true }
            failure.message += " while the file was arriving"
            environment.logger.debug("\(source): \(String(describing: error))")
            continuation.yield(.failed(id, generation, failure))
        }
    }

    // MARK: Requests

    func url() throws -> URL {
        // Always the URL the user gave: redirect targets are often short-lived signed URLs. Haul follows redirects
        // itself, so the Range still reaches the final target.
        guard let url = URL(string: source) else {
            throw DownloadError(.invalidURL, "the stored URL '\(source)' cannot be parsed")
        }
        return url
    }

    func connectionError(_ error: any Error) -> DownloadError {
        if let error = error as? DownloadError { return error }
        if error is CancellationError { return DownloadError(.cancelled, "request cancelled") }
        return DownloadError(.connectionLost, "request to \(source) failed", underlying: error)
    }

    func headers(for request: RangeRequest) -> [(name: String, value: String)] {
        Self.headers(
            options: options, defaultUserAgent: environment.settings.userAgent, range: request.rangeHeader,
            ifRange: request.ifRange)
    }

    /// The request headers: the user's, with Haul's own `Range`, `If-Range` and `Accept-Encoding: identity`.
    static func headers(options: DownloadOptions, defaultUserAgent: String, range: String?, ifRange: String?)
        -> [(name: String, value: String)]
    {
        var headers: [(name: String, value: String)] = [
            ("User-Agent", options.userAgent ?? defaultUserAgent),
            ("Accept-Encoding", "identity"),
            ("Accept", "*/*"),
        ]
        for header in options.headers {
            headers.removeAll { $0.name.caseInsensitiveCompare(header.name) == .orderedSame }
            headers.append((header.name, header.value))
        }
        // Haul owns these: a user header must not break the resume logic.
        headers.removeAll { ["range", "if-range"].contains($0.name.lowercased()) }
        headers.append(("Accept-Encoding", "identity"))
        headers.removeAll { $0.name.lowercased() == "accept-encoding" && $0.value != "identity" }
        if let range { headers.append(("Range", range)) }
        if let ifRange { headers.append(("If-Range", ifRange)) }
        var seen = Set<String>()
        return headers.filter { seen.insert($0.name.lowercased()).inserted }
    }
}
