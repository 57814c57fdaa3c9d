import HaulCore
import Synchronization

/// A bandwidth limit shared by the transfers it covers (all downloads, or one download's connections), changeable
/// while they run. Unlimited when its rate is nil.
final class RateLimiter: Sendable {
    private let bucket = Mutex<TokenBucket?>(nil)

    init(bytesPerSecond: Int64? = nil) { setRate(bytesPerSecond) }

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
    func acquire(_ bytes: Int, clock: EngineClock, touch: () -> Void) async throws {
        var wait = bucket.withLock { $0?.take(bytes, at: clock.now()) } ?? .zero
        while wait > .zero {
            let slice = min(wait, .milliseconds(250))
            try await clock.sleep(slice)
            touch()
            wait -= slice
        }
    }
}
