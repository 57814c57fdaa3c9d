import Foundation
import HaulAPI
import HaulCore
import OpenAPIRuntime
import Testing

@testable import HaulServer
@testable import HaulWire

@Suite("The fast writer of a Download")
struct DownloadJSONTests {
    /// A download with every field set, and strings that need escaping.
    static let full = Components.Schemas.Download(
        id: "9d7dfa27-63e1-4198-9b30-95ff0cc5dfad", url: "http://h/a?b=\"c\"&d=\\e",
        path: "/d/naïve \u{1F600} \u{1}\u{1F}\t\n.bin", directory: "/d", state: .waitingForNetwork, priority: .low,
        position: 2.3e-7, receivedBytes: 9_007_199_254_740_993, totalBytes: Int64.max, bytesPerSecond: 1_048_576.5,
        etaSeconds: 12, connections: 16,
        segments: [.init(start: 0, end: 10, offset: 5), .init(start: 10, end: 20, offset: 10)],
        mirrors: [
            .init(
                url: "http://h/a", state: .active, reason: "", connections: 2, receivedBytes: 7, bytesPerSecond: 0.25),
            .init(
                url: "http://m/\"a\"", state: .dropped, reason: "its file is 9 bytes, the first server's 10",
                connections: 0, receivedBytes: 0, bytesPerSecond: 0),
        ],
        after: ["x", "y\"z"],
        error: .init(code: "httpStatus", message: "server answered HTTP 503 \"busy\"", httpStatus: 503),
        resumable: false, limitRate: 1, createdAt: Date(timeIntervalSince1970: 1_795_396_085.75),
        completedAt: Date(timeIntervalSince1970: 86_399.999), origin: .socket,
        options: .init(
            connections: 4, minSplitSize: 4_194_304, checksum: "sha256=" + String(repeating: "a", count: 64),
            headers: .init(additionalProperties: ["X-A": "1", "Authorization": "***", "X-\u{E9}": "\u{7F}"]),
            userAgent: "haul/0.1.0 (\"test\")", timeoutSeconds: 0.5, retries: 1_000_000, overwrite: true,
            continuePartial: true, mirrors: ["http://m/\"a\""]),
        sha256: String(repeating: "0", count: 64), worker: "worker \"b\"")

    static let bare = Components.Schemas.Download(
        id: "b", url: "http://h/b", state: .queued, priority: .normal, position: -1, receivedBytes: 0,
        bytesPerSecond: 0, connections: 0, after: [], createdAt: Date(timeIntervalSince1970: 0), origin: .api,
        options: .init(
            connections: 1, minSplitSize: 1 << 20, headers: .init(), timeoutSeconds: 30, retries: 5, overwrite: false,
            continuePartial: false))

    /// The labels of the properties of `value` (and of the values nested in it) that hold nil.
    static func nilFields(_ value: Any, path: String = "") -> [String] {
        Mirror(reflecting: value).children.flatMap { child -> [String] in
            let name = path + (child.label ?? "?")
            let mirror = Mirror(reflecting: child.value)
            if mirror.displayStyle == .optional {
                guard let wrapped = mirror.children.first?.value else { return [name] }
                return nilFields(wrapped, path: name + ".")
            }
            if mirror.displayStyle == .struct { return nilFields(child.value, path: name + ".") }
            return []
        }
    }

    @Test("the test's download sets every field of the generated type (a field added to the document fails here)")
    func coversEveryField() {
        #expect(Self.nilFields(Self.full).isEmpty, "unset: \(Self.nilFields(Self.full))")
    }

    @Test("what it writes decodes, with the generated decoder, to what the generated encoder's output decodes to")
    func sameAsGenerated() throws {
        for download in [Self.full, Self.bare] {
            var bytes: [UInt8] = []
            DownloadJSON.append(download, to: &bytes)
            let fast = try apiDecoder.decode(Components.Schemas.Download.self, from: Data(bytes))
            let generated = try apiDecoder.decode(Components.Schemas.Download.self, from: apiEncoder.encode(download))
            #expect(fast == generated)
            #expect(fast.path == download.path && fast.after == download.after && fast.options == download.options)
        }
    }

    @Test("integers are written as Swift writes them, from Int64.min to Int64.max")
    func integers() {
        var generator = SplitMix(seed: 7)
        var values: [Int64] = [0, 1, -1, 9, 10, -10, 99, 100, Int64.max, Int64.min, Int64.max - 1, Int64.min + 1]
        for _ in 0..<10_000 { values.append(Int64(bitPattern: generator.next()) >> (generator.next() % 64)) }
        for value in values {
            var bytes: [UInt8] = []
            JSONText.appendInteger(value, to: &bytes)
            #expect(String(decoding: bytes, as: UTF8.self) == String(value))
        }
    }

    @Test("strings with and without escapes read back as they were")
    func strings() {
        for text in [
            "", "plain", "a\"b", "back\\slash", "tab\t", "\u{1}", "naïve 😀", String(repeating: "x", count: 500),
        ] {
            var bytes: [UInt8] = []
            JSONText.appendString(text, to: &bytes)
            #expect((try? JSONDecoder().decode(String.self, from: Data(bytes))) == text)
        }
    }

    @Test("a list is one JSON object however it is cut into chunks")
    func list() async throws {
        var chunks: [[UInt8]] = []
        let downloads = Array(repeating: Self.full, count: 50) + [Self.bare]
        try await DownloadJSON.list(ids: Array(downloads.indices), nextCursor: "0_0_x", chunkSize: 1000, batch: 7) {
            $0.map { downloads[$0] }
        } emit: {
            chunks.append($0)
        }
        #expect(chunks.count > 5)
        let list = try apiDecoder.decode(Components.Schemas.DownloadList.self, from: Data(chunks.joined()))
        #expect(list.downloads.count == 51 && list.nextCursor == "0_0_x")
        var none: [[UInt8]] = []
        try await DownloadJSON.list(ids: [Int](), nextCursor: nil) { _ in
            []
        } emit: {
            none.append($0)
        }
        #expect(String(decoding: none.joined(), as: UTF8.self) == #"{"downloads":[]}"#)
    }
}

@Suite("The URL check")
struct URLCheckTests {
    @Test("the hand-written check agrees with the document's pattern on thousands of strings")
    func agreesWithPattern() throws {
        let regex = try Regex(APIHandler.urlPattern)
        let pieces = [
            "http", "https", "HTTP", "ftp", "ftps", "ftpes", "sftp", "://", ":", "/", "//", "a", "Z", "9", ".", "-",
            "_", "~", "%", "%4", "%4f", "%zz",
            "?", "#", " ", "é", "0", "65535", "65536", "99999", "01234", "1234", "@", "[", "]", "'", "(", "=", "\\",
        ]
        var generator = SystemRandomNumberGenerator()
        var checked = 0
        var accepted = 0
        for _ in 0..<20_000 {
            var text = ["http://", "https://", "ftp://", "ftpes://", "ftps://", "ftp", "http", ""].randomElement(
                using: &generator)!
            for _ in 0..<Int.random(in: 0...8, using: &generator) { text += pieces.randomElement(using: &generator)! }
            let expected = (try regex.wholeMatch(in: text)) != nil
            #expect(APIHandler.isAcceptedURL(text) == expected, "\(text)")
            checked += 1
            if expected { accepted += 1 }
        }
        for text in [
            "http://h", "https://h.example:65535/a?b=c", "http://h:0000", "http://h:65536/", "http://h:01234",
            "http://h/%4F%zz", "http://h/%4", "http://h/a b", "http://h#x", "http://:80/", "ftp://h/f",
            "ftps://h:990/f",
            "ftpes://h/f", "ftpx://h/f", "sftp://h/f", "ftp:/h",
        ] {
            #expect(APIHandler.isAcceptedURL(text) == ((try regex.wholeMatch(in: text)) != nil), "\(text)")
        }
        #expect(checked == 20_000 && accepted > 500, "the strings should include many valid URLs (\(accepted))")
    }
}

@Suite("The API's date transcoder")
struct APIDateTranscoderTests {
    @Test("it writes what the generated transcoder writes and reads it back, for dates from 1906 to 2223")
    func agrees() throws {
        let fast = APIDateTranscoder()
        let reference = ISO8601DateTranscoder()
        var generator = SystemRandomNumberGenerator()
        let samples =
            [0, 951_782_400, 1_795_000_000, 4_107_542_399]
            + (0..<2_000).map { _ in
                Int.random(in: -2_000_000_000...8_000_000_000, using: &generator)
            }
        for seconds in samples {
            let date = Date(timeIntervalSince1970: TimeInterval(seconds))
            let text = try fast.encode(date)
            #expect(text == (try reference.encode(date)), "\(seconds)")
            #expect(try fast.decode(text) == date, "\(text)")
        }
    }

    @Test("forms it does not parse itself (fractions, offsets) go to the generated transcoder; nonsense fails")
    func otherForms() throws {
        let fast = APIDateTranscoder()
        #expect(try fast.decode("2026-11-23T06:49:14+01:00") == (try fast.decode("2026-11-23T05:49:14Z")))
        #expect(HTTPDate.parseISO8601UTC("2026-13-01T00:00:00Z") == nil)
        #expect(HTTPDate.parseISO8601UTC("2026-11-23t05:49:14z") == nil)
        #expect(HTTPDate.parseISO8601UTC("2026-11-23T05:49:14.5Z") == nil)
        #expect(throws: (any Error).self) { try fast.decode("yesterday") }
    }
}
