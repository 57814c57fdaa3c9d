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

    @Test("the media type: lowercased, without parameters or spaces")
    func mediaType() {
        #expect(
            ResponseHead(status: 200, headers: [("content-type", "\tText/Plain ; charset=UTF-8")]).mediaType
                == "text/plain")
        #expect(ResponseHead(status: 200, headers: [("Content-Type", "")]).mediaType == "")
        #expect(ResponseHead(status: 200).mediaType == nil)
    }
}
