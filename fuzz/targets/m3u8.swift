import HaulCore

// HLS playlists (a URL answering application/vnd.apple.mpegurl): parsing never crashes or reads past its input; a
// media playlist's segments are numbered from its media sequence, their byte ranges and durations are not negative,
// and IVs are 16 bytes; a master playlist has variants with URIs, and one is always chosen by default.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    guard let playlist = try? HLSPlaylist.parse(input) else { return 0 }
    switch playlist {
    case .media(let media):
        for (index, segment) in media.segments.enumerated() {
            expect(segment.sequence == media.mediaSequence + index, "sequence", input: input)
            expect(segment.duration >= 0 && !segment.uri.isEmpty, "duration and URI", input: input)
            if let range = segment.byteRange { expect(range.length > 0 && range.offset >= 0, "range", input: input) }
            if let iv = segment.key?.iv { expect(iv.count == 16, "IV", input: input) }
        }
    case .master(let master):
        expect(!master.variants.isEmpty && master.variant(nil) != nil, "a variant", input: input)
        _ = master.variant(input)
    }
    return 0
}
