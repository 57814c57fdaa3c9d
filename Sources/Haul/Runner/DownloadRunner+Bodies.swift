import Foundation
import HaulCore
import Logging
import NIOCore

/// What a connection's task does, with only what it needs of the runner: it sends the request and reports the answer,
/// then reads a file's body on at once (`readsAtOnce`) or waits to hear whether to take it, and reports each chunk,
/// reading on within the credit the loop gives back. It never touches the machine or the part file; the loop does.
struct Connector: Sendable {
    let environment: RunnerEnvironment
    let source: String
    let options: DownloadOptions

    init(environment: RunnerEnvironment, source: String, options: DownloadOptions) {
        self.environment = environment
        self.source = source
        self.options = options
    }

    typealias Events = RunnerInbox

    /// Connection `id` (generation `generation`): the request, then its body if the loop takes it.
    func connect(_ id: Int, _ generation: UInt64, request: RangeRequest, events: Events) async {
        let sent: TransportRequest
        do { sent = try transportRequest(request) } catch {
            events.yield(.failed(id, generation, connectionError(error)))
            return
        }
        // A slot of the host's connections, held until the body ends (a stopped connection's task ends too).
        let slot: HostConnections.Slot
        do {
            // The download's own URL's host was read when the request was made.
            let host = request.source == 0 ? sent.ownHost : sent.url.host
            slot = try await environment.hostConnections.acquire(
                host?.lowercased() ?? source, clock: environment.idleClock
            ) { events.yield(.throttled(id, generation)) }
        } catch {
            return
        }
        defer { slot.release() }
        let response: TransportResponse
        do {
            response = try await environment.transport.send(sent)
        } catch {
            events.yield(.failed(id, generation, connectionError(error)))
            return
        }
        // Only the download's own URL may answer a Metalink or a playlist; a mirror's answer is the file.
        let body = request.source == 0 ? DownloadRunner.body(of: response.head, url: response.finalURL) : .file
        if Self.readsAtOnce(status: response.head.status, body: body) {
            let credit = BodyCredit()
            let answer = DownloadRunner.Answer(response: response, body: body, take: nil, credit: credit)
            guard events.yield(.responded(id, generation, answer)) else { return }
            await stream(id, generation, response: response, credit: credit, events: events)
            return
        }
        let credit = await withCheckedContinuation { (take: CheckedContinuation<BodyCredit?, Never>) in
            let answer = DownloadRunner.Answer(response: response, body: body, take: take, credit: nil)
            if !events.yield(.responded(id, generation, answer)) {
                take.resume(returning: nil)
            }
        }
        if let credit { await stream(id, generation, response: response, credit: credit, events: events) }
    }

    /// Whether a task reads its answer's body on at once, within a credit of its own, while the loop decides: a 200 or
    /// a 206 of a file, which the machine nearly always takes. Waiting for the loop's word cost a round trip between
    /// the two tasks for every answer; a declined answer's chunks are dropped and its reading stopped, having read at
    /// most a credit's window. A Metalink, a playlist or a manifest waits for the word (the loop may read that body
    /// itself), as does any other status (an error's body, or a 416, is not wanted).
    static func readsAtOnce(status: Int, body: DownloadRunner.AnswerBody) -> Bool {
        (status == 200 || status == 206) && body == .file
    }

    /// Hands each chunk of an accepted answer's body to the loop, which writes it, reading ahead within the body's
    /// credit (`BodyCredit`) until the loop stops the reading; waits for the rate limits between chunks.
    func stream(
        _ id: Int, _ generation: UInt64, response: TransportResponse, credit: BodyCredit, events: Events
    ) async {
        let limiters = environment.limiters
        do {
            var isLeft = false
            for try await chunk in response.body {
                let count = chunk.readableBytes
                guard events.yield(.chunk(id, generation, chunk, credit: credit)), await credit.handOver(count) else {
                    isLeft = true
                    break
                }
                for limiter in limiters {
                    try await limiter.acquire(count) { events.yield(.throttled(id, generation)) }
                }
            }
            // Left before its end (its reader is gone with the loop): the host's slot is held until the connection
            // is closed, as the server sees it.
            if isLeft {
                await response.settled?()
                return
            }
            events.yield(.bodyEnded(id, generation))
        } catch {
            if Task.isCancelled || error is CancellationError {
                await response.settled?()
                return
            }
            if let error = error as? DownloadError {
                events.yield(.failed(id, generation, error))
                return
            }
            environment.logger.debug("\(source): \(String(describing: error))")
            let host = response.finalURL.host.map { HostAndPort.shown($0) } ?? source
            events.yield(
                .bodyBroke(id, generation, LiveTransport.classify(error, connecting: false).error(host: host)))
        }
    }

    // MARK: Requests

    /// The request for `request`'s server. The download's credentials, its cookies (`--cookie`) and the user's
    /// `Authorization` and `Cookie` headers are its own URL's host's (`TransportRequest.ownHost`): a mirror on another
    /// host gets none of them (its `.netrc` entry and the cookie file's cookies for its domain still apply).
    func transportRequest(_ request: RangeRequest) throws -> TransportRequest {
        // The download's own URL is parsed once when it is also the one requested.
        let own = try url()
        return TransportRequest(
            url: request.source == 0 ? own : try url(request.source), headers: headers(for: request), tls: options.tls,
            network: options.network, ownHost: own.host)
    }

    /// The URL of server `index`: 0 the download's own, then its mirrors.
    func url(_ index: Int = 0) throws -> URL {
        // Always the URL the user gave: redirect targets are often short-lived signed URLs. Haul follows redirects
        // itself, so the Range still reaches the final target.
        let given = options.server(index, own: source)
        guard let url = URL(string: given) else {
            throw DownloadError(.invalidURL, "the stored URL '\(given)' cannot be parsed")
        }
        return url
    }

    func connectionError(_ error: any Error) -> DownloadError {
        if let error = error as? DownloadError { return error }
        if error is CancellationError { return DownloadError(.cancelled, "request cancelled") }
        return DownloadError(.connectionLost, "request to \(source) failed", underlying: error)
    }

    func headers(for request: RangeRequest) -> [(name: String, value: String)] {
        DownloadRunner.headers(
            options: options, defaultUserAgent: environment.settings.userAgent, range: request.rangeHeader,
            ifRange: request.requiresSame ? nil : request.ifRange,
            precondition: request.requiresSame ? request.ifRange : nil)
    }
}

extension DownloadRunner {
    /// The request headers: the user's, with Haul's own `Range`, `If-Range` and `Accept-Encoding: identity`.
    /// `precondition`, a validator the answer must have (a replaced link's first request): `If-Match` for an ETag,
    /// `If-Unmodified-Since` for a date; a server of another version answers 412, without a body.
    static func headers(
        options: DownloadOptions, defaultUserAgent: String, range: String?, ifRange: String?,
        precondition: String? = nil
    ) -> [(name: String, value: String)] {
        guard !options.headers.isEmpty else {
            // Nothing of the user's to merge (most downloads): Haul's headers as they are, without comparing names.
            var headers: [(name: String, value: String)] = [
                ("User-Agent", options.userAgent ?? defaultUserAgent), ("Accept-Encoding", "identity"),
                ("Accept", "*/*"),
            ]
            if let range { headers.append(("Range", range)) }
            if let ifRange { headers.append(("If-Range", ifRange)) }
            if let precondition { headers.append(Self.precondition(precondition)) }
            return headers
        }
        var headers: [(name: String, value: String)] = [
            ("User-Agent", options.userAgent ?? defaultUserAgent),
            ("Accept-Encoding", "identity"),
            ("Accept", "*/*"),
        ]
        // Names compare ignoring ASCII case without lowercased copies: this runs for every request.
        for header in options.headers {
            headers.removeAll { headerNamesEqual($0.name, header.name) }
            headers.append((header.name, header.value))
        }
        // Haul owns these: a user header must not break the resume logic. Requests refuse them
        // (`DownloadRules.checkHeader`); a record stored before they did may still hold one.
        headers.removeAll { header in DownloadRules.ownedHeaders.contains { headerNamesEqual(header.name, $0) } }
        headers.append(("Accept-Encoding", "identity"))
        headers.removeAll { headerNamesEqual($0.name, "accept-encoding") && $0.value != "identity" }
        if let range { headers.append(("Range", range)) }
        if let ifRange { headers.append(("If-Range", ifRange)) }
        if let precondition { headers.append(Self.precondition(precondition)) }
        var unique: [(name: String, value: String)] = []
        unique.reserveCapacity(headers.count)
        for header in headers where !unique.contains(where: { headerNamesEqual($0.name, header.name) }) {
            unique.append(header)
        }
        return unique
    }

    /// The header that makes a request require the validator `value`: `If-Match` for an ETag, `If-Unmodified-Since`
    /// for a date.
    static func precondition(_ value: String) -> (name: String, value: String) {
        let isTag = value.hasPrefix("\"") || value.hasPrefix("W/")
        return (isTag ? "If-Match" : "If-Unmodified-Since", value)
    }
}
