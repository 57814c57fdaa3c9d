import Foundation
import HTTPTypes
import Haul
import HaulAPI
import HaulCore
import HaulTesting
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOEmbedded
import Testing

@testable import HaulServer
@testable import HaulWire

@Suite("The daemon's API", .timeLimit(.minutes(2)), .teardowns)
struct RouterTests {
    let bytes = testBytes(40_000, seed: 3)

    @Test("adding one download: 201 with a Location, the file lands byte for byte; the same again: 200, same id")
    func addOne() async throws {
        let h = try await ServerHarness.make()
        h.server.serve("/a.bin", .init(body: bytes))
        try await h.application().test(.router) { client in
            let response = try await client.post("/api/v1/downloads", #"{"url": "\#(h.server.url("/a.bin"))"}"#)
            #expect(response.status == .created)
            let added = try body(Components.Schemas.Download.self, response)
            #expect(response.headers[.location] == "/api/v1/downloads/\(added.id)")
            #expect(added.directory == FolderPolicyTests.real(h.downloads))
            #expect(added.origin == .api)
            _ = try await h.manager.result(of: DownloadID(added.id))
            #expect(FileManager.default.contents(atPath: h.path("a.bin")) == Data(bytes))
            let again = try await client.post("/api/v1/downloads", #"{"url": "\#(h.server.url("/a.bin"))"}"#)
            #expect(again.status == .ok)
            #expect(try body(Components.Schemas.Download.self, again).id == added.id)
            let fetched = try body(
                Components.Schemas.Download.self, try await client.get("/api/v1/downloads/\(added.id)"))
            #expect(fetched.state == .completed && fetched.receivedBytes == Int64(bytes.count))
            #expect(fetched.totalBytes == Int64(bytes.count) && fetched.completedAt != nil)
            #expect(fetched.path == FolderPolicyTests.real(h.downloads) + "/a.bin")
        }
    }

    @Test("a list is added in one transaction, in order; one bad item adds none and the 400 names its index and field")
    func addList() async throws {
        let h = try await ServerHarness.make()
        try await h.application().test(.router) { client in
            let items = (0..<5).map { index in
                let url = h.server.url("/\(index)")
                return #"{"url": "\#(url)", "paused": true}"#
            }
            let response = try await client.post("/api/v1/downloads", "[" + items.joined(separator: ",") + "]")
            #expect(response.status == .ok)
            let list = try body(Components.Schemas.DownloadList.self, response)
            #expect(list.downloads.map(\.url) == (0..<5).map { h.server.url("/\($0)").absoluteString })
            #expect(list.downloads.allSatisfy { $0.state == .paused })
            let bad = try await client.post(
                "/api/v1/downloads",
                #"[{"url": "\#(h.server.url("/x"))"}, {"url": "http://h/y", "connections": 40}]"#)
            #expect(bad.status == .badRequest)
            let error = try apiError(bad)
            #expect(error.index == 1 && error.field == "connections")
            #expect(error.message.contains("item 1") && error.message.contains("between 1 and 16"))
            let wrongType = try await client.post(
                "/api/v1/downloads", #"[{"url": "http://h/1"}, {"url": "http://h/2"}, {"url": 3}]"#)
            #expect(wrongType.status == .badRequest)
            let typeError = try apiError(wrongType)
            #expect(typeError.index == 2 && typeError.field == "url", "\(typeError.message)")
            let all = try body(Components.Schemas.DownloadList.self, try await client.get("/api/v1/downloads"))
            #expect(all.downloads.count == 5, "nothing of the bad lists was added")
        }
    }

    @Test(
        "Prefer's return=minimal is read as RFC 7240 writes it, among other preferences",
        arguments: [
            ("return=minimal", true), ("respond-async, return=minimal", true), ("RETURN = \"Minimal\"; x=1", true),
            ("wait=5,\treturn=minimal ;a", true), ("return=representation", false), ("return=minimal2", false),
            ("return", false), ("", false), (",,", false), ("x-return=minimal", false), ("return=\"minimal", false),
        ])
    func preferReading(header: String, minimal: Bool) {
        #expect(APIHandler.prefersMinimal(header) == minimal)
    }

    @Test(
        "a body is JSON by its media type, in any case, with blanks and parameters around it",
        arguments: [
            ("application/json", true), (" Application/JSON ; charset=utf-8", true), ("application/json\t;", true),
            ("application/jsonx", false), ("application/json-seq", false), ("text/json", false), ("", false),
            (";application/json", false),
        ])
    func jsonType(type: String, isJSON: Bool) {
        #expect(APIWire.isJSON(type) == isJSON)
    }

    @Test(
        "Authorization: Bearer in any case, the token with blanks around it; anything else is not the token",
        arguments: [
            ("Bearer s3cret", true), ("bearer  s3cret\t", true), ("BEARER s3cret", true), ("Bearer s3cre", false),
            ("Bearer s3cretx", false), ("Basic s3cret", false), ("Bearer ", false), ("Bearers3cret", false),
            ("Bearer S3cret", false), ("", false),
        ])
    func bearer(value: String, accepted: Bool) {
        var value = value
        #expect(value.withUTF8(Credentials(token: "s3cret").isBearerToken) == accepted)
    }

    @Test("Prefer: return=minimal answers ids only (one: 201 with Location, a list: in order), and says so")
    func preferMinimal() async throws {
        let h = try await ServerHarness.make()
        try await h.application().test(.router) { client in
            var headers = authorized
            headers[.prefer] = "respond-async, return=minimal"
            let one = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: headers,
                body: json(#"{"url": "\#(h.server.url("/one"))", "paused": true}"#))
            #expect(one.status == .created)
            #expect(one.headers[.preferenceApplied] == "return=minimal")
            let added = try body(Components.Schemas.AddedID.self, one)
            #expect(one.headers[.location] == "/api/v1/downloads/\(added.id)")
            #expect(String(buffer: one.body) == #"{"id":"\#(added.id)"}"#)
            let items = (0..<3).map { index in #"{"url": "\#(h.server.url("/item\(index)"))", "paused": true}"# }
            let list = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: headers,
                body: json("[" + items.joined(separator: ",") + "]"))
            #expect(list.status == .ok && list.headers[.preferenceApplied] == "return=minimal")
            let ids = try body(Components.Schemas.AddedIDs.self, list).ids
            var urls: [String] = []
            for id in ids {
                urls.append(
                    try body(Components.Schemas.Download.self, try await client.get("/api/v1/downloads/\(id)")).url)
            }
            #expect(urls == (0..<3).map { h.server.url("/item\($0)").absoluteString }, "the ids in the list's order")
            // Without the preference, or with another one: the downloads in full.
            headers[.prefer] = "return=representation"
            let full = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: headers,
                body: json(#"{"url": "\#(h.server.url("/full"))", "paused": true}"#))
            #expect(full.headers[.preferenceApplied] == nil)
            #expect(try body(Components.Schemas.Download.self, full).url.hasSuffix("/full"))
        }
    }

    @Test("malformed JSON, an unknown field, a wrong type, a bad URL: 400 naming the problem; not JSON: 415")
    func badBodies() async throws {
        let h = try await ServerHarness.make()
        try await h.application().test(.router) { client in
            let malformed = try await client.post("/api/v1/downloads", #"{"url": "#)
            #expect(malformed.status == .badRequest)
            let unknown = try await client.post("/api/v1/downloads", #"{"url": "http://h/a", "colour": "red"}"#)
            #expect(unknown.status == .badRequest)
            #expect(try apiError(unknown).field == "colour")
            #expect(try apiError(unknown).message.contains("not a known field"))
            let wrongType = try await client.post("/api/v1/downloads", #"{"url": "http://h/a", "paused": "yes"}"#)
            #expect(try apiError(wrongType).field == "paused")
            // A value outside an enumeration is told with the values the field takes, not the generated type's name.
            let priority = try await client.post("/api/v1/downloads", #"{"url": "http://h/a", "priority": "urgent"}"#)
            #expect(try apiError(priority).field == "priority")
            #expect(try apiError(priority).message == "priority: 'urgent' is not one of high, normal, low")
            let missing = try await client.post("/api/v1/downloads", #"{"directory": "x"}"#)
            #expect(missing.status == .badRequest)
            #expect(try apiError(missing).field == "url")
            for url in ["sftp://h/a", "ftpx://h/a", "not a url", "http://", "ftp://"] {
                let response = try await client.post("/api/v1/downloads", #"{"url": "\#(url)"}"#)
                #expect(response.status == .badRequest, "\(url)")
                #expect(try apiError(response).field == "url")
            }
            let spaced = try await client.post("/api/v1/downloads", #"{"url": "http://h/a b.iso"}"#)
            #expect(
                try apiError(spaced).message == "url: 'http://h/a b.iso' contains a space (percent-encode it as %20)")
            let nonASCII = try await client.post("/api/v1/downloads", #"{"url": "http://h/ä"}"#)
            #expect(try apiError(nonASCII).message.hasSuffix("(ASCII host; percent-encode the rest)"))
            let checksum = try await client.post("/api/v1/downloads", #"{"url": "http://h/a", "checksum": "crc=1"}"#)
            #expect(try apiError(checksum).field == "checksum")
            let short = try await client.post("/api/v1/downloads", #"{"url": "http://h/a", "checksum": "sha256=ab"}"#)
            #expect(try apiError(short).message == "checksum: 'sha256=ab': a sha256 digest is 64 hex digits")
            let header = try await client.post(
                "/api/v1/downloads", #"{"url": "http://h/a", "headers": {"Bad Name": "x"}}"#)
            #expect(try apiError(header).field == "headers")
            let text = try await client.execute(
                uri: "/api/v1/downloads", method: .post,
                headers: [.authorization: "Bearer \(ServerHarness.token)", .contentType: "text/plain"],
                body: json(#"{"url": "http://h/a"}"#))
            #expect(text.status == .unsupportedMediaType)
            #expect(try apiError(text).code == "unsupportedMediaType")
            #expect(
                try body(Components.Schemas.DownloadList.self, try await client.get("/api/v1/downloads"))
                    .downloads.isEmpty)
        }
    }

    @Test(
        "a null where the field takes none, control characters, a NUL in a path, a URL outside the pattern: 400; a folder in the way: 409"
    )
    func strictFields() async throws {
        let h = try await ServerHarness.make()
        try await h.application().test(.router) { client in
            let cases: [(String, String)] = [
                (#"{"url": "http://h/a", "connections": null}"#, "connections"),
                (#"[{"url": "http://h/a"}, {"url": "http://h/b", "priority": null}]"#, "priority"),
                (#"{"url": "http://h/a", "headers": {"X-A": "1\r\nX-B: 2"}}"#, "headers"),
                (#"{"url": "http://h/a", "headers": {"Range": "bytes=0-5"}}"#, "headers"),
                (#"{"url": "http://h/a", "headers": {"Accept-Encoding": "gzip"}}"#, "headers"),
                (#"{"url": "http://h/a", "userAgent": "a\nb"}"#, "userAgent"),
                (#"{"url": "HTTP://h/a"}"#, "url"),
                (#"{"url": "http://h/a b"}"#, "url"),
                (#"{"url": "http://h:99999/a"}"#, "url"),
                (#"{"url": "http://h/%zz"}"#, "url"),
                (#"{"url": "http://h/a", "retries": 1000001}"#, "retries"),
                (#"[{"url": "http://h/a"}, {"url": "http://h/b", "filename": "a\u0000b"}]"#, "filename"),
                (#"{"url": "http://h/a", "directory": "x\u0000"}"#, "directory"),
            ]
            for (body, field) in cases {
                let response = try await client.post("/api/v1/downloads", body)
                #expect(response.status == .badRequest, "\(body)")
                #expect(try apiError(response).field == field, "\(body)")
            }
            let settings = try await client.execute(
                uri: "/api/v1/settings", method: .patch, headers: authorized, body: json(#"{"connections": null}"#))
            #expect(settings.status == .badRequest)
            #expect(
                try body(Components.Schemas.DownloadList.self, try await client.get("/api/v1/downloads"))
                    .downloads.isEmpty)
            // A folder where the file should go is the disk's state, not a bad request: 409, and 201 once it is gone.
            try FileManager.default.createDirectory(atPath: h.path("taken"), withIntermediateDirectories: true)
            let inTheWay = #"{"url": "http://h/a", "filename": "taken", "paused": true}"#
            let conflict = try await client.post("/api/v1/downloads", inTheWay)
            #expect(conflict.status == .conflict)
            #expect(try apiError(conflict).code == "destinationExists")
            try FileManager.default.removeItem(atPath: h.path("taken"))
            #expect(try await client.post("/api/v1/downloads", inTheWay).status == .created)
        }
        // The pattern the handler checks is the document's.
        #expect(String(decoding: APIDocument.yaml, as: UTF8.self).contains(#"pattern: "\#(APIHandler.urlPattern)""#))
    }

    @Test("network options reach the server; credentials and cookies are never returned or stored; bad ones named")
    func networkOptions() async throws {
        let h = try await ServerHarness.make()
        let expected = "Basic " + Data("bob:s3cret-pw".utf8).base64EncodedString()
        h.server.serve(
            "/private.bin",
            .init(body: bytes) { _, request in
                request.headers["authorization"] == expected && request.headers["cookie"] == "session=ok"
                    ? nil : .status(401, headers: ["WWW-Authenticate": #"Basic realm="files""#])
            })
        try await h.application().test(.router) { client in
            let added = try await client.post(
                "/api/v1/downloads",
                #"""
                {"url": "\#(h.server.url("/private.bin"))", "credentials": {"user": "bob", "password": "s3cret-pw"},
                 "cookies": "session=ok", "useNetrc": false, "noProxy": "*"}
                """#)
            #expect(added.status == .created)
            #expect(!String(buffer: added.body).contains("s3cret-pw"))
            let download = try body(Components.Schemas.Download.self, added)
            _ = try await h.manager.result(of: DownloadID(download.id))
            #expect(FileManager.default.contents(atPath: h.path("private.bin")) == Data(bytes))
            let listed = try await client.get("/api/v1/downloads")
            #expect(!String(buffer: listed.body).contains("s3cret-pw"))
            #expect(!String(buffer: listed.body).contains("session=ok"))
            for name in try FileManager.default.subpathsOfDirectory(atPath: h.state) {
                let data = FileManager.default.contents(atPath: h.state + "/" + name) ?? Data()
                #expect(data.range(of: Data("s3cret-pw".utf8)) == nil, "\(name) holds the password")
            }

            let bad: [(String, String, String)] = [
                (#""proxy": "socks4://p:1080""#, "proxy", "SOCKS4"),
                (#""cookies": "no pair here""#, "cookies", "is not name=value"),
                (#""tls": {"caCertificates": "ca.pem"}"#, "tls.caCertificates", "absolute path"),
                (
                    #""tls": {"caCertificates": "/nonexistent/ca.pem"}"#, "tls.caCertificates",
                    "not a file the daemon can read"
                ),
                (#""tls": {"clientKey": "\#(h.state)"}"#, "tls.clientKey", "not a file"),
                (#""cookieFile": "/nonexistent/cookies.txt""#, "cookieFile", "not a file the daemon can read"),
                (#""credentials": {"user": "", "password": "x"}"#, "credentials.user", "must not be empty"),
            ]
            for (field, name, fragment) in bad {
                let response = try await client.post(
                    "/api/v1/downloads", #"{"url": "\#(h.server.url("/x.bin"))", \#(field)}"#)
                // A well-formed path the daemon cannot read is the disk's state: 409; anything malformed: 400.
                #expect(
                    response.status == (fragment.hasPrefix("not a") ? .conflict : .badRequest), "\(field)")
                let error = try apiError(response)
                #expect(error.field == name, "\(field): \(error.message)")
                #expect(error.message.contains(fragment), "\(field): \(error.message)")
            }
        }
    }

    @Test("a method a path does not take: 405 with Allow; an unknown path: 404")
    func methods() async throws {
        let h = try await ServerHarness.make()
        try await h.application().test(.router) { client in
            let put = try await client.execute(uri: "/api/v1/downloads/x/pause", method: .put, headers: authorized)
            #expect(put.status == .methodNotAllowed)
            #expect(put.headers[.allow] == "POST")
            let trace = try await client.execute(uri: "/api/v1/downloads/x", method: .trace, headers: authorized)
            #expect(trace.status == .methodNotAllowed)
            #expect(trace.headers[.allow] == "DELETE, GET, PATCH")
            #expect(try apiError(trace).code == "methodNotAllowed")
            let unknown = try await client.execute(uri: "/api/v1/nothing", method: .get, headers: authorized)
            #expect(unknown.status == .notFound)
        }
    }

    @Test("a body over 8 MiB: 413")
    func tooLarge() async throws {
        let h = try await ServerHarness.make()
        try await h.application().test(.router) { client in
            let big = "[" + String(repeating: #"{"url": "http://h/a"},"#, count: 400_000) + #"{"url": "http://h/a"}]"#
            let response = try await client.post("/api/v1/downloads", big)
            #expect(response.status == .contentTooLarge)
            #expect(try apiError(response).code == "payloadTooLarge")
        }
    }

    @Test("no token or a wrong one: 401; the sign-in URL sets an HttpOnly SameSite=Strict cookie that works")
    func authentication() async throws {
        let h = try await ServerHarness.make()
        try await h.application().test(.router) { client in
            for headers: HTTPFields in [[:], [.authorization: "Bearer wrong"], [.authorization: "Basic x"]] {
                for path in ["/api/v1/downloads", "/api/v1/stats", "/api/v1/openapi.yaml", "/metrics"] {
                    let response = try await client.execute(uri: path, method: .get, headers: headers)
                    #expect(response.status == .unauthorized, "\(path) \(headers)")
                    #expect(try apiError(response).code == "unauthorized")
                }
            }
            let wrong = try await client.execute(uri: "/?token=nope", method: .get)
            #expect(wrong.status == .seeOther && wrong.headers[.location] == "/?signin=failed")
            #expect(wrong.headers[.setCookie] == nil)
            let login = try await client.execute(uri: "/?token=\(ServerHarness.token)", method: .get)
            #expect(login.status == .seeOther && login.headers[.location] == "/")
            let cookie = try #require(login.headers[.setCookie])
            #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Path=/"))
            #expect(!cookie.contains(ServerHarness.token), "the cookie carries a value derived from the token")
            let pair = try #require(cookie.split(separator: ";").first.map(String.init))
            let withCookie = try await client.execute(uri: "/api/v1/stats", method: .get, headers: [.cookie: pair])
            #expect(withCookie.status == .ok)
            // The page's own form posts the token; a wrong one goes back to the form.
            let formHeaders: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
            let posted = try await client.execute(
                uri: "/", method: .post, headers: formHeaders, body: ByteBuffer(string: "token=\(ServerHarness.token)"))
            #expect(posted.status == .seeOther && posted.headers[.setCookie]?.contains("HttpOnly") == true)
            let refused = try await client.execute(
                uri: "/", method: .post, headers: formHeaders, body: ByteBuffer(string: "token=nope"))
            #expect(refused.headers[.location] == "/?signin=failed" && refused.headers[.setCookie] == nil)
            // The page holds no data: it is the same with and without the cookie, and shows the token field.
            let page = try await client.execute(uri: "/", method: .get, headers: [.cookie: pair])
            let anonymous = try await client.execute(uri: "/", method: .get)
            #expect(page.status == .ok && String(buffer: page.body) == String(buffer: anonymous.body))
            #expect(String(buffer: anonymous.body).contains("name=\"token\""))
        }
    }

    @Test("the page's files: content types, a strict CSP, ETag and 304, gzip when accepted")
    func webFiles() async throws {
        let h = try await ServerHarness.make()
        try await h.application().test(.router) { client in
            let types = [
                "/": "text/html", "/app.js": "text/javascript", "/app.css": "text/css", "/icon.svg": "image/svg+xml",
            ]
            for (path, type) in types {
                let response = try await client.execute(uri: path, method: .get)
                #expect(response.status == .ok, "\(path)")
                #expect(response.headers[.contentType]?.hasPrefix(type) == true, "\(path)")
                let policy = try #require(response.headers[.contentSecurityPolicy])
                #expect(policy.contains("script-src 'self'") && !policy.contains("unsafe-inline"))
                #expect(response.headers[.xContentTypeOptions] == "nosniff")
                let etag = try #require(response.headers[.eTag])
                let again = try await client.execute(uri: path, method: .get, headers: [.ifNoneMatch: etag])
                #expect(again.status == .notModified && again.body.readableBytes == 0, "\(path)")
            }
            let script = try await client.execute(uri: "/app.js", method: .get)
            let zipped = try await client.execute(uri: "/app.js", method: .get, headers: [.acceptEncoding: "gzip, br"])
            #expect(zipped.headers[.contentEncoding] == "gzip")
            #expect(zipped.body.readableBytes < script.body.readableBytes / 2)
            #expect(zipped.body.getBytes(at: 0, length: 2) == [0x1F, 0x8B], "a gzip stream")
            let refusing = try await client.execute(
                uri: "/app.js", method: .get, headers: [.acceptEncoding: "gzip;q=0, identity"])
            #expect(refusing.headers[.contentEncoding] == nil)
            // No inline script in the page: everything runs from /app.js, which the policy allows.
            let html = String(buffer: try await client.execute(uri: "/", method: .get).body)
            #expect(html.components(separatedBy: "<script").count == 2 && html.contains(#"src="/app.js""#))
        }
    }

    @Test("a POST from another site's page: 403; from the daemon's own page or without Origin: served")
    func origin() async throws {
        let h = try await ServerHarness.make()
        try await h.application().test(.router) { client in
            var foreign = authorized
            foreign[.origin] = "http://evil.example"
            let response = try await client.execute(uri: "/api/v1/pause-all", method: .post, headers: foreign)
            #expect(response.status == .forbidden)
            #expect(try apiError(response).code == "forbiddenOrigin")
            foreign[.origin] = "null"
            #expect(
                try await client.execute(uri: "/api/v1/clean", method: .post, headers: foreign).status == .forbidden)
            var own = authorized
            own[.origin] = "http://localhost"
            #expect(try await client.execute(uri: "/api/v1/pause-all", method: .post, headers: own).status == .ok)
            #expect(try await client.post("/api/v1/resume-all").status == .ok)
            var get = authorized
            get[.origin] = "http://evil.example"
            #expect(try await client.execute(uri: "/api/v1/stats", method: .get, headers: get).status == .ok)
        }
    }

    @Test("a Host that is not the daemon's (DNS rebinding): 403; loopback names and --allow-host names: served")
    func host() async throws {
        let h = try await ServerHarness.make()
        var configuration = h.configuration
        configuration.allowedHosts = ["nas.local"]
        let responder = try buildRouter(manager: h.manager, configuration: configuration).buildResponder()
        func status(_ authority: String) async throws -> HTTPResponse.Status {
            var head = HTTPRequest(method: .get, scheme: "http", authority: authority, path: "/api/v1/stats")
            head.headerFields = [.authorization: "Bearer \(ServerHarness.token)"]
            let context = HaulRequestContext(
                source: .init(channel: EmbeddedChannel(), logger: Logger(label: "test")))
            return try await responder.respond(
                to: Request(head: head, body: .init(buffer: ByteBuffer())), context: context
            )
            .status
        }
        #expect(try await status("evil.example:7165") == .forbidden)
        #expect(try await status("evil.example") == .forbidden)
        #expect(try await status("127.0.0.1.evil.example") == .forbidden)
        for allowed in ["localhost:7165", "127.0.0.1:7165", "[::1]:7165", "LOCALHOST", "nas.local:7165"] {
            #expect(try await status(allowed) == .ok, "\(allowed)")
        }
    }

    @Test("commands: pause, resume, cancel, retry, move, priority, limit, connections, delete; 404 and 409")
    func commands() async throws {
        let h = try await ServerHarness.make()
        h.server.serve("/a", .init(body: bytes))
        h.server.serve("/gone", .init(body: bytes) { _, _ in .status(404, headers: [:]) })
        try await h.application().test(.router) { client in
            let a = try await client.add(h, "/a", extra: #", "paused": true"#)
            let b = try await client.add(h, "/b", extra: #", "paused": true"#)
            let c = try await client.add(h, "/c", extra: #", "paused": true"#)
            #expect(try await client.get("/api/v1/downloads/nope").status == .notFound)
            #expect(try await client.post("/api/v1/downloads/nope/pause").status == .notFound)
            // Move c before a, then b to the top: the list order follows.
            #expect(try await client.post("/api/v1/downloads/\(c.id)/move", #"{"before": "\#(a.id)"}"#).status == .ok)
            #expect(try await client.post("/api/v1/downloads/\(b.id)/move", #"{"to": "top"}"#).status == .ok)
            let order = try body(Components.Schemas.DownloadList.self, try await client.get("/api/v1/downloads"))
            #expect(order.downloads.map(\.id) == [b.id, c.id, a.id])
            let both = try await client.post("/api/v1/downloads/\(b.id)/move", #"{"to": "top", "before": "\#(a.id)"}"#)
            #expect(both.status == .badRequest)
            let middle = try await client.post("/api/v1/downloads/\(b.id)/move", #"{"to": "middle"}"#)
            #expect(try apiError(middle).message == "to: 'middle' is not one of top, bottom")
            let unknownTarget = try await client.post("/api/v1/downloads/\(b.id)/move", #"{"before": "nope"}"#)
            #expect(unknownTarget.status == .notFound)
            #expect(try apiError(unknownTarget).message.contains("nope"))
            // PATCH: priority, a limit and then null to remove it, connections.
            let patched = try await client.execute(
                uri: "/api/v1/downloads/\(a.id)", method: .patch, headers: authorized,
                body: json(#"{"priority": "high", "limitRate": 1000, "connections": 2}"#))
            let patchedDownload = try body(Components.Schemas.Download.self, patched)
            #expect(patchedDownload.priority == .high && patchedDownload.limitRate == 1000)
            #expect(patchedDownload.options.connections == 2)
            let cleared = try await client.execute(
                uri: "/api/v1/downloads/\(a.id)", method: .patch, headers: authorized,
                body: json(#"{"limitRate": null}"#))
            let clearedDownload = try body(Components.Schemas.Download.self, cleared)
            #expect(clearedDownload.limitRate == nil && clearedDownload.priority == .high)
            let badPatch = try await client.execute(
                uri: "/api/v1/downloads/\(a.id)", method: .patch, headers: authorized,
                body: json(#"{"connections": 0}"#))
            #expect(badPatch.status == .badRequest)
            // Resume a paused one; it completes; resuming a completed one is a conflict.
            #expect(try await client.post("/api/v1/downloads/\(a.id)/resume").status == .ok)
            _ = try await h.manager.result(of: DownloadID(a.id))
            let conflict = try await client.post("/api/v1/downloads/\(a.id)/resume")
            #expect(conflict.status == .conflict)
            #expect(try apiError(conflict).code == "illegalTransition")
            #expect(try await client.post("/api/v1/downloads/\(a.id)/pause").status == .conflict)
            // Cancel a paused one; retry brings it back.
            let cancelled = try await client.post("/api/v1/downloads/\(c.id)/cancel")
            #expect(try body(Components.Schemas.Download.self, cancelled).state == .cancelled)
            #expect(try await client.post("/api/v1/downloads/\(c.id)/resume").status == .conflict)
            // A failed one: retry is allowed; pausing it is not.
            let gone = try await client.add(h, "/gone")
            _ = try? await h.manager.result(of: DownloadID(gone.id))
            let failed = try body(
                Components.Schemas.Download.self, try await client.get("/api/v1/downloads/\(gone.id)"))
            #expect(failed.state == .failed && failed.error?.httpStatus == 404 && failed.error?.code == "httpStatus")
            h.server.serve("/gone", .init(body: bytes))
            #expect(try await client.post("/api/v1/downloads/\(gone.id)/retry").status == .ok)
            _ = try await h.manager.result(of: DownloadID(gone.id))
            #expect(try await client.post("/api/v1/downloads/\(gone.id)/retry").status == .conflict)
            // Delete with the file; delete without.
            let deleted = try await client.execute(
                uri: "/api/v1/downloads/\(a.id)?deleteFile=true", method: .delete, headers: authorized)
            #expect(deleted.status == .noContent)
            #expect(!FileManager.default.fileExists(atPath: h.path("a")))
            #expect(try await client.get("/api/v1/downloads/\(a.id)").status == .notFound)
            let kept = try await client.execute(
                uri: "/api/v1/downloads/\(gone.id)", method: .delete, headers: authorized)
            #expect(kept.status == .noContent)
            #expect(FileManager.default.fileExists(atPath: h.path("gone")))
            // Clean forgets the cancelled one; b stays.
            let cleaned = try await client.post("/api/v1/clean")
            #expect(try body(Operations.Clean.Output.Ok.Body.JsonPayload.self, cleaned).removed == 1)
            let left = try body(Components.Schemas.DownloadList.self, try await client.get("/api/v1/downloads"))
            #expect(left.downloads.map(\.id) == [b.id])
        }
    }

    @Test("listing: by state, in pages that stay stable; a bad state or cursor is a 400")
    func listing() async throws {
        let h = try await ServerHarness.make()
        try await h.application().test(.router) { client in
            let items = (0..<7).map { index in
                let url = h.server.url("/\(index)")
                return #"{"url": "\#(url)", "paused": true}"#
            }
            let added = try body(
                Components.Schemas.DownloadList.self,
                try await client.post("/api/v1/downloads", "[" + items.joined(separator: ",") + "]"))
            var seen: [String] = []
            var cursor: String?
            repeat {
                let page = try body(
                    Components.Schemas.DownloadList.self,
                    try await client.get("/api/v1/downloads?limit=3" + (cursor.map { "&cursor=\($0)" } ?? "")))
                #expect(page.downloads.count <= 3)
                seen += page.downloads.map(\.id)
                cursor = page.nextCursor
            } while cursor != nil
            #expect(seen == added.downloads.map(\.id))
            let paused = try body(
                Components.Schemas.DownloadList.self, try await client.get("/api/v1/downloads?state=paused,completed"))
            #expect(paused.downloads.count == 7)
            let none = try body(
                Components.Schemas.DownloadList.self, try await client.get("/api/v1/downloads?state=queued"))
            #expect(none.downloads.isEmpty)
            #expect(try await client.get("/api/v1/downloads?state=sleeping").status == .badRequest)
            let empty = try await client.get("/api/v1/downloads?state=")
            #expect(empty.status == .badRequest, "no state is not a state")
            #expect(try apiError(empty).message.contains("is empty"), "\(String(buffer: empty.body))")
            #expect(try await client.get("/api/v1/downloads?cursor=zzz").status == .badRequest)
            #expect(try await client.get("/api/v1/downloads?limit=0").status == .badRequest)
        }
    }

    @Test(
        "wait: at once when the downloads have stopped, done false when the time is up (0 s here), when the last stops; 400, 404"
    )
    func waiting() async throws {
        let h = try await ServerHarness.make()
        h.server.serve("/stuck", .init(body: bytes) { _, _ in .stall(afterBytes: 1000) })
        try await h.application().test(.router) { client in
            func wait(_ query: String) async throws -> Components.Schemas.WaitResult {
                try body(Components.Schemas.WaitResult.self, try await client.get("/api/v1/wait" + query))
            }
            let idle = try await wait("")
            #expect(idle.done && idle.downloads.isEmpty, "no download at all")
            let paused = try await client.add(h, "/a", extra: #", "paused": true"#)
            let stuck = try await client.add(h, "/stuck")
            #expect(try await !wait("?timeout=0").done)
            #expect(try await !wait("?timeout=0&download=\(stuck.id)").done)
            let named = try await wait("?download=\(paused.id)")
            #expect(named.done && named.downloads.map(\.id) == [paused.id] && named.downloads[0].state == .paused)
            // A wait under way ends when the running download stops.
            async let both = wait("?download=\(stuck.id)&download=\(paused.id)")
            await ServerHarness.untilWaiting(h.manager, 1)
            #expect(try await client.post("/api/v1/downloads/\(stuck.id)/pause").status == .ok)
            let after = try await both
            #expect(after.done && after.downloads.map(\.id) == [stuck.id, paused.id])
            #expect(after.downloads.allSatisfy { $0.state == .paused })
            // Errors name what is wrong.
            let late = try await client.get("/api/v1/wait?timeout=61")
            #expect(late.status == .badRequest)
            #expect(try apiError(late).field == "timeout")
            let text = try await client.get("/api/v1/wait?timeout=soon")
            #expect(text.status == .badRequest)
            #expect(try apiError(text).message.contains("timeout=soon"))
            #expect(try await client.get("/api/v1/wait?download=nope").status == .notFound)
        }
    }

    @Test("stats, settings (changes apply, survive a restart, null removes the limit), the document, metrics")
    func daemon() async throws {
        let h = try await ServerHarness.make()
        h.server.serve("/a", .init(body: bytes))
        try await h.application().test(.router) { client in
            let a = try await client.add(h, "/a")
            _ = try await h.manager.result(of: DownloadID(a.id))
            let stats = try body(Components.Schemas.Stats.self, try await client.get("/api/v1/stats"))
            #expect(stats.counts.completed == 1 && stats.counts.queued == 0)
            let settings = try body(Components.Schemas.Settings.self, try await client.get("/api/v1/settings"))
            #expect(settings.maxConcurrentDownloads == 3 && settings.limitRate == nil)
            #expect(settings.downloadDir == h.downloads)
            let changed = try await client.execute(
                uri: "/api/v1/settings", method: .patch, headers: authorized,
                body: json(
                    #"{"maxConcurrentDownloads": 5, "limitRate": 2097152, "connections": 8, "maxConnectionsPerHost": 6}"#
                ))
            let now = try body(Components.Schemas.Settings.self, changed)
            #expect(now.maxConcurrentDownloads == 5 && now.limitRate == 2_097_152 && now.connections == 8)
            #expect(now.maxConnectionsPerHost == 6)
            #expect(await h.manager.currentSettings().maxConnectionsPerHost == 6)
            let cleared = try await client.execute(
                uri: "/api/v1/settings", method: .patch, headers: authorized,
                body: json(#"{"limitRate": null, "maxConnectionsPerHost": null}"#))
            let after = try body(Components.Schemas.Settings.self, cleared)
            #expect(after.limitRate == nil && after.maxConnectionsPerHost == nil)
            for bad in [
                #"{"maxConcurrentDownloads": 0}"#, #"{"connections": 17}"#, #"{"downloadDir": "/"}"#,
                #"{"maxConnectionsPerHost": 0}"#,
            ] {
                let response = try await client.execute(
                    uri: "/api/v1/settings", method: .patch, headers: authorized, body: json(bad))
                #expect(response.status == .badRequest, "\(bad)")
            }
            let document = try await client.get("/api/v1/openapi.yaml")
            #expect(document.status == .ok)
            #expect(Array(document.body.readableBytesView) == APIDocument.yaml)
            let metrics = String(buffer: try await client.get("/metrics").body)
            #expect(metrics.contains(#"haul_downloads{state="completed"} 1"#), "\(metrics)")
            #expect(metrics.contains("haul_connections_open 0"))
        }
        // A new manager on the same store keeps the settings.
        let reopened = try DownloadManager(
            configuration: {
                var configuration = DownloadManager.Configuration(stateDirectory: h.state)
                configuration.persistsSettings = true
                return configuration
            }())
        #expect(
            await reopened.currentSettings() == ManagerSettings(maxConcurrentDownloads: 5, connectionsPerDownload: 8))
        await reopened.shutdown()
    }

    @Test("the Unix socket door: no token, any folder; refused when the peer is another user")
    func socketDoor() async throws {
        let h = try await ServerHarness.make()
        h.server.serve("/a", .init(body: bytes))
        let elsewhere = h.root + "/elsewhere"
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        try await h.application(door: .socket).test(.router) { client in
            let response = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: [.contentType: "application/json"],
                body: json(#"{"url": "\#(h.server.url("/a"))", "directory": "\#(elsewhere)", "filename": ".dot"}"#))
            #expect(response.status == .created)
            let added = try body(Components.Schemas.Download.self, response)
            #expect(added.origin == .socket && added.path == elsewhere + "/.dot")
            _ = try await h.manager.result(of: DownloadID(added.id))
            #expect(FileManager.default.contents(atPath: elsewhere + "/.dot") == Data(bytes))
        }
        try await h.application(door: .socket, peerUID: getuid() &+ 1).test(.router) { client in
            let response = try await client.execute(uri: "/api/v1/stats", method: .get)
            #expect(response.status == .forbidden)
            #expect(try apiError(response).code == "forbiddenPeer")
        }
    }

    @Test("the generated types round-trip through JSON")
    func roundTrip() throws {
        let download = Components.Schemas.Download(
            id: "x", url: "http://h/a", path: "/d/a", state: .running, priority: .low, position: 2.5,
            receivedBytes: 10, totalBytes: 20, bytesPerSecond: 3, etaSeconds: 4, connections: 2,
            segments: [.init(start: 0, end: 10, offset: 5)], after: ["y"],
            error: .init(code: "httpStatus", message: "m", httpStatus: 503), resumable: true, limitRate: 7,
            createdAt: Date(timeIntervalSince1970: 1_700_000_000), origin: .socket,
            options: .init(
                connections: 4, minSplitSize: 1 << 22, headers: .init(additionalProperties: ["A": "b"]),
                timeoutSeconds: 30, retries: 5, overwrite: false, continuePartial: false))
        let decoded = try apiDecoder.decode(Components.Schemas.Download.self, from: try apiEncoder.encode(download))
        #expect(decoded == download)
        let settings = Components.Schemas.SettingsUpdate(maxConcurrentDownloads: 2, limitRate: nil, connections: 3)
        #expect(
            try apiDecoder.decode(Components.Schemas.SettingsUpdate.self, from: try apiEncoder.encode(settings))
                == settings)
    }
}
