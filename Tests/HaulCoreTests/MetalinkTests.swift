import HaulCore
import Testing

@Suite("Metalink")
struct MetalinkTests {
    static let sha = String(repeating: "ab", count: 32)

    @Test("a Metalink 4 document (RFC 5854): files, sizes, hashes, pieces, and URLs best first")
    func metalink4() throws {
        let document = """
            <?xml version="1.0" encoding="UTF-8"?>
            <!-- mirrors of example.iso -->
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <published>2026-11-27T00:00:00Z</published>
              <file name="example.iso">
                <size>14471447</size>
                <identity>Example</identity>
                <hash type="sha-256">\(Self.sha.uppercased())</hash>
                <hash type="sha3-256">ignored</hash>
                <pieces length="262144" type="sha-256">
                  <hash>\(String(repeating: "01", count: 32))</hash>
                  <hash>\(String(repeating: "02", count: 32))</hash>
                </pieces>
                <url location="de" priority="2">http://de.example.com/example.iso?a=1&amp;b=2</url>
                <url priority="1" location="US">ftp://ftp.example.com/example.iso</url>
                <url>https://fallback.example.com/example.iso</url>
                <url priority="3">gopher://old.example.com/example.iso</url>
                <metaurl mediatype="torrent">http://example.com/example.iso.torrent</metaurl>
              </file>
              <file name="docs/read me.txt"><size>0</size><url><![CDATA[http://example.com/read me.txt?x=1&y=2]]></url></file>
            </metalink>
            """
        let metalink = try Metalink.parse(document)
        #expect(metalink.files.count == 2)
        let iso = metalink.files[0]
        #expect(iso.name == "example.iso" && iso.size == 14_471_447)
        #expect(iso.hashes == [try Checksum(parsing: "sha256=\(Self.sha)")])
        #expect(iso.pieces?.length == 262_144 && iso.pieces?.algorithm == .sha256)
        #expect(iso.pieces?.hashes == [String(repeating: "01", count: 32), String(repeating: "02", count: 32)])
        #expect(
            iso.urls == [
                .init(url: "ftp://ftp.example.com/example.iso", priority: 1, location: "us"),
                .init(url: "http://de.example.com/example.iso?a=1&b=2", priority: 2, location: "de"),
                .init(url: "https://fallback.example.com/example.iso", priority: nil, location: nil),
            ])
        #expect(metalink.files[1].name == "docs/read me.txt" && metalink.files[1].size == 0)
        #expect(metalink.files[1].urls.map(\.url) == ["http://example.com/read me.txt?x=1&y=2"])
    }

    @Test(
        "a file's name is a path beneath the folder (RFC 5854): folders kept, each made safe; a way out is refused",
        arguments: [
            ("docs/read me.txt", "docs/read me.txt"), ("a.iso", "a.iso"), ("a/./b//c.txt", "a/b/c.txt"),
            ("./x.bin", "x.bin"), (".hidden/x", "hidden/x"), ("../evil.sh", nil), ("a/../../b", nil),
            ("/etc/passwd", nil), ("a\\b/c", "b/c"),
        ] as [(String, String?)])
    func namePath(_ name: String, _ path: String?) throws {
        let document = """
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="\(name)"><url>http://h/f</url></file>
            </metalink>
            """
        let file = try #require(try Metalink.parse(document).files.first)
        do {
            let plan = try file.plan(checksum: nil)
            #expect(plan.path == path, "\(name)")
            #expect(plan.folders + [plan.name] == plan.path.split(separator: "/").map(String.init))
        } catch {
            #expect(path == nil, "\(name): \(error.message)")
            #expect(error.message.contains("leads out of its folder"))
        }
    }

    @Test("a Metalink 3 document: preference 100 is best, hashes and pieces under verification")
    func metalink3() throws {
        let document = """
            <?xml version="1.0" encoding="utf-8"?>
            <metalink version="3.0" xmlns="http://www.metalinker.org/">
              <files>
                <file name="a.tar.gz">
                  <size>1000</size>
                  <verification>
                    <hash type="md5">0123456789abcdef0123456789abcdef</hash>
                    <hash type="sha1">0123456789abcdef0123456789abcdef01234567</hash>
                    <pieces length="512" type="sha1"><hash piece="0">\(String(repeating: "11", count: 20))</hash><hash piece="1">\(String(repeating: "22", count: 20))</hash></pieces>
                  </verification>
                  <resources>
                    <url type="http" location="fr" preference="90">http://fr.example.com/a.tar.gz</url>
                    <url type="ftp" preference="100">ftp://example.com/a.tar.gz</url>
                  </resources>
                </file>
              </files>
            </metalink>
            """
        let file = try #require(try Metalink.parse(document).files.first)
        #expect(file.size == 1000 && file.hashes.map(\.algorithm) == [.md5, .sha1])
        #expect(file.pieces?.length == 512 && file.pieces?.hashes.count == 2 && file.pieces?.algorithm == .sha1)
        #expect(file.urls.map(\.url) == ["ftp://example.com/a.tar.gz", "http://fr.example.com/a.tar.gz"])
        #expect(file.urls.map(\.priority) == [1, 11] && file.urls.last?.location == "fr")
    }

    @Test("a URL whose scheme is not http, https or ftp is left out, an empty one before a colon too")
    func otherSchemes() throws {
        let metalink = try Metalink.parse(
            """
            <metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="a">
            <url>:http://h/a</url><url>file:///etc/passwd</url><url>http://h/b</url>
            </file></metalink>
            """)
        #expect(metalink.files.first?.urls.map(\.url) == ["http://h/b"])
    }

    @Test("what is not a Metalink, or not well-formed, is refused with the reason; a DOCTYPE is never expanded")
    func refused() {
        let cases: [(String, String)] = [
            ("<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\">]><metalink/>", "a DOCTYPE is not taken"),
            ("<metalink><file name=\"a\"></metalink>", "is closed by </metalink>"),
            ("<feed/>", "its root is <feed>"),
            ("<metalink></metalink>", "describes no file"),
            ("<metalink><file name=\"a\"><size>-1</size></file></metalink>", "is not a size: '-1'"),
            ("<metalink><file><size>1</size></file></metalink>", "has no name"),
            ("<metalink><file name=\"a&bogus;\"/></metalink>", "&bogus; is not one XML defines"),
            ("<metalink><file name='a'>", "is not closed"),
            ("<metalink/>trailing", "text after the root element"),
            (String(repeating: "<a>", count: 100), "nested deeper than 64"),
        ]
        for (text, says) in cases {
            do {
                _ = try Metalink.parse(text)
                Issue.record("taken: \(text)")
            } catch {
                #expect(error.message.contains(says), "\(text): \(error.message)")
            }
        }
    }
}
