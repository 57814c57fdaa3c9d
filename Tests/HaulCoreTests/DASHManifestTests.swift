import HaulCore
import Testing

@Suite("DASH manifests")
struct DASHManifestTests {
    @Test("SegmentTemplate: $Number%05d$ counted from the duration, a timeline with repeats and $Time$, base URLs")
    func templates() throws {
        let text = """
            <?xml version="1.0"?>
            <MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static" mediaPresentationDuration="PT5.5S">
              <BaseURL>media/</BaseURL>
              <Period>
                <AdaptationSet contentType="video">
                  <SegmentTemplate timescale="1000" duration="2000" initialization="$RepresentationID$/init.mp4"
                    media="$RepresentationID$/$Number%05d$.m4s" startNumber="3"/>
                  <Representation id="hi" bandwidth="900000" width="1280" height="720"/>
                  <Representation id="lo" bandwidth="300000" width="640" height="360"/>
                </AdaptationSet>
                <AdaptationSet mimeType="audio/mp4">
                  <Representation id="a" bandwidth="64000">
                    <SegmentTemplate timescale="10" media="a-$Time$.m4s" initialization="a-init.mp4">
                      <SegmentTimeline><S t="0" d="20" r="1"/><S d="15"/></SegmentTimeline>
                    </SegmentTemplate>
                  </Representation>
                </AdaptationSet>
              </Period>
            </MPD>
            """
        let manifest = try DASHManifest.parse(text)
        let video = try #require(manifest.best(.video))
        #expect(video.id == "hi" && video.bases == ["media/"])
        #expect(video.initialization?.uri == "hi/init.mp4")
        #expect(video.segments.map(\.uri) == ["hi/00003.m4s", "hi/00004.m4s", "hi/00005.m4s"])
        #expect(manifest.best(.video, choice: "360p")?.id == "lo")
        #expect(manifest.best(.video, choice: "640x360")?.id == "lo")
        let audio = try #require(manifest.best(.audio))
        #expect(audio.segments.map(\.uri) == ["a-0.m4s", "a-20.m4s", "a-40.m4s"])
    }

    @Test("SegmentList with URLs and byte ranges; SegmentBase is the representation's one file")
    func listsAndBase() throws {
        let text = """
            <MPD type="static" mediaPresentationDuration="PT2S"><Period>
              <AdaptationSet mimeType="video/mp4">
                <Representation id="v" bandwidth="1">
                  <BaseURL>v.mp4</BaseURL>
                  <SegmentList><Initialization range="0-99"/>
                    <SegmentURL mediaRange="100-199"/><SegmentURL mediaRange="200-250"/></SegmentList>
                </Representation>
                <Representation id="w" bandwidth="2"><BaseURL>w.mp4</BaseURL><SegmentBase indexRange="0-9"/>
                </Representation>
              </AdaptationSet>
            </Period></MPD>
            """
        let manifest = try DASHManifest.parse(text)
        let ranges = try #require(manifest.representations.first { $0.id == "v" })
        #expect(ranges.initialization?.range == .init(length: 100, offset: 0))
        #expect(ranges.segments.map(\.range) == [.init(length: 100, offset: 100), .init(length: 51, offset: 200)])
        let base = try #require(manifest.representations.first { $0.id == "w" })
        #expect(base.bases == ["w.mp4"] && base.segments.count == 1 && base.segments[0].uri.isEmpty)
    }

    @Test("live, several periods, or a template that cannot be read: refused, saying what")
    func refusals() {
        let cases: [(String, String)] = [
            ("<MPD type=\"dynamic\"><Period/></MPD>", "live"),
            ("<MPD><Period/><Period/></MPD>", "2 periods"),
            ("<html/>", "not an MPD"),
            (
                "<MPD mediaPresentationDuration=\"PT1S\"><Period><AdaptationSet><Representation id=\"x\">"
                    + "<SegmentTemplate media=\"$Nope$.m4s\" duration=\"1\"/></Representation></AdaptationSet></Period></MPD>",
                "$Nope$"
            ),
            (
                "<MPD><Period><AdaptationSet><Representation id=\"x\"><SegmentTemplate media=\"$Number$\" duration=\"1\"/>"
                    + "</Representation></AdaptationSet></Period></MPD>",
                "without a duration"
            ),
            ("<MPD mediaPresentationDuration=\"1S\"><Period/></MPD>", "the duration"),
        ]
        // Numbers a server may send that do not fit: each is refused, not a trap converting it to an integer.
        func template(_ attributes: String, _ timeline: String = "") -> String {
            "<MPD mediaPresentationDuration=\"PT3S\"><Period><AdaptationSet><Representation id=\"x\">"
                + "<SegmentTemplate media=\"$Number$\" \(attributes)>\(timeline)</SegmentTemplate>"
                + "</Representation></AdaptationSet></Period></MPD>"
        }
        let numbers: [(String, String)] = [
            (template("timescale=\"100E0615\" duration=\"1000000\""), "timescale or startNumber"),
            (template("timescale=\"inf\" duration=\"1\""), "timescale or startNumber"),
            (template("duration=\"1e400\""), "neither a duration"),
            (template("timescale=\"1e300\" duration=\"1e290\""), "more than 1000000 segments"),
            (template("timescale=\"1e19\" duration=\"1e17\""), "segment times past 2^63"),
            (template("startNumber=\"9223372036854775807\" duration=\"1\""), "timescale or startNumber"),
            (
                template("timescale=\"1e300\"", "<SegmentTimeline><S d=\"1\" r=\"-1\"/></SegmentTimeline>"),
                "timescale of"
            ),
            (template("", "<SegmentTimeline><S d=\"1\" r=\"9223372036854775807\"/></SegmentTimeline>"), "more than"),
            (
                template("", "<SegmentTimeline><S t=\"9223372036854775806\" d=\"5\" r=\"1\"/></SegmentTimeline>"),
                "past 2^63"
            ),
            (template("", "<SegmentTimeline><S t=\"-4\" d=\"5\"/></SegmentTimeline>"), "the time t="),
            (template("timescale=\"1e18\"", "<SegmentTimeline><S d=\"1\" r=\"-1\"/></SegmentTimeline>"), "more than"),
        ]
        for (text, why) in cases + numbers {
            #expect(throws: DownloadError.self) { _ = try DASHManifest.parse(text) }
            do { _ = try DASHManifest.parse(text) } catch {
                #expect(error.message.contains(why), "\(error.message)")
            }
        }
    }
}
