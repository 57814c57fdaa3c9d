import Testing

@testable import HaulCore

@Suite("Content-Range")
struct ContentRangeTests {
    @Test(
        "valid values",
        arguments: [
            ("bytes 0-9/10", ContentRange.satisfied(first: 0, last: 9, total: 10)),
            ("bytes 100-199/1000", .satisfied(first: 100, last: 199, total: 1000)),
            ("bytes 0-9/*", .satisfied(first: 0, last: 9, total: nil)),
            ("bytes */1024", .unsatisfied(total: 1024)),
            ("Bytes 5-5/6", .satisfied(first: 5, last: 5, total: 6)),
            ("  bytes 1-2/3 ", .satisfied(first: 1, last: 2, total: 3)),
            (
                "bytes 0-1152921504606846975/1152921504606846976",
                .satisfied(first: 0, last: (1 << 60) - 1, total: 1 << 60)
            ),
            ("bytes 0007-0009/0000000000000000010", .satisfied(first: 7, last: 9, total: 10)),
        ]
    )
    func valid(text: String, expected: ContentRange) {
        #expect(ContentRange(text) == expected)
    }

    @Test(
        "malformed values are rejected",
        arguments: [
            "", "bytes", "bytes 20-10/100", "bytes 0-100/100", "bytes 0-99999999999999999999/100000000000000000000",
            "items 0-9/10", "bytes -1-9/10", "bytes 0-9", "bytes 0-9/10/11", "bytes a-b/c", "bytes 0--9/10",
            "bytes +0-9/10", "bytes */*", "bytes 0-9/-10", "bytes 0-9 /10x", "bytes 0-1152921504606846977/*",
            "bytes 0-9999999999999999999/*", "bytes */9223372036854775808", "bytes 0-٣/10",
        ]
    )
    func malformed(text: String) {
        #expect(ContentRange(text) == nil)
    }

    @Test func lengthOfASatisfiedRange() {
        #expect(ContentRange("bytes 10-19/100")?.length == 10)
        #expect(ContentRange("bytes */100")?.length == nil)
    }
}

@Suite("Content-Disposition and file names")
struct ContentDispositionTests {
    @Test(
        "file name from the header",
        arguments: [
            ("attachment; filename=\"report.pdf\"", "report.pdf"),
            ("attachment; filename=plain.txt", "plain.txt"),
            ("attachment; filename=\"a \\\"quoted\\\" name.txt\"", "a \"quoted\" name.txt"),
            ("attachment; filename=\"fallback.txt\"; filename*=UTF-8''%E2%82%AC%20rates.txt", "€ rates.txt"),
            ("attachment; filename*=UTF-8''na%C3%AFve.txt; filename=\"naive.txt\"", "naïve.txt"),
            ("attachment; filename*=iso-8859-1'en'%A3%20rates", "£ rates"),
            ("inline; FILENAME=\"UPPER.TXT\"", "UPPER.TXT"),
            ("attachment; filename=\"semi;colon.txt\"", "semi;colon.txt"),
        ]
    )
    func fileName(header: String, expected: String) {
        #expect(ContentDisposition.fileName(from: header) == expected)
    }

    @Test func noFileName() {
        #expect(ContentDisposition.fileName(from: "attachment") == nil)
        #expect(ContentDisposition.fileName(from: "attachment; filename*=bogus") == nil)
    }

    @Test(
        "hostile names are sanitised so they cannot leave the folder",
        arguments: [
            ("../../etc/passwd", "passwd"),
            ("/etc/shadow", "shadow"),
            ("..\\..\\windows\\system32.dll", "system32.dll"),
            ("..", "index.html"),
            (".", "index.html"),
            ("", "index.html"),
            (".bashrc", "bashrc"),
            ("...hidden", "hidden"),
            ("name\u{0}with\u{0}nul.txt", "namewithnul.txt"),
            ("line\nbreak.txt", "linebreak.txt"),
            ("  spaced.txt  ", "spaced.txt"),
            ("-rf", "rf"),
            ("dir/", "dir"),
        ]
    )
    func sanitize(proposed: String, expected: String) {
        #expect(FileNameSanitizer.sanitize(proposed) == expected)
    }

    @Test("a name taken as it is is exactly what the long way makes of it, and the long way is taken when needed")
    func safeNamesShortcut() {
        let edges = [
            "f0001.bin", "report 2024.pdf", "a", ".hidden", "-rf", "trail.", "trail ", " lead", "a/b", "a\\b", "",
            String(repeating: "n", count: FileNameSanitizer.maximumBytes),
            String(repeating: "n", count: FileNameSanitizer.maximumBytes + 1), "tab\there", "del\u{7F}", "é.txt",
        ]
        // Every name of up to four characters over an alphabet of what matters (separators, dots, dashes, spaces,
        // a tab, a percent sign, letters and digits): 22,621 names, each checked both ways.
        let alphabet = Array(" -./\\aZ0%~_\t")
        var names: [String] = [""]
        var last: [String] = [""]
        for _ in 1...4 {
            last = last.flatMap { prefix in alphabet.map { prefix + String($0) } }
            names += last
        }
        for name in edges + names {
            #expect(
                FileNameSanitizer.sanitize(name) == FileNameSanitizer.sanitizeScalars(name), "\(name.debugDescription)")
            if FileNameSanitizer.isSafeAsIs(name) { #expect(FileNameSanitizer.sanitizeScalars(name) == name) }
        }
        #expect(FileNameSanitizer.isSafeAsIs("f0001.bin") && FileNameSanitizer.isSafeAsIs("report 2024.pdf"))
        #expect(!FileNameSanitizer.isSafeAsIs(".hidden") && !FileNameSanitizer.isSafeAsIs("é.txt"))
        // A URL's segment is decoded only when it holds a percent sign, and decoded then.
        #expect(FileNameSanitizer.name(contentDisposition: nil, finalURLPath: "/d/plain.bin") == "plain.bin")
        #expect(FileNameSanitizer.name(contentDisposition: nil, finalURLPath: "/d/a%20b%2Fc.txt") == "c.txt")
        #expect(FileNameSanitizer.name(contentDisposition: nil, finalURLPath: "/d/50%25.txt") == "50%.txt")
    }

    @Test func overLongNamesAreCutAndKeepTheirExtension() {
        let name = FileNameSanitizer.sanitize(String(repeating: "é", count: 400) + ".tar.gz")
        #expect(name.utf8.count <= FileNameSanitizer.maximumBytes)
        #expect(name.hasSuffix(".tar.gz"))
    }

    @Test(
        "a cut leaves no trailing space or dot, and a name that is one huge character keeps part of it (found by fuzz/)"
    )
    func cutsStaySafe() {
        let spaced = FileNameSanitizer.sanitize(String(repeating: "n", count: 198) + "   tail")
        #expect(spaced == String(repeating: "n", count: 198))
        let dotted = FileNameSanitizer.sanitize(
            String(repeating: "n", count: 199) + "." + String(repeating: "x", count: 30))
        #expect(dotted == String(repeating: "n", count: 199))
        let huge = FileNameSanitizer.sanitize("a" + String(repeating: "\u{301}", count: 300) + ".txt")
        #expect(huge.unicodeScalars.first == "a" && huge.hasSuffix(".txt"))
        #expect(huge.utf8.count <= FileNameSanitizer.maximumBytes)
        #expect(FileNameSanitizer.sanitize(".\u{3000}-x.") == "x")
        for name in [spaced, dotted, huge] { #expect(FileNameSanitizer.sanitize(name) == name) }
    }

    @Test("a separator or a dot inside a larger character counts: after U+0605, before a combining mark (fuzz/)")
    func separatorsAndDotsInsideCharacters() {
        #expect(FileNameSanitizer.sanitize("..\u{605}/..\u{605}/etc\u{605}\\passwd") == "passwd")
        #expect(FileNameSanitizer.sanitize("evil\u{605}/x") == "x")
        #expect(FileNameSanitizer.sanitize(".\u{301}hidden").utf8.first != UInt8(ascii: "."))
        #expect(FileNameSanitizer.sanitize("-\u{301}rf").utf8.first != UInt8(ascii: "-"))
        #expect(FileNameSanitizer.sanitize("name\u{605}.").utf8.last != UInt8(ascii: "."))
    }

    @Test func alternativesKeepTheExtension() {
        #expect(FileNameSanitizer.alternative("file.txt", number: 1) == "file (1).txt")
        #expect(FileNameSanitizer.alternative("archive.tar.gz", number: 2) == "archive (2).tar.gz")
        #expect(FileNameSanitizer.alternative("README", number: 3) == "README (3)")
    }

    @Test func nameFallsBackToTheURLThenIndex() {
        #expect(FileNameSanitizer.name(contentDisposition: nil, finalURLPath: "/files/my%20file.iso") == "my file.iso")
        #expect(FileNameSanitizer.name(contentDisposition: nil, finalURLPath: "/") == "index.html")
        #expect(FileNameSanitizer.name(contentDisposition: nil, finalURLPath: "//") == "index.html")
        #expect(FileNameSanitizer.name(contentDisposition: nil, finalURLPath: "") == "index.html")
        #expect(FileNameSanitizer.name(contentDisposition: nil, finalURLPath: "/a/dir//") == "dir")
        #expect(FileNameSanitizer.name(contentDisposition: nil, finalURLPath: "plain") == "plain")
        #expect(
            FileNameSanitizer.name(contentDisposition: "attachment; filename=\"../x.bin\"", finalURLPath: "/y")
                == "x.bin")
        #expect(
            FileNameSanitizer.name(contentDisposition: "attachment; filename=\"..\"", finalURLPath: "/y.bin") == "y.bin"
        )
    }
}

@Suite("ETag, Last-Modified, dates")
struct ValidatorTests {
    @Test func strongAndWeakTags() {
        #expect(EntityTag("\"abc\"") == EntityTag(opaqueTag: "\"abc\"", isWeak: false))
        #expect(EntityTag("W/\"abc\"") == EntityTag(opaqueTag: "\"abc\"", isWeak: true))
        #expect(EntityTag("unquoted")?.isWeak == true)
        #expect(EntityTag("") == nil)
        #expect(EntityTag("\"a\", \"b\"") == nil)
        #expect(EntityTag("\"a\u{1A}\"") == nil, "a control character would make If-Range invalid (found by fuzz/)")
        #expect(EntityTag("\"caf\u{E9}\"") == nil)
    }

    @Test func weakTagsAreNeverUsedInIfRange() {
        let weak = Validators(etag: "W/\"x\"", lastModified: nil, date: nil)
        #expect(weak.ifRangeValue == nil)
        #expect(!weak.isStrong)
        let strong = Validators(etag: "\"x\"", lastModified: nil, date: nil)
        #expect(strong.ifRangeValue == "\"x\"")
    }

    @Test func lastModifiedIsStrongOnlyAMinuteBeforeDate() {
        let close = Validators(
            etag: nil, lastModified: "Mon, 01 Jan 2024 00:00:00 GMT", date: "Mon, 01 Jan 2024 00:00:59 GMT")
        #expect(close.ifRangeValue == nil)
        let old = Validators(
            etag: nil, lastModified: "Mon, 01 Jan 2024 00:00:00 GMT", date: "Mon, 01 Jan 2024 00:01:00 GMT")
        #expect(old.ifRangeValue == "Mon, 01 Jan 2024 00:00:00 GMT")
        let noDate = Validators(etag: nil, lastModified: "Mon, 01 Jan 2024 00:00:00 GMT", date: nil)
        #expect(noDate.ifRangeValue == nil)
    }

    @Test func changeDetection() {
        let v1 = Validators(etag: "\"1\"", lastModified: nil, date: nil)
        #expect(v1.isChanged(comparedTo: Validators(etag: "\"2\"", lastModified: nil, date: nil)))
        #expect(!v1.isChanged(comparedTo: Validators(etag: "W/\"1\"", lastModified: nil, date: nil)))
        #expect(!v1.isChanged(comparedTo: Validators()))
        let lm = Validators(etag: nil, lastModified: "Mon, 01 Jan 2024 00:00:00 GMT", date: nil)
        #expect(
            lm.isChanged(comparedTo: Validators(etag: nil, lastModified: "Tue, 02 Jan 2024 00:00:00 GMT", date: nil)))
    }

    @Test(
        "HTTP dates in three formats",
        arguments: [
            ("Sun, 06 Nov 1994 08:49:37 GMT", Int64(784_111_777)),
            ("Sunday, 06-Nov-94 08:49:37 GMT", 784_111_777),
            ("Sun Nov  6 08:49:37 1994", 784_111_777),
            ("Thu, 01 Jan 1970 00:00:00 GMT", 0),
        ]
    )
    func httpDates(text: String, seconds: Int64) {
        #expect(HTTPDate.parse(text) == seconds)
    }

    @Test(
        "the byte reader of IMF-fixdate reads what the general reader reads, and leaves every other form to it",
        arguments: [
            ("Sun, 06 Nov 1994 08:49:37 GMT", Int64(784_111_777) as Int64?),
            ("sun, 06 NOV 1994 08:49:37 GMT", 784_111_777),
            ("Xyz, 31 Dec 9999 23:59:59 GMT", 253_402_300_799),
            ("Sun, 06 Nov 1994 08:49:37 gmt", nil),
            ("Sun,  6 Nov 1994 08:49:37 GMT", nil),
            ("Sun, 06 N1v 1994 08:49:37 GMT", nil),
            ("Sun, 06 Nov 1994 08:49:7x GMT", nil),
            ("Sun, 06 Nov 1994 24:00:00 GMT", nil),
        ]
    )
    func fixdateBytes(text: String, fast: Int64?) {
        #expect(HTTPDate.parseFixdate(text) == fast)
        if let fast { #expect(HTTPDate.parseAnyForm(text) == fast) }
        #expect(HTTPDate.parse(text) == HTTPDate.parseAnyForm(text))
    }

    @Test func badDates() {
        #expect(HTTPDate.parse("yesterday") == nil)
        #expect(HTTPDate.parse("Sun, 32 Nov 1994 08:49:37 GMT") == nil)
        #expect(HTTPDate.parse("Sun, 06 Foo 1994 08:49:37 GMT") == nil)
    }
}

@Suite("Retry policy")
struct RetryPolicyTests {
    let policy = RetryPolicy()
    let lost = DownloadError(.connectionLost, "lost")

    @Test(
        "backoff doubles from 1 s to a 60 s cap",
        arguments: [(1, 1), (2, 2), (3, 4), (4, 8), (7, 60), (30, 60)]
    )
    func backoff(failures: Int, seconds: Int64) {
        #expect(policy.backoff(failures: failures, jitter: 1) == .seconds(seconds))
        #expect(policy.backoff(failures: failures, jitter: 0) == .seconds(seconds) / 2)
    }

    @Test func givesUpAfterTheBound() {
        #expect(policy.decide(failures: 4, error: lost, jitter: 1) == .retry(after: .seconds(8)))
        #expect(policy.decide(failures: 5, error: lost, jitter: 1) == .giveUp)
    }

    @Test func honoursRetryAfter() {
        let busy = DownloadError.httpStatus(503, retryAfter: .seconds(7))
        #expect(policy.decide(failures: 1, error: busy, jitter: 0.3) == .retry(after: .seconds(7)))
        let absurd = DownloadError.httpStatus(429, retryAfter: .seconds(1_000_000))
        #expect(policy.decide(failures: 1, error: absurd, jitter: 0) == .retry(after: .seconds(3600)))
    }

    @Test("a status is told with its reason phrase; the server's own text, when given, instead")
    func statusMessages() {
        #expect(DownloadError.httpStatus(404).message == "server answered HTTP 404 Not Found")
        #expect(DownloadError.httpStatus(410).message == "server answered HTTP 410 Gone")
        #expect(DownloadError.httpStatus(599).message == "server answered HTTP 599")
        #expect(DownloadError.httpStatus(503, reason: "\"busy\"").message == "server answered HTTP 503 \"busy\"")
        #expect(DownloadError.httpStatus(401).message.hasPrefix("server answered HTTP 401 Unauthorized: it asks for"))
    }

    @Test(
        "statuses",
        arguments: [
            (408, true), (429, true), (500, true), (502, true), (503, true), (504, true), (400, false),
            (401, false), (403, false), (404, false), (410, false), (501, false),
        ]
    )
    func statuses(status: Int, retryable: Bool) {
        #expect(DownloadError.httpStatus(status).isRetryable == retryable)
        #expect(policy.decide(failures: 1, error: .httpStatus(status), jitter: 0) != .giveUp || !retryable)
    }

    @Test func nonRetryableErrorsStopAtOnce() {
        #expect(policy.decide(failures: 1, error: DownloadError(.checksumMismatch, "bad"), jitter: 0) == .giveUp)
        #expect(policy.decide(failures: 1, error: DownloadError(.diskFull, "full"), jitter: 0) == .giveUp)
    }

    @Test func retryAfterParsing() {
        #expect(RetryPolicy.retryAfter("120", now: nil) == .seconds(120))
        #expect(
            RetryPolicy.retryAfter(
                "Mon, 01 Jan 2024 00:00:30 GMT", now: HTTPDate.parse("Mon, 01 Jan 2024 00:00:00 GMT")) == .seconds(30))
        #expect(
            RetryPolicy.retryAfter(
                "Mon, 01 Jan 2024 00:00:00 GMT", now: HTTPDate.parse("Mon, 01 Jan 2024 00:01:00 GMT")) == .zero)
        #expect(RetryPolicy.retryAfter("soon", now: 0) == nil)
        #expect(RetryPolicy.retryAfter("-5", now: 0) == nil)
    }
}

@Suite("Checksum")
struct ChecksumTests {
    @Test func parses() throws {
        let checksum = try Checksum(parsing: "SHA256=" + String(repeating: "A", count: 64))
        #expect(checksum.algorithm == .sha256)
        #expect(checksum.hex == String(repeating: "a", count: 64))
        #expect(try Checksum(parsing: "md5=" + String(repeating: "0", count: 32)).algorithm == .md5)
    }

    @Test(arguments: ["sha256", "sha256=abc", "crc32=00000000", "sha1=" + String(repeating: "z", count: 40), "=00"])
    func rejects(text: String) {
        #expect(throws: DownloadError.self) { try Checksum(parsing: text) }
    }
}
