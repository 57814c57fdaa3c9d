import HaulCore

// Size and rate values (`--limit-rate 2M`, `--min-split-size 4M`, the API's sizes): a value that parses is at least one
// byte and below 10^15; plain numbers and K, M, G suffixes (powers of 1024, either case) mean what they say.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    if let value = TokenBucket.parseRate(input) {
        expect(value >= 1 && value < 1_000_000_000_000_000, "1 byte to 10^15: \(value)", input: input)
    }
    let raw = bytes(start, count)
    if raw.count >= 4 {
        let number = Int64(raw.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) } % 100_000_000) + 1
        expect(TokenBucket.parseRate("\(number)") == number, "\(number)", input: input)
        expect(TokenBucket.parseRate("\(number)K") == number * 1024, "\(number)K", input: input)
        expect(TokenBucket.parseRate("\(number)m") == number << 20, "\(number)m", input: input)
        expect(TokenBucket.parseRate("\(number % 100_000 + 1)G") == (number % 100_000 + 1) << 30, "G", input: input)
        expect(TokenBucket.parseRate("-\(number)") == nil, "negative", input: input)
    }
    return 0
}
