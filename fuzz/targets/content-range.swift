import HaulCore

// Content-Range (RFC 9110 §14.4): whatever a server sends, a parsed range is ordered and inside its total, and the
// canonical form of what was parsed parses back to the same value.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    switch ContentRange(input) {
    case .satisfied(let first, let last, let total)?:
        expect(first >= 0 && first <= last, "first ≤ last", input: input)
        expect(last < ContentRange.maximumLength + 1, "within the largest length", input: input)
        if let total { expect(last < total && total <= ContentRange.maximumLength, "last < total", input: input) }
        let canonical = "bytes \(first)-\(last)/\(total.map(String.init) ?? "*")"
        expect(
            ContentRange(canonical) == .satisfied(first: first, last: last, total: total), "round trip",
            input: input)
        expect(ContentRange(input)?.length == last - first + 1, "length", input: input)
    case .unsatisfied(let total)?:
        expect(total >= 0 && total <= ContentRange.maximumLength, "total in range", input: input)
        expect(ContentRange("bytes */\(total)") == .unsatisfied(total: total), "round trip", input: input)
    case nil:
        break
    }
    return 0
}
