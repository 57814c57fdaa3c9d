import Foundation
import HaulCore

// Content-Disposition (RFC 6266, RFC 8187 `filename*`): whatever a server proposes, the name Haul creates is one safe
// path component (not empty, not `.` or `..`, no `/`, NUL or control character, no leading dot or dash, no trailing dot
// or space, at most 200 bytes), and sanitising it again changes nothing. Any name sent percent-encoded as
// `filename*=UTF-8''…` decodes to exactly that name.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    let name = FileNameSanitizer.name(contentDisposition: input, finalURLPath: "/fallback")
    checkSafe(name, input: input)
    if let proposed = ContentDisposition.fileName(from: input) {
        checkSafe(FileNameSanitizer.sanitize(proposed), input: input)
    }
    checkSafe(FileNameSanitizer.sanitize(input), input: input)
    checkSafe(FileNameSanitizer.alternative(FileNameSanitizer.sanitize(input), number: 99), input: input, limit: 210)

    let hex = Array("0123456789ABCDEF".utf8)
    var percentEncoded: [UInt8] = []
    for byte in input.utf8 { percentEncoded += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 15)]] }
    let encoded = String(decoding: percentEncoded, as: UTF8.self)
    let header = "attachment; filename=\"fallback.bin\"; filename*=UTF-8''\(encoded)"
    expect(ContentDisposition.fileName(from: header) == input, "RFC 8187 round trip", input: input)
    return 0
}

private func checkSafe(_ name: String, input: String, limit: Int = FileNameSanitizer.maximumBytes) {
    expect(!name.isEmpty && name != "." && name != "..", "a name is left: \(String(reflecting: name))", input: input)
    // By bytes: a separator or a dot inside a larger character (after U+0605, before a combining mark) counts.
    let bytes = Array(name.utf8)
    expect(
        !bytes.contains(UInt8(ascii: "/")) && !bytes.contains(UInt8(ascii: "\\")),
        "one component: \(String(reflecting: name))", input: input)
    expect(
        !name.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }, "no control character",
        input: input)
    expect(
        bytes.first != UInt8(ascii: ".") && bytes.first != UInt8(ascii: "-"),
        "no leading dot or dash: \(String(reflecting: name))", input: input)
    expect(
        bytes.last != UInt8(ascii: ".") && bytes.last != UInt8(ascii: " "),
        "no trailing dot or space: \(String(reflecting: name))", input: input)
    expect(name.utf8.count <= limit, "at most \(limit) bytes: \(name.utf8.count)", input: input)
    if limit == FileNameSanitizer.maximumBytes {
        expect(
            FileNameSanitizer.sanitize(name) == name, "sanitising is idempotent: \(String(reflecting: name))",
            input: input)
    }
}
