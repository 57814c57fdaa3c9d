import Foundation
import HaulCore

// `--header 'Name: value'` (and the API's headers): a header that parses has an HTTP token for a name and a value with
// no line break or other control character (so nothing can be smuggled into the request), trimmed, and prints as a line
// that parses back to the same header. One that does not parse is an invalid-argument error.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    switch Result(catching: { () throws(DownloadError) in try RequestHeader(parsing: input) }) {
    case .success(let header):
        expect(RequestHeader.isValidName(header.name), "a token name", input: input)
        expect(
            !header.value.unicodeScalars.contains { $0 == "\r" || $0 == "\n" || $0 == "\0" }, "no line break",
            input: input)
        expect(header.value == header.value.trimmingCharacters(in: .whitespaces), "trimmed", input: input)
        expect(
            (try? RequestHeader(parsing: "\(header.name): \(header.value)")) == header, "round trip", input: input)
    case .failure(let error):
        expect(error.code == .invalidArgument && !error.message.isEmpty, "a usage error", input: input)
    }
    return 0
}
