import HaulCore
import Synchronization

/// A bandwidth limit shared by the transfers it covers (all downloads, or one download's connections), changeable
/// while they run. Unlimited when its rate is nil.
final class RateLimiter: Sendable {
    private let bucket = Mutex<TokenBucket?>(nil)
    /// The clock the bucket's times and the waits are on: the limiter's own, so that every transfer it covers gives
    /// the bucket times of one origin (a limit of all downloads is shared by runners that started at different
    /// times, and a time counted from a later start refilled the bucket for the others).
    private let clock: EngineClock

    init(bytesPerSecond: Int64? = nil, clock: EngineClock) {
        self.clock = clock
        setRate(bytesPerSecond)
    }

    /// Sets the rate; nil removes the limit.
    func setRate(_ bytesPerSecond: Int64?) {
        bucket.withLock { bucket in
            guard let bytesPerSecond else {
                bucket = nil
                return
            }
            if bucket == nil { bucket = TokenBucket(rate: bytesPerSecond) } else { bucket?.setRate(bytesPerSecond) }
        }
    }

    /// Accounts for `bytes` just received and sleeps on `clock` as long as the limit requires, in slices of at most
    /// a quarter second after each of which `touch` tells the connection is active, so throttling is never mistaken
    /// for a stalled server.
    ///
    /// The wait ends at a time fixed when the bytes were counted, not a wait's length after the sleep began: the
    /// bucket's debt already includes the bytes of the connections that took before, and a task that runs late
    /// (a busy machine) would otherwise add its delay to the limit's.
    func acquire(_ bytes: Int, touch: () -> Void) async throws {
        let now = clock.now()
        let wait = bucket.withLock { $0?.take(bytes, at: now) } ?? .zero
        guard wait > .zero else { return }
        let end = now + wait
        var slept = now
        while slept < end {
            slept = min(end, slept + .milliseconds(250))
            try await clock.sleepUntil(slept)
            touch()
        }
    }
}
