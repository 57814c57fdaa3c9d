import HaulCore

// Checksum files (`--checksum auto`: URL.sha256, SHA256SUMS): reading never crashes or reads past its input; every
// entry found has a digest of its algorithm's length, and a name, when it has one, that is not empty.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    for entry in ChecksumList.entries(input) {
        expect(entry.checksum.hex.count == entry.checksum.algorithm.byteCount * 2, "digest length", input: input)
        if let name = entry.name { expect(!name.isEmpty, "a name", input: input) }
    }
    _ = ChecksumList.checksum(in: input, for: "file.iso", algorithm: nil, isList: true)
    _ = ChecksumList.sidecars(of: input)
    return 0
}
