import HaulCore

// DASH manifests (a URL answering application/dash+xml): parsing never crashes or reads past its input; a manifest
// that parses has representations with ids, each with at least one segment, byte ranges of positive length, and a
// best representation of each kind it has.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    guard let manifest = try? DASHManifest.parse(input) else { return 0 }
    expect(!manifest.representations.isEmpty, "a representation", input: input)
    for representation in manifest.representations {
        expect(!representation.id.isEmpty && !representation.segments.isEmpty, "an id and segments", input: input)
        for range in representation.segments.compactMap(\.range) {
            expect(range.length > 0 && range.offset >= 0, "a range", input: input)
        }
        expect(manifest.best(representation.kind) != nil, "a best one", input: input)
    }
    _ = manifest.best(.video, choice: input)
    return 0
}
