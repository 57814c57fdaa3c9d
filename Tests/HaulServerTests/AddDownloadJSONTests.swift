import Foundation
import HaulAPI
import Testing

@testable import HaulServer
@testable import HaulWire

@Suite("The add fast path's reader of request bodies")
struct AddDownloadJSONTests {
    typealias Add = Components.Schemas.AddDownload

    static func fast(_ text: String) -> AddDownloadJSON.Body? {
        Array(text.utf8).withUnsafeBytes { AddDownloadJSON.parse($0) }
    }

    static func fast(_ bytes: [UInt8]) -> AddDownloadJSON.Body? {
        bytes.withUnsafeBytes { AddDownloadJSON.parse($0) }
    }

    /// What the generated route decodes from the same bytes, nil when it refuses them.
    static func generated(_ bytes: [UInt8]) -> AddDownloadJSON.Body? {
        let data = Data(bytes)
        if let one = try? apiDecoder.decode(Add.self, from: data) { return .one(one) }
        if let list = try? apiDecoder.decode([Add].self, from: data) { return .list(list) }
        return nil
    }

    static let taken: [String] = [
        #"{"url":"http://h/a"}"#,
        #" { "url" : "http://h/a" , "paused" : true } "#,
        "{\n\t\"url\":\r\n\"http://h/a\"}",
        #"{"paused":false,"url":"http://h/a%20b?x=1&y=2"}"#,
        #"{"url":"http:\/\/h\/a","filename":"na\u00efve \ud83d\ude00 \"q\" \\ \b\f\n\r\t.bin"}"#,
        #"{"url":"http://h/a","filename":"naïve 😀.bin","directory":"sub/dir"}"#,
        #"{"url":"http://h/a","priority":"high","after":["x","y"],"connections":16,"minSplitSize":1048576}"#,
        #"{"url":"http://h/a","after":[],"headers":{},"limitRate":9223372036854775807,"retries":0}"#,
        #"{"url":"http://h/a","headers":{"X-A":"1","Authorization":"Bearer t"},"userAgent":"ua/1"}"#,
        #"{"url":"http://h/a","timeoutSeconds":0.5,"overwrite":true,"continuePartial":false,"computeSha256":true}"#,
        #"{"url":"http://h/a","timeoutSeconds":30,"connections":-3,"retries":-1,"limitRate":-9223372036854775808}"#,
        #"{"url":"http://h/a","timeoutSeconds":1e2,"checksum":"sha256=00"}"#,
        #"{"url":"","priority":"low"}"#,
        #"[{"url":"http://h/a"},{"url":"http://h/b","paused":true}]"#,
        #"[ {"url":"http://h/a"} ]"#,
    ]

    @Test("a body it takes decodes to exactly what the generated decoder makes of it", arguments: taken)
    func sameAsGenerated(_ text: String) throws {
        let fast = try #require(Self.fast(text), "the fast reader should take \(text)")
        #expect(fast == Self.generated(Array(text.utf8)))
    }

    @Test("the command line's writer: what it writes reads back as the same items, by both readers", arguments: taken)
    func writerRoundTrips(_ text: String) throws {
        let items: [Add] =
            switch try #require(Self.fast(text)) {
            case .one(let item): [item]
            case .list(let items): items
            }
        let written = try #require(AddDownloadJSON.encode(items))
        #expect(Self.fast(written) == .list(items), "\(String(decoding: written, as: UTF8.self))")
        #expect(Self.generated(written) == .list(items), "\(String(decoding: written, as: UTF8.self))")
    }

    @Test("the command line's writer: every field, and strings that need escapes")
    func writerEveryField() throws {
        var item = Add(url: "http://h/a \"q\" \\ \u{1}\t\n😀")
        item.directory = "/d/ïr"
        item.filename = "f\u{7f}.bin"
        item.priority = .high
        item.after = ["x", "y\"z"]
        item.connections = 16
        item.minSplitSize = 1 << 20
        item.checksum = "sha256=00"
        item.headers = .init(additionalProperties: ["X-B": "2", "X-A": "1\r"])
        item.limitRate = .max
        item.paused = true
        item.overwrite = false
        item.continuePartial = true
        item.userAgent = "ua/1"
        item.timeoutSeconds = 0.25
        item.retries = 0
        item.computeSha256 = false
        let written = try #require(AddDownloadJSON.encode([item, Add(url: "http://h/b")]))
        #expect(Self.generated(written) == .list([item, Add(url: "http://h/b")]))
        #expect(Self.fast(written) == .list([item, Add(url: "http://h/b")]))
        #expect(AddDownloadJSON.encode([]) == Array("[]".utf8))
        // A field it does not write (credentials, cookies, TLS, a proxy): nil, and the caller's JSONEncoder writes
        // the list, so nothing is dropped.
        var private_ = Add(url: "http://h/p")
        private_.credentials = .init(user: "alice", password: "wonder")
        #expect(AddDownloadJSON.encode([Add(url: "http://h/a"), private_]) == nil)
        var cookies = Add(url: "http://h/c")
        cookies.cookies = "session=ok"
        #expect(AddDownloadJSON.encode([cookies]) == nil)
    }

    static let leftToTheRoute: [String] = [
        "", "   ", "null", "{}", "[]", "[1]", #""url""#, "{", #"{"url":"http://h/a""#, #"{"url":"http://h/a",}"#,
        #"{"url":"http://h/a"} x"#, #"{"url":"http://h/a"}{"url":"http://h/b"}"#, #"[{"url":"http://h/a"},]"#,
        // nulls: the route answers 400 naming the field
        #"{"url":"http://h/a","filename":null}"#, #"{"url":null}"#, #"[{"url":"http://h/a","after":null}]"#,
        #"{"url":"http://h/a","headers":{"X":null}}"#,
        // unknown, repeated or missing fields
        #"{"url":"http://h/a","colour":"red"}"#, #"{"url":"http://h/a","url":"http://h/b"}"#,
        #"{"paused":true}"#, #"{"url":"http://h/a","headers":{"X":"1","X":"2"}}"#,
        // wrong types
        #"{"url":1}"#, #"{"url":"http://h/a","paused":"true"}"#, #"{"url":"http://h/a","connections":"4"}"#,
        #"{"url":"http://h/a","connections":4.0}"#, #"{"url":"http://h/a","connections":4e0}"#,
        #"{"url":"http://h/a","connections":04}"#, #"{"url":"http://h/a","limitRate":9223372036854775808}"#,
        #"{"url":"http://h/a","priority":"urgent"}"#, #"{"url":"http://h/a","after":"x"}"#,
        #"{"url":"http://h/a","after":[1]}"#, #"{"url":"http://h/a","headers":[]}"#,
        #"{"url":"http://h/a","headers":{"X":1}}"#, #"{"url":"http://h/a","timeoutSeconds":1e999}"#,
        #"{"url":"http://h/a","timeoutSeconds":.5}"#, #"{"url":"http://h/a","timeoutSeconds":-}"#,
        #"{"url":"http://h/a","paused":True}"#,
        // strings JSON does not allow
        "{\"url\":\"http://h/\u{1}\"}", #"{"url":"http://h/\x"}"#, #"{"url":"http://h/\ud83d"}"#,
        #"{"url":"http://h/\ude00"}"#, #"{"url":"http://h/\u12"}"#,
    ]

    @Test("anything unusual goes on to the generated route, which answers it", arguments: leftToTheRoute)
    func leftAlone(_ text: String) {
        #expect(Self.fast(text) == nil)
    }

    @Test("invalid UTF-8 goes on to the generated route")
    func invalidUTF8() {
        let bytes: [UInt8] = Array(#"{"url":"http://h/"#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8)
        #expect(Self.fast(bytes) == nil)
    }

    @Test("over 20,000 mutated bodies, whatever the fast reader takes, the generated decoder reads the same way")
    func neverDisagrees() {
        var generator = SplitMix(seed: 0x4841_554C)
        let seeds = Self.taken.map { Array($0.utf8) }
        var taken = 0
        for _ in 0..<20_000 {
            let bytes = generator.mutated(seeds[Int(generator.next() % UInt64(seeds.count))])
            guard let fast = Self.fast(bytes) else { continue }
            taken += 1
            let generated = Self.generated(bytes)
            #expect(fast == generated, "\(String(decoding: bytes, as: UTF8.self))")
        }
        // The mutations leave many bodies valid: the comparison is not empty.
        #expect(taken > 1000)
    }
}

extension SplitMix {
    /// JSON's punctuation, digits, letters of its words and a few bytes that are not UTF-8: what mutations insert.
    static let jsonAlphabet =
        Array(#"{}[]:,"\ 0123456789.eE-+truefalsnul/uabcdXY"#.utf8) + [0x00, 0x7F, 0xC3, 0xA9, 0xFF]

    /// `bytes` with one to three bytes inserted, removed or replaced at random places.
    mutating func mutated(_ bytes: [UInt8]) -> [UInt8] {
        var bytes = bytes
        for _ in 0..<(1 + Int(next() % 3)) {
            let position = Int(next() % UInt64(bytes.count + 1))
            let byte = Self.jsonAlphabet[Int(next() % UInt64(Self.jsonAlphabet.count))]
            switch next() % 3 {
            case 0: bytes.insert(byte, at: position)
            case 1: if position < bytes.count { bytes.remove(at: position) }
            default: if position < bytes.count { bytes[position] = byte }
            }
        }
        return bytes
    }
}

/// A small deterministic generator (SplitMix64), so that a failure can be run again.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
