import Foundation
import HaulAPI
import Testing

@testable import HaulServer
@testable import HaulWire

@Suite("The command line's fast reader of downloads in events and answers")
struct BriefDownloadTests {
    static func fast(_ bytes: [UInt8]) -> BriefDownload? {
        bytes.withUnsafeBytes { raw in
            var scanner = JSONScanner(raw)
            guard let brief = BriefDownload.read(&scanner), scanner.isAtEnd else { return nil }
            return brief
        }
    }

    /// What Foundation's decoder makes of the same bytes, nil when it refuses them.
    static func foundation(_ bytes: [UInt8]) -> BriefDownload? {
        try? JSONDecoder().decode(BriefDownload.self, from: Data(bytes))
    }

    /// The daemon's own JSON of the test downloads (every field set; the least set).
    static let written: [[UInt8]] = [DownloadJSONTests.full, DownloadJSONTests.bare].map { download in
        var bytes: [UInt8] = []
        DownloadJSON.append(download, to: &bytes)
        return bytes
    }

    @Test("the daemon's JSON of a download is read by the scanner, to what Foundation's decoder reads")
    func readsTheDaemonsJSON() throws {
        for bytes in Self.written {
            let fast = try #require(Self.fast(bytes), "\(String(decoding: bytes, as: UTF8.self))")
            #expect(fast == Self.foundation(bytes))
        }
        let full = try #require(Self.fast(Self.written[0]))
        #expect(full.error == .init(code: "httpStatus", message: #"server answered HTTP 503 "busy""#, httpStatus: 503))
        #expect(full.totalBytes == Int64.max)
        #expect(full.path == "/d/naïve \u{1F600} \u{1}\u{1F}\t\n.bin")
        #expect(full.sha256 == String(repeating: "0", count: 64))
    }

    @Test(
        "what it leaves to Foundation's decoder",
        arguments: [
            #"{"id":"a","url":"u","state":"queued","receivedBytes":1.0,"connections":0}"#,
            #"{"id":"a","id":"b","url":"u","state":"queued","receivedBytes":1,"connections":0}"#,
            #"{"id":"a","url":"u","state":"queued","receivedBytes":1}"#,
            #"{"id":"a","url":"u","state":"queued","receivedBytes":1,"connections":0,"path":5}"#,
            #"{"id":"a","url":"u","state":"queued","receivedBytes":1,"connections":0,"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"#,
            #"["id"]"#,
        ])
    func leftToFoundation(_ text: String) {
        #expect(Self.fast(Array(text.utf8)) == nil)
    }

    @Test(
        "names are matched by their bytes: a name with an escape or beyond ASCII is left to Foundation's decoder",
        arguments: [
            (#""id""#, "id", true), (#""idx""#, "id", false), (#""i""#, "id", false), (#""""#, "", true),
            (#""\u0069d""#, "id", false), (#""naïve""#, "naïve", false), (#""a\"b""#, "a\"b", false),
        ] as [(String, String, Bool)])
    func names(_ text: String, _ word: String, _ matches: Bool) {
        let found = Array(text.utf8).withUnsafeBytes { raw -> Bool in
            var scanner = JSONScanner(raw)
            guard let name = scanner.name() else { return false }
            return Array(name) == Array(word.utf8)
        }
        #expect(found == matches)
    }

    @Test("a field named with an escape is read by Foundation's decoder; the daemon's text is read as its bytes are")
    func escapedName() throws {
        let text = #"{"\u0069d":"a","url":"u","state":"queued","receivedBytes":1,"connections":0,"\u0065rror":null}"#
        #expect(Self.fast(Array(text.utf8)) == nil)
        let fromText = try BriefDownload.decode(text, with: JSONDecoder())
        #expect(fromText.id == "a")
        #expect(fromText == Self.foundation(Array(text.utf8)))
        for bytes in Self.written {
            let written = String(decoding: bytes, as: UTF8.self)
            #expect(try BriefDownload.decode(written, with: JSONDecoder()) == Self.fast(bytes))
        }
        let progress = String(decoding: Self.progressWritten[0], as: UTF8.self)
        #expect(try BriefProgress.decode(progress, with: JSONDecoder()) == Self.fastProgress(Self.progressWritten[0]))
        let escaped = #"{"\u0069d":"b","receivedBytes":0,"bytesPerSecond":0,"connections":0}"#
        #expect(Self.fastProgress(Array(escaped.utf8)) == nil)
        #expect(try BriefProgress.decode(escaped, with: JSONDecoder()).id == "b")
    }

    @Test("nulls, unknown fields of every kind and an error without a status are read")
    func unknownAndNull() throws {
        let text = #"""
            {"x":{"a":[1,-2.5e3,true,false,null,"\u00e9"]},"id":"a","url":"u","path":null,"directory":null,
             "state":"failed","receivedBytes":0,"totalBytes":null,"connections":0,"sha256":null,
             "error":{"code":"c","extra":{},"message":"m","httpStatus":null},"y":[]}
            """#
        let fast = try #require(Self.fast(Array(text.utf8)))
        #expect(fast == Self.foundation(Array(text.utf8)))
        #expect(fast.error == .init(code: "c", message: "m", httpStatus: nil))
    }

    @Test("a snapshot's list and an add's answer are read, other fields skipped")
    func snapshot() throws {
        let bytes =
            Array(#"{"stats":{"bytesPerSecond":0,"counts":{}},"downloads":["#.utf8) + Self.written[0] + [0x2C]
            + Self.written[1] + Array(#"],"nextCursor":null}"#.utf8)
        let fast = try #require(bytes.withUnsafeBytes { BriefSnapshot.read($0) })
        #expect(fast == (try JSONDecoder().decode(BriefSnapshot.self, from: Data(bytes))))
        #expect(fast.downloads.map(\.id) == ["9d7dfa27-63e1-4198-9b30-95ff0cc5dfad", "b"])
    }

    @Test("over 20,000 mutated downloads, whatever the scanner reads, Foundation's decoder reads the same way")
    func neverDisagrees() {
        var generator = SplitMix(seed: 0x4252_4945)
        var taken = 0
        for _ in 0..<20_000 {
            let bytes = generator.mutated(Self.written[Int(generator.next() % UInt64(Self.written.count))])
            guard let fast = Self.fast(bytes) else { continue }
            taken += 1
            #expect(fast == Self.foundation(bytes), "\(String(decoding: bytes, as: UTF8.self))")
        }
        // Most mutations land in fields the scanner skips or reads: the comparison is not empty.
        #expect(taken > 1000)
    }

    /// The daemon's JSON of two progress events (every field; the least).
    static let progressWritten: [[UInt8]] = [
        Components.Schemas.Progress(
            id: "9d7dfa27-63e1-4198-9b30-95ff0cc5dfad", receivedBytes: 1 << 40, totalBytes: Int64.max,
            bytesPerSecond: 1234.5, etaSeconds: 0.25, connections: 16),
        Components.Schemas.Progress(id: "b", receivedBytes: 0, bytesPerSecond: 0, connections: 0),
    ].map { progress in
        var bytes: [UInt8] = []
        DownloadJSON.append(progress, to: &bytes)
        return bytes
    }

    static func fastProgress(_ bytes: [UInt8]) -> BriefProgress? {
        bytes.withUnsafeBytes { raw in
            var scanner = JSONScanner(raw)
            guard let brief = BriefProgress.read(&scanner), scanner.isAtEnd else { return nil }
            return brief
        }
    }

    /// What the generated type's decoder makes of the same bytes.
    static func foundationProgress(_ bytes: [UInt8]) -> BriefProgress? {
        guard let progress = try? JSONDecoder().decode(Components.Schemas.Progress.self, from: Data(bytes)) else {
            return nil
        }
        return BriefProgress(
            id: progress.id, receivedBytes: progress.receivedBytes, totalBytes: progress.totalBytes,
            bytesPerSecond: progress.bytesPerSecond, etaSeconds: progress.etaSeconds, connections: progress.connections)
    }

    @Test("a progress event the daemon writes is read by the scanner as the generated decoder reads it")
    func progress() throws {
        for bytes in Self.progressWritten {
            let fast = try #require(Self.fastProgress(bytes), "\(String(decoding: bytes, as: UTF8.self))")
            #expect(fast == Self.foundationProgress(bytes))
        }
        #expect(Self.fastProgress(Self.progressWritten[0])?.etaSeconds == 0.25)
        #expect(Self.fastProgress(Self.progressWritten[1])?.totalBytes == nil)
        // Left to the decoder (which refuses the first two, as the document allows no other field).
        for text in [
            #"{"id":"a","receivedBytes":1,"bytesPerSecond":0,"connections":0,"x":1}"#,
            #"{"id":"a","id":"b","receivedBytes":1,"bytesPerSecond":0,"connections":0}"#,
            #"{"id":"a","receivedBytes":1.0,"bytesPerSecond":0,"connections":0}"#,
        ] {
            #expect(Self.fastProgress(Array(text.utf8)) == nil, "\(text)")
        }
    }

    @Test("a progress event with each server's state is left to the generated decoder, which reads what was written")
    func progressWithMirrors() throws {
        let progress = Components.Schemas.Progress(
            id: "m", receivedBytes: 5, bytesPerSecond: 2, connections: 3,
            mirrors: [
                .init(state: .active, connections: 2, receivedBytes: 5, bytesPerSecond: 2.5),
                .init(
                    state: .dropped, reason: "its file is 9 bytes", connections: 0, receivedBytes: 0, bytesPerSecond: 0),
            ])
        var bytes: [UInt8] = []
        DownloadJSON.append(progress, to: &bytes)
        #expect(Self.fastProgress(bytes) == nil)
        #expect(try JSONDecoder().decode(Components.Schemas.Progress.self, from: Data(bytes)) == progress)
    }

    @Test("over 20,000 mutated progress events, whatever the scanner reads, the generated decoder reads the same way")
    func progressNeverDisagrees() {
        var generator = SplitMix(seed: 0x5052_4F47)
        var taken = 0
        for _ in 0..<20_000 {
            let bytes = generator.mutated(Self.progressWritten[Int(generator.next() % 2)])
            guard let fast = Self.fastProgress(bytes) else { continue }
            taken += 1
            #expect(fast == Self.foundationProgress(bytes), "\(String(decoding: bytes, as: UTF8.self))")
        }
        #expect(taken > 1000)
    }
}
