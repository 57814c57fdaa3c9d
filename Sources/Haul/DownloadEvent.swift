import Foundation
import HaulCore
import Synchronization

/// Identifies one download.
public struct DownloadID: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The id as stored (a UUID string).
    public var rawValue: String

    /// Wraps a stored id.
    public init(_ rawValue: String) { self.rawValue = rawValue }

    public var description: String { rawValue }
}

/// Where a download is, in numbers.
public struct DownloadProgress: Sendable, Equatable {
    /// The download.
    public var id: DownloadID
    /// Bytes received so far (including bytes held from earlier runs).
    public var receivedBytes: Int64
    /// The full length, when known.
    public var totalBytes: Int64?
    /// Current speed over the last few seconds.
    public var bytesPerSecond: Double
    /// Time left at the current speed, when the length is known.
    public var secondsRemaining: Double?
    /// Connections open for this download right now.
    public var connections: Int = 1
}

/// What a finished download produced.
public struct DownloadResult: Sendable, Equatable, Codable {
    /// The download.
    public var id: DownloadID
    /// The URL asked for.
    public var url: String
    /// Where the file is.
    public var path: String
    /// Its length.
    public var bytes: Int64
    /// Its SHA-256, when computed (`computesSHA256` or a checksum was given).
    public var sha256: String?
    /// Seconds this run took.
    public var seconds: Double
    /// The offset this run started from (0 for a fresh download).
    public var resumedFrom: Int64
    /// Whether the file was already complete and nothing was fetched.
    public var wasAlreadyComplete: Bool
}

/// A state change or progress of a download, delivered to subscribers.
public enum DownloadEvent: Sendable, Equatable {
    /// The download moved to a new state; `error` is set for `failed` and for retries.
    case stateChanged(DownloadID, DownloadState, error: DownloadError?)
    /// Throttled progress (at most ~10 a second per download).
    case progress(DownloadProgress)
    /// A retryable error; the download waits `delay` then resumes.
    case retrying(DownloadID, error: DownloadError, delay: Duration)
    /// The download has its file name (folder downloads learn it from the first answer).
    case destinationResolved(DownloadID, path: String)
    /// The download finished and its file is at its destination.
    case completed(DownloadResult)
    /// The download failed for good.
    case failed(DownloadID, DownloadError)

    /// The download the event is about.
    public var id: DownloadID {
        switch self {
        case .stateChanged(let id, _, _), .retrying(let id, _, _), .destinationResolved(let id, _), .failed(let id, _):
            id
        case .progress(let progress): progress.id
        case .completed(let result): result.id
        }
    }
}

/// Fans events out to subscribers, each with its own stream and optional filter; callable from any task.
final class EventHub: Sendable {
    private struct Subscriber {
        var filter: DownloadID?
        var continuation: AsyncStream<DownloadEvent>.Continuation
    }

    private let subscribers = Mutex<[UUID: Subscriber]>([:])

    func subscribe(to filter: DownloadID?) -> AsyncStream<DownloadEvent> {
        let (stream, continuation) = AsyncStream<DownloadEvent>.makeStream()
        let key = UUID()
        subscribers.withLock { $0[key] = Subscriber(filter: filter, continuation: continuation) }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.removeValue(forKey: key) }
        }
        return stream
    }

    func emit(_ event: DownloadEvent) {
        let targets = subscribers.withLock { all in
            all.values.filter { $0.filter == nil || $0.filter == event.id }.map(\.continuation)
        }
        for continuation in targets { continuation.yield(event) }
    }

    func finishAll() {
        let all = subscribers.withLock { all in
            defer { all.removeAll() }
            return Array(all.values)
        }
        for subscriber in all { subscriber.continuation.finish() }
    }
}
