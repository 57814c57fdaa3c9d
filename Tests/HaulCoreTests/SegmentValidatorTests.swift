import HaulCore
import Testing

@Suite("Segment validator")
struct SegmentValidatorTests {
    static let known = RemoteFacts(
        totalLength: 1000, validators: Validators(etag: "\"v1\"", lastModified: nil, date: nil), isResumable: true)

    enum Kind: String, CustomTestStringConvertible {
        case write, versionChanged, oneConnection, fail
        var testDescription: String { rawValue }
    }

    static func kind(_ decision: SegmentValidator.Decision) -> Kind {
        switch decision {
        case .write: .write
        case .versionChanged: .versionChanged
        case .oneConnection: .oneConnection
        case .fail: .fail
        }
    }

    /// Every answer to a request for bytes 400..<600 of a known 1000-byte version "v1".
    @Test(
        "answers to a segment request",
        arguments: [
            (
                206, [("Content-Range", "bytes 400-599/1000"), ("Content-Length", "200"), ("ETag", "\"v1\"")],
                Kind.write
            ),
            // A server may send less than asked; the rest is asked again.
            (206, [("Content-Range", "bytes 400-499/1000"), ("ETag", "\"v1\"")], .write),
            (206, [("Content-Range", "bytes 400-599/1000")], .write),
            // Another version: nothing of it is mixed with the bytes held.
            (206, [("Content-Range", "bytes 400-599/1000"), ("ETag", "\"v2\"")], .versionChanged),
            (206, [("Content-Range", "bytes 400-599/1200"), ("ETag", "\"v1\"")], .versionChanged),
            (200, [("Content-Length", "1000"), ("ETag", "\"v2\"")], .versionChanged),
            (200, [("Content-Length", "1200")], .versionChanged),
            (416, [("Content-Range", "bytes */300")], .versionChanged),
            // The same version but the range ignored: never written at the segment's offset.
            (200, [("Content-Length", "1000"), ("ETag", "\"v1\"")], .oneConnection),
            // Wrong start, multipart, or no usable Content-Range: ranges are not served correctly.
            (206, [("Content-Range", "bytes 0-599/1000"), ("ETag", "\"v1\"")], .oneConnection),
            (206, [("Content-Range", "bytes 401-599/1000"), ("ETag", "\"v1\"")], .oneConnection),
            (206, [("Content-Type", "multipart/byteranges; boundary=x")], .oneConnection),
            (206, [("ETag", "\"v1\"")], .oneConnection),
            (206, [("Content-Range", "bytes 400-599/1000"), ("Content-Length", "100")], .oneConnection),
            (206, [("Content-Range", "bytes 400-599/1000"), ("Content-Encoding", "gzip")], .fail),
            (503, [("Retry-After", "5")], .fail),
            (404, [], .fail),
        ] as [(Int, [(String, String)], Kind)]
    )
    func answers(status: Int, headers: [(String, String)], expected: Kind) {
        let head = ResponseHead(status: status, headers: headers.map { (name: $0.0, value: $0.1) })
        let decision = SegmentValidator().decide(start: 400, end: 600, head: head, known: Self.known)
        #expect(Self.kind(decision) == expected)
        if case .write(let length) = decision {
            #expect(length == (headers.contains { $0.1.contains("499") } ? 100 : 200))
        }
    }

    @Test func retryableStatusesKeepTheirRetryAfter() {
        let head = ResponseHead(status: 503, headers: [(name: "Retry-After", value: "5")])
        guard case .fail(let error) = SegmentValidator().decide(start: 0, end: 10, head: head, known: Self.known) else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.status == 503 && error.isRetryable && error.retryAfter == .seconds(5))
    }
}
