import Foundation
import HaulCore
import Logging
import NIOCore
import Synchronization

/// Everything a runner needs from its manager.
struct RunnerEnvironment: Sendable {
    let store: DownloadStore
    let transport: any HTTPTransport
    let clock: EngineClock
    let idleClock: EngineClock
    let events: EventHub
    let settings: DownloadManager.Configuration.Engine
    let logger: Logger
    /// The limits this download's bytes count against (all downloads', its own).
    let limiters: [RateLimiter]
    /// Tells the manager what the runner learned or did, in order; the manager updates its view and tells
    /// subscribers. Progress goes to `events` directly.
    let report: @Sendable (RunnerReport) async -> Void
}

/// What a runner tells its manager while it runs.
enum RunnerReport: Sendable {
    /// A folder download has its file name.
    case destinationResolved(String)
    /// The server cannot be reached; the download waits for the network.
    case waitingForNetwork(DownloadError)
    /// The server answers again after a wait for the network.
    case networkReturned
    /// A retryable error; the download or one of its connections waits `delay`.
    case retrying(DownloadError, delay: Duration, attempts: Int?)
}

extension RunnerEnvironment {
    /// The manager's backoff with the download's own limit of attempts without progress.
    func retryPolicy(for options: DownloadOptions) -> RetryPolicy {
        RetryPolicy(
            maximumAttemptsWithoutProgress: options.maximumAttemptsWithoutProgress,
            initialDelay: settings.retryPolicy.initialDelay,
            maximumDelay: settings.retryPolicy.maximumDelay,
            maximumRetryAfter: settings.retryPolicy.maximumRetryAfter
        )
    }
}

/// How a run ended.
enum RunOutcome: Sendable {
    case completed(DownloadResult)
    case failed(DownloadError)
    /// Stopped by cancellation (pause, cancel, shutdown) after flushing the exact offset.
    case stopped
}

/// Bytes written by the transfer in flight, shared with the idle watchdog and read back after a failure.
final class TransferActivity: Sendable {
    private let activity = Atomic<Int64>(0)
    private let writtenOffset = Atomic<Int64>(-1)

    func touch() { activity.add(1, ordering: .relaxed) }
    var ticks: Int64 { activity.load(ordering: .relaxed) }

    func setWritten(_ offset: Int64) { writtenOffset.store(offset, ordering: .relaxed) }
    /// The end of the contiguous bytes written so far, -1 before the first write.
    var written: Int64 { writtenOffset.load(ordering: .relaxed) }
}

/// The bytes of the part file before this offset did not match what the server sent again.
struct OverlapMismatch: Error {}

/// Runs one download from the store's record to a completed file, a failure, or a clean stop: the loop of plan,
/// request, validate, stream, checkpoint, retry, finalise.
struct DownloadRunner {
    private(set) var record: DownloadRecord
    private let environment: RunnerEnvironment
    private var part: PartFile?
    private var failures = 0
    private var durableAtLastFailure: Int64 = -1
    private var forceWhole = false
    private var freshFetchTried = false
    private var wasResumed = false
    private var resumedFrom: Int64?
    private var currentActivity: TransferActivity?
    private var networkWaits = 0
    /// Set when a server mishandled a segment's range: the rest of this run uses one connection.
    private var segmentationDisabled = false
    private let startedAt: Duration
    private let planner = ResumePlanner()
    private let validator = ResponseValidator()

    init(record: DownloadRecord, environment: RunnerEnvironment) {
        self.record = record
        self.environment = environment
        startedAt = environment.clock.now()
    }

    private var id: DownloadID { DownloadID(record.id) }

    /// Runs to the end; never throws.
    mutating func run() async -> RunOutcome {
        // Every write of this run has been awaited by the time it returns; the lock goes with it.
        defer { part?.unlock() }
        do {
            return .completed(try await runLoop())
        } catch {
            if error is CancellationError || Task.isCancelled || (error as? DownloadError)?.code == .cancelled {
                await flushAfterStop()
                return .stopped
            }
            let failure = (error as? DownloadError) ?? DownloadError(.fileSystem, String(describing: error))
            await flushAfterStop()
            return .failed(failure)
        }
    }

    // MARK: The loop

    private mutating func runLoop() async throws -> DownloadResult {
        if let result = try await recognizeFinishedFile() { return result }
        if let destination = record.destination { try openPart(destination: destination) }
        while true {
            try Task.checkCancellation()
            if let stored = record.segments {
                do {
                    if try await resumeSegments(stored), let result = try await finalize() { return result }
                } catch let error as DownloadError where error.isRetryable {
                    try await handleRetryable(error)
                }
                continue
            }
            let plan = try currentPlan()
            let request: RangeRequest
            switch plan {
            case .finalize(let truncateTo):
                if let truncateTo { try truncate(to: truncateTo) }
                if resumedFrom == nil { resumedFrom = record.durableOffset }
                if let result = try await finalize() { return result }
                continue
            case .request(let planned, let truncateTo):
                if let truncateTo { try truncate(to: truncateTo) }
                request = planned
            }
            if resumedFrom == nil { resumedFrom = request.offset }
            do {
                let isComplete = try await attempt(request)
                failures = 0
                if isComplete, let result = try await finalize() { return result }
            } catch let error as DownloadError where error.isRetryable {
                try await handleRetryable(error)
                continue
            }
            // The next plan finalises once every byte is durable, or asks for the rest.
        }
    }

    private func currentPlan() throws -> ResumePlanner.Plan {
        guard let part, !forceWhole else { return .request(.whole, truncateTo: part == nil ? nil : 0) }
        let input = ResumePlanner.Input(
            partLength: try part.length(),
            durableOffset: record.durableOffset,
            hasRecord: record.isPartVerified,
            remote: record.remoteFacts
        )
        return planner.plan(input)
    }

    /// One request and, when the answer is usable, its body streamed to the part file. Returns whether the part file
    /// now holds the whole file (finalising syncs it, so no checkpoint is taken for it first).
    private mutating func attempt(_ request: RangeRequest) async throws -> Bool {
        // Always the URL the user gave: redirect targets are often short-lived signed URLs. Haul follows redirects
        // itself, so the Range still reaches the final target.
        guard let url = URL(string: record.url) else {
            throw DownloadError(.invalidURL, "the stored URL '\(record.url)' cannot be parsed")
        }
        let transportRequest = TransportRequest(url: url, headers: headers(for: request))
        let transport = environment.transport
        let activity = TransferActivity()
        currentActivity = activity
        let response = try await withIdleWatchdog(activity) {
            let response = try await transport.send(transportRequest)
            activity.touch()
            return response
        }
        if networkWaits > 0 {
            networkWaits = 0
            try environment.store.saveState(.running, for: record.id)
            await environment.report(.networkReturned)
        }
        let held = request.offset
        let decision = validator.decide(
            request: request, head: response.head, known: record.remoteFacts, partLength: held)
        let start: Int64
        let compareUntil: Int64
        let expected: Int64?
        switch decision {
        case .fail(let error):
            throw error
        case .restart(let reason):
            environment.logger.notice("restarting \(record.url) from 0: \(reason)")
            try resetToZero()
            forceWhole = true
            throw DownloadError(.invalidResponse, "restarting from 0: \(reason)", isRetryable: true)
        case .complete(let facts):
            record.remoteFacts = facts
            try environment.store.saveTransfer(record)
            return false
        case .rewrite(let length, let facts):
            if part == nil { try await resolveDestination(response: response) }
            if held > 0 {
                environment.logger.notice("\(record.url): whole body from 0 (range ignored or file changed)")
            }
            record.remoteFacts = facts
            record.finalURL = response.finalURL.absoluteString
            record.durableOffset = 0
            record.isPartVerified = true
            try environment.store.saveTransfer(record)
            try part?.truncate(to: 0)
            forceWhole = false
            start = 0
            compareUntil = 0
            expected = length
        case .write(let offset, let overlap, let length, let facts):
            guard part != nil else {
                throw DownloadError(.invalidResponse, "server answered 206 to a request for the whole file")
            }
            record.remoteFacts = facts
            record.finalURL = response.finalURL.absoluteString
            try environment.store.saveTransfer(record)
            start = offset - overlap
            compareUntil = offset
            expected = length
            if offset > 0 { wasResumed = true }
        }
        guard let part else { throw DownloadError(.fileSystem, "no part file for \(record.url)") }
        if let expected, shouldSplit(start: start, compareUntil: compareUntil, expected: expected) {
            // This answer becomes the first connection of a segmented transfer.
            currentActivity = nil
            let total = start + expected
            let map = SegmentMap(
                total: total, minimumSize: record.options.minimumSplitSize, fetched: start,
                pieces: record.options.maxConnectionsPerDownload)
            let first = OpenedBody(body: response.body, start: start, end: total, activity: activity)
            try await runSegments(map: map, first: first)
            return true
        }
        activity.setWritten(compareUntil)
        let context = TransferContext(
            id: id,
            part: part,
            store: environment.store,
            events: environment.events,
            clock: environment.clock,
            settings: environment.settings,
            total: record.totalLength,
            limiters: environment.limiters
        )
        let body = response.body
        do {
            let end = try await withIdleWatchdog(activity) {
                try await context.stream(
                    body, start: start, compareUntil: compareUntil, expected: expected, activity: activity)
            }
            if compareUntil > 0, !record.isPartVerified { record.isPartVerified = true }
            // No length announced and a clean end: that end is the file's end.
            let total = record.totalLength ?? end
            if end >= total {
                record.totalLength = total
                return true
            }
            try await checkpoint(end)
            try environment.store.saveTransfer(record)
            return false
        } catch is OverlapMismatch {
            environment.logger.notice("\(record.url): the bytes held differ from the server's; restarting from 0")
            try resetToZero()
            forceWhole = true
            throw DownloadError(
                .invalidResponse, "the part file does not match the server's bytes; restarting", isRetryable: true)
        } catch {
            if activity.written > record.durableOffset, activity.written >= compareUntil {
                try? await checkpoint(activity.written)
            }
            if error is DownloadError || error is CancellationError || Task.isCancelled { throw error }
            let host = response.finalURL.host ?? record.url
            throw DownloadError(.connectionLost, "connection to \(host) broke during the body", underlying: error)
        }
    }

    // MARK: Several connections

    /// Whether the answer just validated may be split over several connections: more than one allowed, the file's
    /// length and a strong validator known (so every segment's answer can be checked to be the same version), ranges
    /// honoured, no overlap being compared, and enough left for two segments of the minimum size.
    private func shouldSplit(start: Int64, compareUntil: Int64, expected: Int64) -> Bool {
        guard !segmentationDisabled, record.options.maxConnectionsPerDownload > 1, record.isPartVerified,
            compareUntil == start, let facts = record.remoteFacts, facts.isResumable,
            facts.validators.ifRangeValue != nil, let total = facts.totalLength, start + expected == total
        else { return false }
        return expected >= 2 * record.options.minimumSplitSize
    }

    /// Continues a segmented download from its stored map. Returns true when every byte is durable.
    private mutating func resumeSegments(_ stored: [Segment]) async throws -> Bool {
        let partLength = try part?.length() ?? 0
        // Bytes past the part file's end are gone, whatever the map says.
        let clamped = stored.map { segment in
            var segment = segment
            segment.offset = min(segment.offset, max(segment.start, partLength))
            return segment
        }
        guard part != nil, record.isPartVerified, let facts = record.remoteFacts, facts.validators.isStrong,
            let total = facts.totalLength,
            let map = SegmentMap(
                restoring: clamped, total: total, minimumSize: record.options.minimumSplitSize,
                pieces: record.options.maxConnectionsPerDownload)
        else {
            environment.logger.notice("\(record.url): the stored segment map is unusable; starting over")
            try resetToZero()
            return false
        }
        if resumedFrom == nil { resumedFrom = map.fetchedBytes }
        if map.fetchedBytes > 0 { wasResumed = true }
        if map.isComplete { return true }
        if networkWaits > 0 {
            networkWaits = 0
            try environment.store.saveState(.running, for: record.id)
            await environment.report(.networkReturned)
        }
        try await runSegments(map: map, first: nil)
        return true
    }

    /// Runs a segmented transfer over `map`, then takes over what it stored. A server that changed the file or
    /// mishandled a range sends the download back to one connection from 0.
    private mutating func runSegments(map: SegmentMap, first: OpenedBody?) async throws {
        guard let part, let facts = record.remoteFacts, let validator = facts.validators.ifRangeValue,
            let url = URL(string: record.url)
        else { throw DownloadError(.fileSystem, "cannot split \(record.url): its facts are incomplete") }
        let options = record.options
        let userAgent = environment.settings.userAgent
        let transfer = SegmentedTransfer(
            id: id, url: url, part: part, facts: facts, validator: validator, map: map, options: options,
            environment: environment
        ) { range, ifRange in
            Self.headers(options: options, defaultUserAgent: userAgent, range: range, ifRange: ifRange)
        }
        currentActivity = nil
        do {
            try await transfer.run(first: first)
            adoptCheckpoint(of: transfer)
        } catch let fallback as SegmentFallback {
            let reason: String
            switch fallback {
            case .versionChanged(let why):
                reason = why
            case .oneConnection(let why):
                reason = why
                segmentationDisabled = true
            }
            environment.logger.notice("\(record.url): \(reason); restarting from 0 with one connection")
            try resetToZero()
            forceWhole = true
            throw DownloadError(.invalidResponse, "restarting from 0: \(reason)", isRetryable: true)
        } catch {
            adoptCheckpoint(of: transfer)
            throw error
        }
    }

    /// Takes over what a segmented transfer last stored, so the record stays what the store holds.
    private mutating func adoptCheckpoint(of transfer: SegmentedTransfer) {
        if let stored = transfer.storedSegments {
            record.segments = stored.segments
            record.durableOffset = stored.bytes
        }
        record.activeConnections = 0
    }

    private mutating func handleRetryable(_ error: DownloadError) async throws {
        // The server answered before and now cannot be reached: the network is away. Wait for it, probing with
        // backoff, without spending the retries (a host that never answered still fails after them).
        if error.code == .connectionFailed, record.remoteFacts != nil {
            networkWaits += 1
            if networkWaits == 1 {
                try environment.store.saveState(.waitingForNetwork, for: record.id)
                await environment.report(.waitingForNetwork(error))
            }
            let delay = environment.settings.retryPolicy.backoff(
                failures: networkWaits, jitter: environment.settings.jitter())
            environment.logger.info("\(record.url): \(error.message); waiting for the network, next try in \(delay)")
            try await environment.clock.sleep(delay)
            return
        }
        if record.durableOffset > durableAtLastFailure, durableAtLastFailure >= 0 { failures = 0 }
        durableAtLastFailure = record.durableOffset
        failures += 1
        switch environment.retryPolicy(for: record.options).decide(
            failures: failures, error: error, jitter: environment.settings.jitter())
        {
        case .giveUp:
            var final = error
            final.isRetryable = false
            final.message =
                "\(error.message) (gave up after \(failures) attempt\(failures == 1 ? "" : "s") without progress)"
            throw final
        case .retry(let delay):
            record.attempts = failures
            record.error = error
            try? environment.store.saveAttempts(record)
            environment.logger.info("\(record.url): \(error.message); retrying in \(delay)")
            await environment.report(.retrying(error, delay: delay, attempts: failures))
            try await environment.clock.sleep(delay)
        }
    }

    // MARK: Part file and store

    private mutating func openPart(destination: String) throws {
        part = try PartFile.open(path: destination + ".part")
    }

    /// Truncates the part file; the store's offset is lowered first, so it never exceeds the bytes on disk.
    private mutating func truncate(to length: Int64) throws {
        if record.durableOffset > length {
            record.durableOffset = length
            try environment.store.saveDurableOffset(length, for: record.id)
        }
        try part?.truncate(to: length)
    }

    /// Forgets the bytes and what was known of the remote version.
    private mutating func resetToZero() throws {
        record.durableOffset = 0
        record.segments = nil
        record.remoteFacts = nil
        record.isPartVerified = true
        try environment.store.saveTransfer(record)
        try part?.truncate(to: 0)
    }

    /// Invariant 1: fsync the part, then store the offset.
    private mutating func checkpoint(_ offset: Int64) async throws {
        guard let part else { return }
        try await Blocking.run { try part.syncData() }
        record.durableOffset = offset
        try environment.store.saveDurableOffset(offset, for: record.id)
    }

    /// After a stop: the bytes this run wrote are contiguous from the durable offset, so after an fsync they are
    /// durable too, and the store gets the exact offset.
    private mutating func flushAfterStop() async {
        guard let part, let written = currentActivity?.written, written > record.durableOffset, record.isPartVerified
        else { return }
        if (try? await Blocking.run({ try part.syncData() })) != nil {
            record.durableOffset = written
            try? environment.store.saveDurableOffset(written, for: record.id)
        }
    }

    private func headers(for request: RangeRequest) -> [(name: String, value: String)] {
        Self.headers(
            options: record.options, defaultUserAgent: environment.settings.userAgent, range: request.rangeHeader,
            ifRange: request.ifRange)
    }

    /// The request headers: the user's, with Haul's own `Range`, `If-Range` and `Accept-Encoding: identity`.
    private static func headers(options: DownloadOptions, defaultUserAgent: String, range: String?, ifRange: String?)
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

    /// Picks the file name for a folder download from the first answer, never over a file Haul did not create.
    private mutating func resolveDestination(response: TransportResponse) async throws {
        guard let directory = record.directory else {
            throw DownloadError(.fileSystem, "download \(record.id) has neither a destination nor a folder")
        }
        let name = FileNameSanitizer.name(
            contentDisposition: response.head.value("Content-Disposition"),
            finalURLPath: response.finalURL.path
        )
        for number in 0..<1000 {
            let candidate = (directory as NSString).appendingPathComponent(
                number == 0 ? name : FileNameSanitizer.alternative(name, number: number)
            )
            if FileSystem.exists(candidate) || FileSystem.exists(candidate + ".part") { continue }
            if try environment.store.isDestinationClaimed(candidate, excluding: record.id) { continue }
            // Creating the part file exclusively claims the name against folder downloads running beside this one.
            switch Result(catching: { () throws(DownloadError) in
                try PartFile.open(path: candidate + ".part", exclusive: true)
            }) {
            case .success(let claimed): part = claimed
            case .failure(let error) where error.code == .destinationExists: continue
            case .failure(let error): throw error
            }
            // Stored with the rest of the first answer's facts, before any byte is written.
            record.destination = candidate
            await environment.report(.destinationResolved(candidate))
            return
        }
        throw DownloadError(.destinationExists, "no free name for \(name) in \(directory)")
    }

    // MARK: Finalising

    /// A run that finds no part file, and at the destination a file of exactly the length its record durably held in
    /// full, is looking at its own finished file: the previous process died between the rename and the completed state.
    private mutating func recognizeFinishedFile() async throws -> DownloadResult? {
        guard let destination = record.destination, let total = record.totalLength, record.durableOffset == total,
            record.isPartVerified, !FileSystem.exists(destination + ".part"), FileSystem.size(destination) == total
        else { return nil }
        let digests = try await Blocking.run {
            [computesSHA256 = record.options.computesSHA256, checksum = record.options.checksum] in
            var algorithms = Set<Checksum.Algorithm>()
            if let checksum { algorithms.insert(checksum.algorithm) }
            if computesSHA256 { algorithms.insert(.sha256) }
            return algorithms.isEmpty ? [:] : try FileDigest.hexDigests(of: destination, algorithms: algorithms)
        }
        if let checksum = record.options.checksum, digests[checksum.algorithm] != checksum.hex { return nil }
        record.state = .completed
        record.mayReplaceDestination = true
        record.completedAt = record.completedAt ?? Date()
        try environment.store.saveCompletion(record)
        return DownloadResult(
            id: id, url: record.url, path: destination, bytes: total, sha256: digests[.sha256], seconds: 0,
            resumedFrom: total, wasAlreadyComplete: true)
    }

    /// Verifies and moves the part file to its destination; nil when a fresh full fetch must be tried first.
    private mutating func finalize() async throws -> DownloadResult? {
        guard let part, let destination = record.destination else {
            throw DownloadError(.fileSystem, "nothing to finalise for \(record.url)")
        }
        let length = try part.length()
        if let total = record.totalLength, length > total { try part.truncate(to: total) }
        let size = min(length, record.totalLength ?? length)
        var algorithms = Set<Checksum.Algorithm>()
        if let checksum = record.options.checksum { algorithms.insert(checksum.algorithm) }
        if record.options.computesSHA256 { algorithms.insert(.sha256) }
        let digests = try await Blocking.run { [algorithms] in
            try part.sync()
            return algorithms.isEmpty ? [:] : try FileDigest.hexDigests(of: part.path, algorithms: algorithms)
        }
        if let checksum = record.options.checksum, digests[checksum.algorithm] != checksum.hex {
            let got = digests[checksum.algorithm] ?? "nothing"
            if (wasResumed || (resumedFrom ?? 0) > 0) && !freshFetchTried {
                environment.logger.notice(
                    "\(record.url): checksum mismatch after a resumed download; fetching it whole")
                freshFetchTried = true
                wasResumed = false
                try resetToZero()
                forceWhole = true
                return nil
            }
            FileSystem.remove(part.path)
            record.durableOffset = 0
            record.remoteFacts = nil
            throw DownloadError(
                .checksumMismatch,
                "checksum mismatch for \(record.url): expected \(checksum), got \(checksum.algorithm.rawValue)=\(got); "
                    + "the file was not kept"
            )
        }
        // Stored before the rename: if the process dies between the rename and the completed state, the next run
        // recognises the whole file at the destination as its own (`recognizeFinishedFile`).
        record.durableOffset = size
        record.totalLength = size
        record.segments = nil
        try environment.store.saveTransfer(record)
        let replacing = record.mayReplaceDestination
        let isFolderDownload = record.directory != nil
        let target = try await Blocking.run {
            let target = try Self.moveIntoPlace(
                part.path, destination: destination, replacing: replacing, isFolderDownload: isFolderDownload)
            FileSystem.syncDirectory(of: target)
            return target
        }
        self.part = nil
        record.destination = target
        record.state = .completed
        record.completedAt = Date()
        record.durableOffset = size
        record.totalLength = size
        record.attempts = 0
        record.error = nil
        record.mayReplaceDestination = true
        try environment.store.saveCompletion(record)
        let elapsed = environment.clock.now() - startedAt
        return DownloadResult(
            id: id,
            url: record.url,
            path: target,
            bytes: size,
            sha256: digests[.sha256],
            seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18,
            resumedFrom: resumedFrom ?? 0,
            wasAlreadyComplete: false
        )
    }

    /// Moves the verified part file to its destination. A folder download whose name was taken meanwhile takes the
    /// next free `name (n).ext`; a file download stops rather than replace a file Haul did not create.
    private static func moveIntoPlace(_ partPath: String, destination: String, replacing: Bool, isFolderDownload: Bool)
        throws -> String
    {
        let name = (destination as NSString).lastPathComponent
        let folder = (destination as NSString).deletingLastPathComponent as NSString
        for number in 0..<1000 {
            let target =
                number == 0
                ? destination : folder.appendingPathComponent(FileNameSanitizer.alternative(name, number: number))
            let result = Result { () throws(DownloadError) in
                try FileSystem.move(partPath, to: target, replacing: replacing)
            }
            switch result {
            case .success: return target
            case .failure(let error):
                if error.code != .destinationExists || !isFolderDownload { throw error }
            }
        }
        throw DownloadError(.destinationExists, "no free name for \(name) in \(folder)")
    }

    // MARK: Idle timeout

    /// Runs `body`, abandoning it when `activity` does not move for the idle timeout.
    private func withIdleWatchdog<T: Sendable>(
        _ activity: TransferActivity,
        _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await Haul.withIdleWatchdog(
            activity, seconds: record.options.idleTimeoutSeconds, clock: environment.idleClock,
            host: URL(string: record.url)?.host ?? record.url, body)
    }
}

/// The streaming half of a request: compare the overlap, write the rest with positional writes, checkpoint, and
/// report throttled progress.
struct TransferContext: Sendable {
    let id: DownloadID
    let part: PartFile
    let store: DownloadStore
    let events: EventHub
    let clock: EngineClock
    let settings: DownloadManager.Configuration.Engine
    let total: Int64?
    let limiters: [RateLimiter]

    /// Streams `body` (whose first byte belongs at `start`) and returns the offset after the last byte written.
    func stream(
        _ body: any AsyncSequence<ByteBuffer, any Error> & Sendable,
        start: Int64,
        compareUntil: Int64,
        expected: Int64?,
        activity: TransferActivity
    ) async throws -> Int64 {
        var position = start
        let end = expected.map { start + $0 }
        var lastCheckpointOffset = compareUntil
        var lastCheckpointTime = clock.now()
        var lastProgressTime = Duration.zero - settings.progressInterval
        var meter = SpeedMeter()
        var writeback = WritebackStarter(part: part, from: max(start, compareUntil))
        meter.record(bytes: compareUntil, at: lastCheckpointTime)
        let checkpointer = Checkpointer<Int64>(part: part) { [store, id] offset throws(DownloadError) in
            try store.saveDurableOffset(offset, for: id.rawValue)
        }
        do {
            try await streamChunks()
        } catch {
            // The original error wins; the checkpoint in flight only has to finish before the runner moves on.
            try? await checkpointer.drain()
            throw error
        }
        try await checkpointer.drain()
        if let end, position < end {
            throw DownloadError(
                .bodyTooShort,
                "connection closed after \(position - start) of \(end - start) bytes",
                isRetryable: true
            )
        }
        return max(position, compareUntil)

        func streamChunks() async throws {
            for try await chunk in body {
                activity.touch()
                var buffer = chunk
                if let end, position + Int64(buffer.readableBytes) > end {
                    let keep = Int(end - position)
                    buffer = buffer.getSlice(at: buffer.readerIndex, length: max(0, keep)) ?? ByteBuffer()
                    if buffer.readableBytes > 0 {
                        try write(&buffer, at: &position, compareUntil: compareUntil, activity: activity)
                    }
                    throw DownloadError(
                        .bodyTooLong,
                        "server sent more than the \(expected ?? 0) bytes it announced; not saving the excess",
                        isRetryable: true
                    )
                }
                let received = buffer.readableBytes
                try write(&buffer, at: &position, compareUntil: compareUntil, activity: activity)
                writeback.wrote(upTo: position)
                for limiter in limiters { try await limiter.acquire(received, clock: clock, activity: activity) }
                let now = clock.now()
                if position - lastCheckpointOffset >= settings.checkpointBytes
                    || (now - lastCheckpointTime >= settings.checkpointInterval && position > lastCheckpointOffset)
                {
                    try checkpointer.request(position)
                    lastCheckpointOffset = position
                    lastCheckpointTime = now
                }
                if now - lastProgressTime >= settings.progressInterval {
                    lastProgressTime = now
                    meter.record(bytes: position, at: now)
                    events.emit(
                        .progress(
                            DownloadProgress(
                                id: id,
                                receivedBytes: position,
                                totalBytes: total,
                                bytesPerSecond: meter.bytesPerSecond,
                                secondsRemaining: meter.secondsRemaining(total: total)
                            )
                        )
                    )
                }
            }
        }
    }

    private func write(
        _ buffer: inout ByteBuffer, at position: inout Int64, compareUntil: Int64, activity: TransferActivity
    ) throws {
        if position < compareUntil {
            let count = Int(min(compareUntil - position, Int64(buffer.readableBytes)))
            let held = try part.read(count: count, at: position)
            guard let received = buffer.readBytes(length: count), held == received else { throw OverlapMismatch() }
            position += Int64(count)
            if buffer.readableBytes == 0 { return }
        }
        try part.write(buffer, at: position)
        position += Int64(buffer.readableBytes)
        activity.setWritten(position)
    }
}
