import Foundation

/// When to retry and how long to wait: exponential backoff with jitter, `Retry-After` honoured, a bound on attempts
/// in a row that made no progress.
public struct RetryPolicy: Sendable, Equatable {
    /// Attempts in a row without progress before giving up.
    public var maximumAttemptsWithoutProgress: Int
    /// The first backoff.
    public var initialDelay: Duration
    /// The longest backoff.
    public var maximumDelay: Duration
    /// The longest `Retry-After` Haul will honour; longer requests are cut to this.
    public var maximumRetryAfter: Duration

    /// The defaults of DESIGN.md: 5 attempts, 1 s doubling to 60 s.
    public init(
        maximumAttemptsWithoutProgress: Int = 5,
        initialDelay: Duration = .seconds(1),
        maximumDelay: Duration = .seconds(60),
        maximumRetryAfter: Duration = .seconds(3600)
    ) {
        self.maximumAttemptsWithoutProgress = maximumAttemptsWithoutProgress
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.maximumRetryAfter = maximumRetryAfter
    }

    /// Statuses worth retrying: 408, 429, 500, 502, 503, 504.
    public static func isRetryableStatus(_ status: Int) -> Bool {
        [408, 429, 500, 502, 503, 504].contains(status)
    }

    /// What to do after a failed attempt.
    public enum Decision: Equatable, Sendable {
        /// Wait this long, then try again.
        case retry(after: Duration)
        /// Stop: the error is final or the attempts ran out.
        case giveUp
    }

    /// Decides after the `failures`-th failure in a row without progress (1 for the first). `jitter` in 0...1 comes
    /// from the caller so the policy stays a pure function; the wait is `base * (0.5 + jitter/2)`.
    public func decide(failures: Int, error: DownloadError, jitter: Double) -> Decision {
        guard error.isRetryable, failures < maximumAttemptsWithoutProgress else { return .giveUp }
        if let retryAfter = error.retryAfter {
            return .retry(after: min(max(retryAfter, .zero), maximumRetryAfter))
        }
        return .retry(after: backoff(failures: failures, jitter: jitter))
    }

    /// The exponential backoff for the n-th failure: initial × 2^(n-1), capped, scaled by jitter into [½, 1].
    public func backoff(failures: Int, jitter: Double) -> Duration {
        let exponent = max(0, min(failures - 1, 30))
        let base = min(initialDelay * (1 << exponent), maximumDelay)
        let factor = 0.5 + 0.5 * min(max(jitter, 0), 1)
        return base * factor
    }

    /// Parses `Retry-After` (RFC 9110 §10.2.3): delay-seconds, or an HTTP date compared with `now` (seconds since
    /// 1970, normally the response's `Date`). Nil when malformed.
    public static func retryAfter(_ value: String, now: Int64?) -> Duration? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if !trimmed.isEmpty, trimmed.allSatisfy({ $0.isASCII && $0.isNumber }) {
            guard let seconds = Int64(trimmed.prefix(12)) else { return nil }
            return .seconds(seconds)
        }
        guard let date = HTTPDate.parse(trimmed), let now else { return nil }
        return .seconds(max(0, date - now))
    }
}
