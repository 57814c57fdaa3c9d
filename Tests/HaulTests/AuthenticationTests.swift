import Crypto
import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

/// Credentials and cookies through the engine against the fault server: Digest (checked here with the RFC's
/// formulas written out, not with Haul's code), Basic only after the server asks, one 401 per origin, credentials kept
/// out of the store and dropped on a redirect to another host, cookies to their domain and path.
@Suite("Authentication and cookies", .serialized, .teardowns)
struct AuthenticationTests {
    let body = testBytes(3_000_000, seed: 21)
    /// Large enough to split at the smallest split size (1 MiB) after the ramp's first window.
    let digestBody = testBytes(4 << 20, seed: 22)

    static func md5(_ text: String) -> String {
        Insecure.MD5.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// The parameters of an `Authorization: Digest …` value.
    static func digestFields(_ value: String) -> [String: String] {
        var fields: [String: String] = [:]
        let pattern = /([a-z]+)=(?:"((?:[^"\\]|\\.)*)"|([^,\s]+))/
        for match in value.matches(of: pattern) {
            fields[String(match.output.1)] = String(match.output.2 ?? match.output.3 ?? "")
        }
        return fields
    }

    /// Whether a request carries a correct Digest answer for user alice, password "wonder land", realm "files".
    static func validDigest(_ request: FaultServer.RecordedRequest, nonce: String) -> Bool {
        guard let value = request.headers["authorization"], value.hasPrefix("Digest ") else { return false }
        let f = digestFields(value)
        guard f["username"] == "alice", f["nonce"] == nonce, f["qop"] == "auth", let nc = f["nc"],
            let cnonce = f["cnonce"], let uri = f["uri"], uri == request.path
        else { return false }
        let ha1 = md5("alice:files:wonder land")
        let ha2 = md5("GET:\(uri)")
        return f["response"] == md5("\(ha1):\(nonce):\(nc):\(cnonce):auth:\(ha2)")
    }

    @Test("Digest: one 401, then every segment answers the challenge with a rising nonce count")
    func digest() async throws {
        let h = try await Harness.make()
        let nonce = "dcd98b7102dd2f0e8b11d0f600bfb0c093"
        h.server.serve(
            "/d",
            .init(body: digestBody, bytesPerSecond: 2 << 20) { _, request in
                Self.validDigest(request, nonce: nonce)
                    ? nil
                    : .status(
                        401,
                        headers: [
                            "WWW-Authenticate":
                                #"Basic realm="files", Digest realm="files", qop="auth", nonce="\#(nonce)", opaque="x""#
                        ])
            })
        // 4 MiB at 2 MiB/s a connection: the ramp opens more connections, each sending its own answer.
        var options = DownloadOptions(maxConnectionsPerDownload: 4, minimumSplitSize: 1 << 20)
        options.network.credentials = Credentials(user: "alice", password: "wonder land")
        options.network.usesNetrc = false
        _ = try await h.fetch("/d", options: options) { $0.engine.connectionRampWindow = .milliseconds(200) }
        #expect(h.holds("file.bin", digestBody))
        let requests = h.server.requests(to: "/d")
        #expect(requests.filter { $0.status == 401 }.count == 1, "\(requests.map(\.status))")
        let counts = requests.compactMap { $0.headers["authorization"].map(Self.digestFields)?["nc"] }
        #expect(counts.count >= 2, "several segments, each answering: \(counts)")
        #expect(Set(counts).count == counts.count, "each answer has its own nonce count: \(counts)")
        #expect(!requests.contains { $0.headers["authorization"]?.hasPrefix("Basic") == true }, "Digest preferred")
    }

    @Test("Basic goes only to a server that asked; a wrong password fails at once naming the user")
    func basic() async throws {
        let h = try await Harness.make()
        let expected = "Basic " + Data("bob:s3cret".utf8).base64EncodedString()
        h.server.serve(
            "/b",
            .init(body: body) { _, request in
                request.headers["authorization"] == expected
                    ? nil : .status(401, headers: ["WWW-Authenticate": #"Basic realm="files""#])
            })
        var options = DownloadOptions()
        options.network.usesNetrc = false
        options.network.credentials = Credentials(user: "bob", password: "s3cret")
        _ = try await h.fetch("/b", options: options)
        #expect(h.holds("file.bin", body))
        #expect(h.server.requests(to: "/b").first?.headers["authorization"] == nil, "no password before the 401")

        options.network.credentials = Credentials(user: "bob", password: "wrong")
        let before = h.server.requests(to: "/b").count
        let error = await h.fetchError("/b", to: "other.bin", options: options)
        #expect(error?.message.contains("refused the credentials of bob") == true, "\(String(describing: error))")
        #expect(error?.isRetryable == false)
        #expect(h.server.requests(to: "/b").count - before <= 2, "not retried")

        options.network.credentials = nil
        let missing = await h.fetchError("/b", to: "third.bin", options: options)
        #expect(missing?.message.contains("it asks for credentials (--user") == true, "\(String(describing: missing))")
    }

    @Test("a URL's user:password@ authenticates and is stored nowhere; a redirect to another host drops it")
    func urlCredentials() async throws {
        let h = try await Harness.make()
        let expected = "Basic " + Data("carol:pa ss@word".utf8).base64EncodedString()
        h.server.serve(
            "/u",
            .init(body: body) { _, request in
                request.headers["authorization"] == expected
                    ? nil : .status(401, headers: ["WWW-Authenticate": #"Basic realm="u""#])
            })
        var components = URLComponents(url: h.server.url("/u"), resolvingAgainstBaseURL: false)!
        components.user = "carol"
        components.password = "pa ss@word"
        var configuration = DownloadManager.Configuration(stateDirectory: h.stateDirectory)
        configuration.clock = h.clock
        configuration.idleClock = h.idleClock
        var options = DownloadOptions()
        options.network.usesNetrc = false
        let result = try await DownloadManager.download(
            components.url!, to: h.path("file.bin"), options: options, configuration: configuration)
        #expect(h.holds("file.bin", body))
        #expect(!result.url.contains("carol"))
        // Nothing of the password in the store's files.
        for name in (try? FileManager.default.contentsOfDirectory(atPath: h.stateDirectory)) ?? [] {
            let bytes = FileManager.default.contents(atPath: h.stateDirectory + "/" + name) ?? Data()
            #expect(bytes.range(of: Data("pa ss".utf8)) == nil, "\(name) holds the password")
            #expect(bytes.range(of: Data("pa%20ss".utf8)) == nil, "\(name) holds the password")
        }

        // A redirect to another host (localhost for 127.0.0.1) gets no credentials.
        let other = h.server.url("/u").absoluteString.replacingOccurrences(of: "127.0.0.1", with: "localhost")
        h.server.serve("/r", .init(body: []) { _, _ in .redirect(to: other) })
        var redirected = URLComponents(url: h.server.url("/r"), resolvingAgainstBaseURL: false)!
        redirected.user = "carol"
        redirected.password = "pa ss@word"
        let before = h.server.requests(to: "/u").count
        await #expect(throws: DownloadError.self) {
            _ = try await DownloadManager.download(
                redirected.url!, to: h.path("again.bin"), options: options, configuration: configuration)
        }
        let after = h.server.requests(to: "/u").dropFirst(before)
        #expect(!after.isEmpty)
        #expect(after.allSatisfy { $0.headers["authorization"] == nil }, "credentials dropped on another host")
    }

    @Test("a mirror on another host gets none of the download's Authorization, Cookie header or --cookie data")
    func mirrorGetsNoSecrets() async throws {
        let h = try await Harness.make()
        // Slow enough that work is left to split when the mirror may be asked, even on a loaded machine.
        h.server.serve("/m", .init(body: body, bytesPerSecond: 1 << 19))
        var options = DownloadOptions(maxConnectionsPerDownload: 2, minimumSplitSize: 1 << 20)
        options.headers = [
            RequestHeader(name: "Authorization", value: "Bearer secret"),
            RequestHeader(name: "Cookie", value: "mine=1"),
        ]
        options.network.cookies = "lang=en"
        options.network.usesNetrc = false
        // The same server under another host name: a mirror on another host.
        options.mirrors = [h.server.url("/m").absoluteString.replacingOccurrences(of: "127.0.0.1", with: "localhost")]
        _ = try await h.fetch("/m", options: options)
        #expect(h.holds("file.bin", body))
        let requests = h.server.requests(to: "/m")
        let mirrored = requests.filter { $0.headers["host"]?.hasPrefix("localhost") == true }
        let own = requests.filter { $0.headers["host"]?.hasPrefix("127.0.0.1") == true }
        #expect(!mirrored.isEmpty, "the mirror was asked")
        #expect(mirrored.allSatisfy { $0.headers["authorization"] == nil && $0.headers["cookie"] == nil })
        #expect(!own.isEmpty && own.allSatisfy { $0.headers["authorization"] == "Bearer secret" })
        #expect(own.allSatisfy { $0.headers["cookie"] == "mine=1; lang=en" })
    }

    @Test("cookies: --cookie pairs and a cookie file's matching cookies are sent; others are not")
    func cookies() async throws {
        let h = try await Harness.make()
        h.server.serve("/c/file", .init(body: body))
        let file = h.folder + "/../cookies.txt"
        try """
        # Netscape HTTP Cookie File
        127.0.0.1\tFALSE\t/c\tFALSE\t0\tsession\tok
        127.0.0.1\tFALSE\t/other\tFALSE\t0\telsewhere\tno
        127.0.0.1\tFALSE\t/\tTRUE\t0\tsecure\tno
        example.com\tTRUE\t/\tFALSE\t0\tforeign\tno
        127.0.0.1\tFALSE\t/\tFALSE\t1\texpired\tno
        """.write(toFile: file, atomically: true, encoding: .utf8)
        var options = DownloadOptions()
        options.network.cookieFile = file
        options.network.cookies = "lang=en"
        options.headers = [RequestHeader(name: "Cookie", value: "mine=1")]
        _ = try await h.fetch("/c/file", options: options)
        #expect(h.holds("file.bin", body))
        #expect(h.server.requests(to: "/c/file").first?.headers["cookie"] == "mine=1; session=ok; lang=en")
    }
}
