import Testing

@testable import HaulCore

@Suite("Response head")
struct ResponseHeadTests {
    @Test("header names compare ignoring ASCII case only, in native and bridged strings alike")
    func namesIgnoreASCIICase() {
        #expect(headerNamesEqual("Content-Length", "content-LENGTH"))
        #expect(headerNamesEqual("", ""))
        #expect(!headerNamesEqual("Content-Length", "Content-Lengths"))
        // '@' and '`' differ from each other by the case bit, and neither is a letter.
        #expect(!headerNamesEqual("X@", "X`"))
        #expect(!headerNamesEqual("X[", "X{"))
        #expect(!headerNamesEqual("é", "É"))
        let lazy = String(decoding: Array("ETag".utf8), as: UTF8.self)
        #expect(headerNamesEqual(lazy, "etag"))
        #expect(headerNamesEqual("etag", "ETAG"[...].description))
    }

    @Test(
        "the announced length (RFC 9112 §6.3)",
        arguments: [
            ([("Content-Length", "65536")], ResponseHead.ContentLength.length(65536)),
            ([("content-length", " 42 ")], .length(42)),
            ([("Content-Length", "7"), ("Content-Length", "7")], .length(7)),
            ([("Content-Length", "7, 7")], .length(7)),
            ([("Content-Length", "")], .absent),
            ([("Date", "Sat, 28 Nov 2026 07:00:00 GMT")], .absent),
            // Chunked framing wins, before or after the length, in any case.
            ([("Content-Length", "10"), ("Transfer-Encoding", "gzip, Chunked")], .absent),
            ([("TRANSFER-ENCODING", "chunked"), ("Content-Length", "10")], .absent),
            (
                [("Content-Length", "7"), ("Content-Length", "8")],
                .invalid("Content-Length 7, 8 is not one non-negative length")
            ),
            ([("Content-Length", "7, 8")], .invalid("Content-Length 7, 8 is not one non-negative length")),
            ([("Content-Length", "-1")], .invalid("Content-Length -1 is not one non-negative length")),
            ([("Content-Length", "12a")], .invalid("Content-Length 12a is not one non-negative length")),
        ] as [([(String, String)], ResponseHead.ContentLength)]
    )
    func contentLength(headers: [(String, String)], expected: ResponseHead.ContentLength) {
        let head = ResponseHead(status: 200, headers: headers.map { (name: $0.0, value: $0.1) })
        #expect(head.contentLength == expected)
    }

    @Test("a transfer coding that only resembles chunked is not chunked")
    func notChunked() {
        #expect(!ResponseHead(status: 200, headers: [("Transfer-Encoding", "chunke")]).isChunked)
        #expect(ResponseHead(status: 200, headers: [("Transfer-Encoding", "x, CHUNKED")]).isChunked)
    }

    @Test("byte ranges declared or refused, in any case")
    func ranges() {
        let accepts = ResponseHead(status: 200, headers: [("Accept-Ranges", "none, Bytes ")])
        #expect(accepts.acceptsByteRanges)
        #expect(!accepts.refusesRanges)
        let refuses = ResponseHead(status: 200, headers: [("accept-ranges", " NONE")])
        #expect(refuses.refusesRanges)
        #expect(!refuses.acceptsByteRanges)
    }

    @Test(
        "a text contains a lowercase needle ignoring ASCII case",
        arguments: [
            ("gzip, Chunked", "chunked", true), ("CHUNKED", "chunked", true), ("chunke", "chunked", false),
            ("", "chunked", false), ("xchunkedx", "chunked", true), ("ch unked", "chunked", false),
        ]
    )
    func containsIgnoringCase(text: String, needle: String, expected: Bool) {
        #expect(text.containsIgnoringASCIICase(needle) == expected)
    }

    @Test(
        "a list has an element ignoring ASCII case and the spaces around it",
        arguments: [
            ("bytes", true), ("none, Bytes ", true), ("\tBYTES\t,none", true), (",, bytes,", true), ("bytes2", false),
            ("by tes", false), ("", false), (" , ", false), ("none", false), ("xbytes, bytesx", false),
        ]
    )
    func listElement(text: String, expected: Bool) {
        #expect(text.listContainsIgnoringASCIICase("bytes") == expected)
    }

    @Test(
        "a text ends in a lowercase suffix ignoring ASCII case",
        arguments: [
            ("/a/index.m3u8", true), ("/a/INDEX.M3U8", true), ("m3u8", false), (".m3u8", true), ("", false),
            ("/a/index.m3u8x", false), ("/a/index.m3u", false), ("/é.M3u8", true),
        ]
    )
    func suffix(text: String, expected: Bool) {
        #expect(text.hasSuffixIgnoringASCIICase(".m3u8") == expected)
    }
}
