import Foundation

/// A token bucket for bandwidth limits, as a pure value: time comes in, waits come out.
///
/// Tokens (bytes) refill at `rate` a second up to `capacity`. Taking more than is there leaves a debt, and the wait
/// returned is how long the debt takes to refill, so whatever the chunk sizes, the bytes allowed by time t never
/// exceed `capacity + rate × t`.
public struct TokenBucket: Sendable, Equatable {
    /// Bytes a second.
    public private(set) var rate: Int64
    /// The most bytes allowed in a burst.
    public private(set) var capacity: Int64
    private var tokens: Double
    private var last: Duration?

    /// A bucket that starts full. The burst is a tenth of a second's worth, at least 16 KiB.
    public init(rate: Int64) {
        precondition(rate > 0, "a rate limit is positive")
        self.rate = rate
        capacity = max(rate / 10, 16 * 1024)
        tokens = Double(capacity)
    }

    /// Changes the rate, keeping the tokens (capped to the new capacity).
    public mutating func setRate(_ rate: Int64) {
        precondition(rate > 0, "a rate limit is positive")
        self.rate = rate
        capacity = max(rate / 10, 16 * 1024)
        tokens = min(tokens, Double(capacity))
    }

    /// Takes `bytes` at time `now` and returns how long to wait before going on (zero when within the limit).
    public mutating func take(_ bytes: Int, at now: Duration) -> Duration {
        if let last {
            let elapsed = now - last
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            tokens = min(Double(capacity), tokens + max(0, seconds) * Double(rate))
        }
        last = now
        tokens -= Double(bytes)
        guard tokens < 0 else { return .zero }
        return .nanoseconds(Int64((-tokens / Double(rate) * 1e9).rounded(.up)))
    }

    /// Parses a limit: a rate as `parseRate` reads it, or 0 for none, as curl's `--limit-rate 0`, aria2's
    /// `--max-overall-download-limit=0` and a schedule's `rate=0` mean. Nil when malformed or negative.
    public static func parseLimit(_ text: String) -> Int64? {
        var number = Array(text.trimmingHTTPSpace.utf8)
        if let last = number.last, "kmgKMG".utf8.contains(last) { number.removeLast() }
        let dots = number.count { $0 == UInt8(ascii: ".") }
        let isZero =
            number.count > dots && dots <= 1
            && number.allSatisfy { $0 == UInt8(ascii: "0") || $0 == UInt8(ascii: ".") }
        return isZero ? 0 : parseRate(text)
    }

    /// Parses a rate such as `500K`, `2M`, `1G` or `1048576` (bytes a second; K, M, G are powers of 1024, as in
    /// curl and wget). Nil when malformed or not positive.
    public static func parseRate(_ text: String) -> Int64? {
        // Read as bytes: a rate is ASCII, and the first use of Foundation's character sets and Unicode's number
        // property cost every `haul get` about a million instructions at its start.
        var bytes = Array(text.trimmingHTTPSpace.utf8)
        var multiplier: Double = 1
        switch bytes.last.map({ $0 | 0x20 }) {
        case UInt8(ascii: "k"): multiplier = 1024
        case UInt8(ascii: "m"): multiplier = 1_048_576
        case UInt8(ascii: "g"): multiplier = 1_073_741_824
        default: break
        }
        if multiplier > 1 { bytes.removeLast() }
        guard !bytes.isEmpty,
            bytes.allSatisfy({ ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || $0 == UInt8(ascii: ".") }),
            let value = Double(String(decoding: bytes, as: UTF8.self)),
            value > 0, value * multiplier < 1e15
        else { return nil }
        return max(1, Int64(value * multiplier))
    }
}
