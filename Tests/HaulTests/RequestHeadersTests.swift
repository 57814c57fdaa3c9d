import HaulCore
import Testing
import Tracing

@testable import Haul

@Suite("The headers of a request")
struct RequestHeadersTests {
    @Test("a user's header replaces Haul's of any case; the resume headers and Accept-Encoding stay Haul's")
    func userHeaders() {
        var options = DownloadOptions()
        options.headers = [
            RequestHeader(name: "user-agent", value: "mine/1"),
            RequestHeader(name: "ACCEPT", value: "text/plain"),
            RequestHeader(name: "Range", value: "bytes=0-"),
            RequestHeader(name: "if-Match", value: "\"x\""),
            RequestHeader(name: "Accept-Encoding", value: "gzip"),
            RequestHeader(name: "X-One", value: "1"),
            RequestHeader(name: "x-one", value: "2"),
        ]
        let headers = DownloadRunner.headers(
            options: options, defaultUserAgent: "haul/test", range: "bytes=10-", ifRange: "\"e\"")
        #expect(headers.map(\.name) == ["user-agent", "ACCEPT", "x-one", "Accept-Encoding", "Range", "If-Range"])
        #expect(headers.map(\.value) == ["mine/1", "text/plain", "2", "identity", "bytes=10-", "\"e\""])
    }

    @Test("without user headers: the default agent, identity coding, and a precondition by its validator's kind")
    func defaults() {
        let tagged = DownloadRunner.headers(
            options: DownloadOptions(), defaultUserAgent: "haul/test", range: nil, ifRange: nil,
            precondition: "W/\"t\"")
        #expect(tagged.map(\.name) == ["User-Agent", "Accept-Encoding", "Accept", "If-Match"])
        #expect(tagged.first?.value == "haul/test")
        let dated = DownloadRunner.headers(
            options: DownloadOptions(), defaultUserAgent: "haul/test", range: nil, ifRange: nil,
            precondition: "Tue, 01 Sep 2026 10:00:00 GMT")
        #expect(dated.last?.name == "If-Unmodified-Since")
        let resumed = DownloadRunner.headers(
            options: DownloadOptions(), defaultUserAgent: "haul/test", range: "bytes=5-", ifRange: "\"e\"")
        #expect(resumed.map(\.name) == ["User-Agent", "Accept-Encoding", "Accept", "Range", "If-Range"])
        #expect(resumed.map(\.value) == ["haul/test", "identity", "*/*", "bytes=5-", "\"e\""])
    }

    @Test("without a tracer bootstrapped, requests make no spans: the client's tracer is off, not the no-op one")
    func noSpansWithoutTracer() {
        #expect(InstrumentationSystem.tracer is NoOpTracer)
        #expect(LiveTransport.baseConfiguration().tracing.tracer == nil)
    }
}
