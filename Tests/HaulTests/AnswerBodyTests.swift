import Foundation
import HaulCore
import Testing

@testable import Haul

@Suite("What a first answer's body is")
struct AnswerBodyTests {
    @Test(
        "by the media type, and by the path only for a text type",
        arguments: [
            ("application/metalink4+xml", "/f", DownloadRunner.AnswerBody.metalink),
            ("Application/Metalink+XML; charset=utf-8", "/f", .metalink),
            ("application/vnd.apple.mpegurl", "/live", .playlist),
            (" audio/x-mpegurl ;x=1", "/a", .playlist),
            ("text/plain", "/a/Index.M3U8", .playlist),
            ("application/octet-stream", "/a/index.m3u8", .playlist),
            ("text/xml", "/a/index.m3u8", .file),
            ("application/dash+xml", "/a", .manifest),
            ("application/xml", "/a/stream.mpd", .manifest),
            ("text/plain", "/a/stream.mpd", .manifest),
            ("video/mp2t", "/a/index.m3u8", .file),
            ("application/octet-stream", "/a/f.bin", .file),
            ("text/html", "/a/stream.mpd", .file),
        ] as [(String, String, DownloadRunner.AnswerBody)])
    func byType(type: String, path: String, expected: DownloadRunner.AnswerBody) throws {
        let head = ResponseHead(status: 200, headers: [("Content-Type", type)])
        let url = try #require(URL(string: "http://host.example\(path)"))
        #expect(DownloadRunner.body(of: head, url: url) == expected)
    }

    @Test("no type: the path decides; another status is the file")
    func untypedAndStatus() throws {
        let playlist = try #require(URL(string: "http://host.example/x.m3u8?token=1"))
        #expect(DownloadRunner.body(of: ResponseHead(status: 200), url: playlist) == .playlist)
        let partial = ResponseHead(status: 206, headers: [("Content-Type", "application/vnd.apple.mpegurl")])
        #expect(DownloadRunner.body(of: partial, url: playlist) == .file)
    }

    @Test(
        "the path read from the URL's text is URL.path",
        arguments: [
            "http://host.example/a/index.m3u8", "http://host.example/a/INDEX.M3U8", "http://host.example/x.m3u8?a=b",
            "http://host.example/x.bin?f=/y.m3u8", "http://host.example/x.bin#/y.m3u8", "http://host.m3u8",
            "http://host.example?/y.m3u8", "http://u:p@host.example:8080/y.m3u8", "http://host.example/y%2Em3u8",
            "http://host.example/y.m3u8%20", "http://host.example/m3u8", "http://host.example/",
            "ftp://host.example/dir/y.m3u8", "http://host.example/y.m3u8/",
            "http://host.example/y.m3u8//", "http://host.example//", "http://host.example/a;p=1/b.bin",
            "http://host.example/a/../b/./c.bin", "http://host.example/caf%C3%A9.bin", "http://host.example/a+b%20c",
            "https://[::1]:8443/v6/file.iso", "http://host.example", "file:///tmp/x.bin",
        ])
    func decodedPath(text: String) throws {
        let url = try #require(URL(string: text))
        #expect(url.decodedPath == url.path)
    }

    @Test("the media type: lowercased, without parameters or spaces")
    func mediaType() {
        #expect(
            ResponseHead(status: 200, headers: [("content-type", "\tText/Plain ; charset=UTF-8")]).mediaType
                == "text/plain")
        #expect(ResponseHead(status: 200, headers: [("Content-Type", "")]).mediaType == "")
        #expect(ResponseHead(status: 200).mediaType == nil)
    }
}
