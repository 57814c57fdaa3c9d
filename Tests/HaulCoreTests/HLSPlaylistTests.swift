import HaulCore
import Testing

@Suite("HLS playlists")
struct HLSPlaylistTests {
    @Test("a media playlist: segments with their sequence, keys, byte ranges, init sections and discontinuities")
    func media() throws {
        let text = """
            #EXTM3U
            #EXT-X-TARGETDURATION:4
            #EXT-X-MEDIA-SEQUENCE:7
            #EXT-X-MAP:URI="init.mp4",BYTERANGE="720@0"
            #EXT-X-KEY:METHOD=AES-128,URI="https://k/key?a=1,b=2",IV=0x000102030405060708090A0B0C0D0E0F
            #EXTINF:4.0,first
            #EXT-X-BYTERANGE:1000@720
            all.mp4
            #EXTINF:3.5,
            #EXT-X-BYTERANGE:500
            all.mp4
            #EXT-X-KEY:METHOD=NONE
            #EXT-X-DISCONTINUITY
            #EXTINF:2,
            other.ts
            #EXT-X-ENDLIST
            """
        guard case .media(let media) = try HLSPlaylist.parse(text) else {
            Issue.record("not a media playlist")
            return
        }
        #expect(media.isEnded && media.targetDuration == 4 && media.segments.count == 3)
        #expect(media.segments.map(\.sequence) == [7, 8, 9])
        #expect(media.segments[0].byteRange == .init(length: 1000, offset: 720))
        // A range without an offset follows the previous one of the same URI.
        #expect(media.segments[1].byteRange == .init(length: 500, offset: 1720))
        #expect(media.segments[0].key?.uri == "https://k/key?a=1,b=2" && media.segments[0].key?.iv?.count == 16)
        #expect(media.segments[2].key == nil && media.segments[2].discontinuity)
        #expect(media.segments[0].map == .init(uri: "init.mp4", byteRange: .init(length: 720, offset: 0)))
    }

    @Test("a master playlist: the highest bandwidth, or the variant named by resolution, height, bandwidth or URI")
    func master() throws {
        let text = """
            #EXTM3U
            #EXT-X-STREAM-INF:BANDWIDTH=800000,RESOLUTION=640x360,CODECS="avc1.4d401e,mp4a.40.2"
            low/index.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=2500000,RESOLUTION=1280x720
            mid/index.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=5000000,RESOLUTION=1920x1080
            high/index.m3u8
            """
        guard case .master(let master) = try HLSPlaylist.parse(text) else {
            Issue.record("not a master playlist")
            return
        }
        #expect(master.variant(nil)?.uri == "high/index.m3u8")
        #expect(master.variant("1280x720")?.uri == "mid/index.m3u8")
        #expect(master.variant("360p")?.uri == "low/index.m3u8")
        #expect(master.variant("2500000")?.uri == "mid/index.m3u8")
        #expect(master.variant("low")?.uri == "low/index.m3u8")
        #expect(master.variant("4k") == nil)
    }

    @Test("what is not a playlist Haul downloads is refused, naming the line")
    func refusals() {
        let cases: [(String, String)] = [
            ("hello", "line 1"), ("#EXTM3U\nseg.ts", "line 2: a URI without #EXTINF"),
            ("#EXTM3U\n#EXT-X-KEY:METHOD=SAMPLE-AES,URI=\"k\"", "SAMPLE-AES"),
            ("#EXTM3U\n#EXT-X-KEY:METHOD=AES-128,URI=\"k\",KEYFORMAT=\"com.apple.streamingkeydelivery\"", "DRM"),
            ("#EXTM3U\n#EXT-X-KEY:METHOD=AES-128,URI=\"k\",IV=0x01", "IV must be"),
            ("#EXTM3U\n#EXTINF:1,\n#EXT-X-BYTERANGE:10\nseg.ts", "without an offset"),
            ("#EXTM3U\n#EXT-X-STREAM-INF:RESOLUTION=1x1\nv.m3u8", "BANDWIDTH"),
            ("#EXTM3U\n#EXT-X-MAP:URI=\"unclosed", "unclosed"),
            // Ranges of 2^50 bytes that follow each other, each starting where the one before ended: refused once the
            // offset passes 2^50, long before 8,192 of them would pass Int64.
            (
                "#EXTM3U\n#EXTINF:1,\n#EXT-X-BYTERANGE:1125899906842624@0\nseg.ts\n"
                    + String(repeating: "#EXTINF:1,\n#EXT-X-BYTERANGE:1125899906842624\nseg.ts\n", count: 9000),
                "line 10: a byte range's offset must be a number up to 2^50"
            ),
        ]
        for (text, why) in cases {
            #expect(throws: DownloadError.self) { _ = try HLSPlaylist.parse(text) }
            do { _ = try HLSPlaylist.parse(text) } catch {
                #expect(error.message.contains(why), "\(error.message)")
            }
        }
    }
}
