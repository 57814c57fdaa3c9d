import HaulCore
import Testing

@Suite("Download rules: every limit the API documents, decided in one place")
struct DownloadRulesTests {
    /// Each check with the values at and beyond its bounds: (check, value in words, accepted).
    static var cases: [(String, () throws(DownloadRules.RuleViolation) -> Void, Bool)] {
        [
            (
                "connections 1", { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkConnections(1) },
                true
            ),
            (
                "connections 16", { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkConnections(16) },
                true
            ),
            (
                "connections 0", { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkConnections(0) },
                false
            ),
            (
                "connections 17", { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkConnections(17) },
                false
            ),
            (
                "split 1 MiB",
                { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkMinimumSplitSize(1 << 20) }, true
            ),
            (
                "split 1 MiB - 1",
                { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkMinimumSplitSize((1 << 20) - 1) },
                false
            ),
            (
                "jobs 1", { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkConcurrentDownloads(1) },
                true
            ),
            (
                "jobs 1000",
                { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkConcurrentDownloads(1000) }, true
            ),
            (
                "jobs 0", { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkConcurrentDownloads(0) },
                false
            ),
            (
                "jobs 1001",
                { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkConcurrentDownloads(1001) }, false
            ),
            ("rate none", { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkRate(nil) }, true),
            ("rate 1", { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkRate(1) }, true),
            ("rate 0", { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkRate(0) }, false),
            (
                "timeout a week", { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkTimeout(604_800) },
                true
            ),
            (
                "timeout a week and a second",
                { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkTimeout(604_801) }, false
            ),
            ("timeout 0", { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkTimeout(0) }, false),
            (
                "timeout infinite",
                { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkTimeout(.infinity) }, false
            ),
            ("retries 0", { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkRetries(0) }, true),
            ("retries -1", { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkRetries(-1) }, false),
            ("page 0", { () throws(DownloadRules.RuleViolation) in try DownloadRules.checkPageSize(0) }, false),
            (
                "name 4096 bytes",
                { () throws(DownloadRules.RuleViolation) in
                    try DownloadRules.checkNameLength(String(repeating: "a", count: 4096))
                }, true
            ),
            (
                "name 4097 bytes",
                { () throws(DownloadRules.RuleViolation) in
                    try DownloadRules.checkNameLength(String(repeating: "a", count: 4097))
                }, false
            ),
        ]
    }

    @Test("each check accepts its bounds and refuses what lies beyond them")
    func bounds() {
        for (name, check, accepted) in Self.cases {
            var refused: DownloadRules.RuleViolation?
            do { try check() } catch { refused = error }
            #expect((refused == nil) == accepted, "\(name): \(refused?.description ?? "accepted")")
        }
    }

    @Test("a refusal says what is wrong in words that follow any field name")
    func wording() {
        #expect(throws: DownloadRules.RuleViolation(rule: .connections, problem: "must be between 1 and 16, not 40")) {
            try DownloadRules.checkConnections(40)
        }
        let error = DownloadError(
            DownloadRules.RuleViolation(rule: .connections, problem: "must be between 1 and 16, not 40"),
            subject: "connections")
        #expect(error.code == .invalidArgument && error.message == "connections must be between 1 and 16, not 40")
        // A URL's refusal names what is wrong with it, and a list's line says the same.
        for (text, problem) in [
            ("http://host/a b.iso", "contains a space (percent-encode it as %20)"),
            ("http://host/a\u{7}", "contains a control character (U+0007)"),
            ("http:///no-host", "has no host"), ("gopher://host/", "is not an http, https or ftp URL"),
        ] {
            #expect(throws: DownloadRules.RuleViolation(rule: .url, problem: problem)) {
                try DownloadRules.checkURL(text)
            }
            do {
                _ = try URLList.parse("http://host/ok\n\(text)\n")
                Issue.record("'\(text)' is refused in a list")
            } catch {
                #expect(error.message == "'\(text)' (line 2) \(problem)")
            }
        }
    }

    @Test(
        "a user's header: any valid one but Haul's own and an Accept-Encoding other than identity",
        arguments: [
            ("X-Token", "1", true), ("User-Agent", "mine/1", true), ("Accept-Encoding", "identity", true),
            ("accept-encoding", "IDENTITY", true), ("Cookie", "a=b", true), ("Range", "bytes=0-5", false),
            ("range", "bytes=0-", false), ("If-Range", "\"e\"", false), ("IF-MATCH", "\"e\"", false),
            ("If-Unmodified-Since", "Tue, 01 Sep 2026 10:00:00 GMT", false), ("Accept-Encoding", "gzip", false),
            ("Bad Name", "x", false), ("X-A", "1\r\nX-B: 2", false),
        ])
    func header(_ name: String, _ value: String, _ accepted: Bool) {
        var refusal: DownloadRules.RuleViolation?
        do { try DownloadRules.checkHeader(RequestHeader(name: name, value: value)) } catch { refusal = error }
        #expect((refusal == nil) == accepted, "\(name): \(refusal?.description ?? "accepted")")
        #expect(refusal.map { $0.rule == .header && $0.problem.contains("'\(name)") } ?? true)
    }

    @Test(
        "a download's URL: the five schemes with a host; anything else, spaces and control characters refused",
        arguments: [
            ("https://example.com/f", true), ("HTTP://example.com/", true), ("ftp://host/file", true),
            ("ftpes://host/file", true), ("ftps://host:990/file", true), ("file:///etc/passwd", false),
            ("gopher://host/", false), ("http:///no-host", false), ("http://host/a b", false),
            ("http://host/a\u{7F}", false), ("example.com/f", false), ("", false),
        ])
    func url(_ text: String, _ accepted: Bool) {
        #expect(((try? DownloadRules.checkURL(text)) != nil) == accepted, "\(text)")
        #expect(URLList.isDownloadable(text) == accepted, "the -i list's check is the same rule")
    }
}
