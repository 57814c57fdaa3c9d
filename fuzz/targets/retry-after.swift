import HaulCore

// Retry-After (RFC 9110 §10.2.3): whatever a server sends, the wait is never negative; delay-seconds of up to twelve
// digits are taken as they are; a date is measured from the response's Date.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    let now: Int64 = 1_763_900_000
    for clock in [now, nil] {
        if let wait = RetryPolicy.retryAfter(input, now: clock) {
            expect(wait >= .zero, "not negative: \(wait)", input: input)
        }
    }
    let raw = bytes(start, count)
    if raw.count >= 8 {
        let seconds = Int64(raw.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 1_000_000_000_000)
        expect(
            RetryPolicy.retryAfter(" \(seconds) ", now: nil) == .seconds(seconds), "delay-seconds \(seconds)",
            input: input)
        if let date = HTTPDate.parse(input) {
            expect(
                RetryPolicy.retryAfter(input, now: date - seconds) == .seconds(seconds), "a date \(seconds) s later",
                input: input)
        }
    }
    return 0
}
