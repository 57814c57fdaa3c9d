import Foundation
import HaulCore

// ETag (RFC 9110 §8.8.3): a parsed tag is quoted, has no space or comma, prints as a header value that parses back to
// the same tag, and matches itself weakly. A tag Haul had to mend (unquoted) is weak, so never used for If-Range.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    guard let tag = EntityTag(input) else { return 0 }
    let opaque = tag.opaqueTag
    expect(opaque.count >= 2 && opaque.hasPrefix("\"") && opaque.hasSuffix("\""), "quoted", input: input)
    expect(
        opaque.unicodeScalars.allSatisfy { $0.isASCII && $0.value > 0x20 && $0 != "," }, "visible ASCII", input: input)
    expect(EntityTag(tag.description) == tag, "round trip of \(tag)", input: input)
    expect(tag.weaklyMatches(tag), "matches itself", input: input)
    let trimmed = input.trimmingCharacters(in: .whitespaces)
    let body = trimmed.hasPrefix("W/") || trimmed.hasPrefix("w/") ? String(trimmed.dropFirst(2)) : trimmed
    if !(body.count >= 2 && body.hasPrefix("\"") && body.hasSuffix("\"")) {
        expect(tag.isWeak, "a mended tag is weak", input: input)
    }
    return 0
}
