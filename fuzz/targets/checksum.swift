import HaulCore

// `--checksum ALGO=HEX` (and the API's checksum): a checksum that parses names a known algorithm and exactly its
// digest length in lowercase hex, and prints as text that parses back to the same checksum.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    switch Result(catching: { () throws(DownloadError) in try Checksum(parsing: input) }) {
    case .success(let checksum):
        expect(checksum.hex.count == checksum.algorithm.byteCount * 2, "digest length", input: input)
        expect(checksum.hex.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }, "hex", input: input)
        expect((try? Checksum(parsing: checksum.description)) == checksum, "round trip", input: input)
    case .failure(let error):
        expect(error.code == .invalidArgument && !error.message.isEmpty, "a usage error", input: input)
    }
    return 0
}
