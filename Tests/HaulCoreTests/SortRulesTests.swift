import HaulCore
import Testing

@Suite("Sort rules")
struct SortRulesTests {
    @Test("names, MIME types and URLs; the first rule that matches decides; case does not matter")
    func matching() throws {
        let rules = try SortRules(parsing: [
            "*.iso=ISO", "video/*=Media/Videos", "*://cdn.example.com/*=CDN", "*.tar.gz = Archives",
        ])
        #expect(rules.rules.map(\.kind) == [.name, .mimeType, .url, .name])
        #expect(rules.folder(name: "debian.ISO", contentType: nil, url: "https://a/x") == "ISO")
        #expect(rules.folder(name: "clip", contentType: "Video/MP4; codecs=avc1", url: "https://a/x") == "Media/Videos")
        #expect(rules.folder(name: "a.bin", contentType: "text/plain", url: "https://cdn.example.com/a/b") == "CDN")
        #expect(rules.folder(name: "src.tar.gz", contentType: nil, url: "https://a/x") == "Archives")
        // An .iso from the CDN: the first rule decides.
        #expect(rules.folder(name: "a.iso", contentType: nil, url: "https://cdn.example.com/a.iso") == "ISO")
        #expect(rules.folder(name: "notes.txt", contentType: "text/plain", url: "https://a/x") == nil)
    }

    @Test("a bad rule names itself and what is wrong")
    func refusals() {
        let cases: [(String, String)] = [
            ("*.iso", "PATTERN=FOLDER"), ("=ISO", "pattern before = is empty"), ("*.iso=", "folder after = is empty"),
            ("*.iso=/etc", "relative"), ("*.iso=a/../b", ". or .. parts"), ("*.iso=./x", ". or .. parts"),
            ("a/b/c=X", "neither a file name nor a MIME type"), ("*.iso=a//b", ". or .. parts"),
        ]
        for (text, why) in cases {
            #expect(throws: DownloadError.self, "\(text)") { _ = try SortRules(parsing: [text]) }
            do { _ = try SortRules(parsing: [text]) } catch {
                #expect(error.message.contains("'\(text)'") && error.message.contains(why), "\(error.message)")
            }
        }
    }
}
