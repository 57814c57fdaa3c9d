import HaulCore

// Metalink 4 and 3 documents (`haul get FILE.meta4`, a server's application/metalink4+xml): parsing never crashes or
// reads past its input; a document that parses describes files with names, sizes from 0 to 2^53, hashes of their
// algorithm's length, pieces of a positive length, and URLs of http, https or ftp, best priority first.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    guard let metalink = try? Metalink.parse(input) else { return 0 }
    expect(!metalink.files.isEmpty, "some file", input: input)
    for file in metalink.files {
        expect(!file.name.isEmpty, "a name", input: input)
        if let size = file.size { expect(size >= 0 && size <= 1 << 53, "a size: \(size)", input: input) }
        for hash in file.hashes {
            expect(hash.hex.count == hash.algorithm.byteCount * 2, "\(hash.algorithm) hex", input: input)
        }
        if let pieces = file.pieces {
            expect(pieces.length > 0 && !pieces.hashes.isEmpty, "pieces", input: input)
            expect(
                pieces.hashes.allSatisfy { $0.count == pieces.algorithm.byteCount * 2 }, "piece hex", input: input)
        }
        let priorities = file.urls.map { $0.priority ?? 999_999 }
        expect(priorities == priorities.sorted(), "best first: \(priorities)", input: input)
        for source in file.urls {
            let scheme = source.url.prefix { $0 != ":" }.lowercased()
            expect(["http", "https", "ftp"].contains(scheme), "a URL Haul fetches: \(source.url)", input: input)
        }
    }
    return 0
}
