import HaulCore
import Testing

@Suite("Token bucket")
struct TokenBucketTests {
    /// Feeds chunks as fast as the bucket allows and checks that by every moment the bytes let through never exceed
    /// capacity + rate × time.
    @Test(arguments: [(100_000, 1000), (100_000, 65_536), (1_000_000, 256 * 1024), (50_000, 17)])
    func neverExceedsTheRate(rate: Int64, chunk: Int) {
        var bucket = TokenBucket(rate: rate)
        var now = Duration.zero
        var passed: Int64 = 0
        for _ in 0..<500 {
            now += bucket.take(chunk, at: now)
            passed += Int64(chunk)
            let seconds = Double(now.components.seconds) + Double(now.components.attoseconds) / 1e18
            #expect(Double(passed) <= Double(bucket.capacity + Int64(chunk)) + Double(rate) * seconds + 1)
        }
        // And it does not throttle below the rate: the time taken is what the bytes past the burst need.
        let seconds = Double(now.components.seconds) + Double(now.components.attoseconds) / 1e18
        #expect(seconds <= max(0, Double(passed - bucket.capacity) / Double(rate)) + 0.01)
    }

    @Test func idleTimeRefillsOnlyUpToTheCapacity() {
        var bucket = TokenBucket(rate: 100_000)
        #expect(bucket.take(10_000, at: .zero) == .zero)
        // An hour idle does not save up an hour of bytes.
        #expect(bucket.take(Int(bucket.capacity), at: .seconds(3600)) == .zero)
        #expect(bucket.take(50_000, at: .seconds(3600)) == .milliseconds(500))
    }

    @Test func changingTheRate() {
        var bucket = TokenBucket(rate: 100_000)
        _ = bucket.take(Int(bucket.capacity), at: .zero)
        bucket.setRate(1_000_000)
        #expect(bucket.take(100_000, at: .zero) == .milliseconds(100))
    }

    @Test(
        "rates",
        arguments: [("500K", Int64(512_000)), ("2M", 2_097_152), ("1g", 1_073_741_824), ("1024", 1024), ("1.5K", 1536)]
    )
    func parse(text: String, rate: Int64) {
        #expect(TokenBucket.parseRate(text) == rate)
    }

    @Test(arguments: ["", "K", "-5", "0", "fast", "5KB", "1e3", "99999999999999G"])
    func badRates(text: String) {
        #expect(TokenBucket.parseRate(text) == nil)
    }

    @Test(
        "a limit is a rate, or 0 for none (curl's --limit-rate 0); anything else is refused",
        arguments: [
            ("0", Int64?.some(0)), ("0K", 0), ("0.0", 0), ("00m", 0), ("2M", 2_097_152), ("0.5K", 512), ("", nil),
            ("K", nil), ("-0", nil), ("-5", nil), ("0x", nil), ("fast", nil), ("0.0.0", nil), (".", nil),
        ] as [(String, Int64?)])
    func limits(text: String, limit: Int64?) {
        #expect(TokenBucket.parseLimit(text) == limit)
    }
}
