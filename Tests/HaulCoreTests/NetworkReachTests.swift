import Crypto
import Foundation
import Testing

@testable import HaulCore

@Suite("Proxies, .netrc, cookies and authentication rules")
struct NetworkReachTests {
    // MARK: proxy URLs

    @Test(
        "proxy URLs: scheme, host, port and credentials",
        arguments: [
            ("http://proxy.example:3128", ProxyEndpoint(kind: .http, host: "proxy.example", port: 3128)),
            ("proxy.example", ProxyEndpoint(kind: .http, host: "proxy.example", port: 1080)),
            ("proxy.example:8080/", ProxyEndpoint(kind: .http, host: "proxy.example", port: 8080)),
            ("HTTP://P:1", ProxyEndpoint(kind: .http, host: "P", port: 1)),
            ("socks5://127.0.0.1", ProxyEndpoint(kind: .socks5, host: "127.0.0.1", port: 1080)),
            ("socks5h://[::1]:9050", ProxyEndpoint(kind: .socks5h, host: "::1", port: 9050)),
            (
                "http://al%40ice:p%3Ass@p:3128",
                ProxyEndpoint(kind: .http, host: "p", port: 3128, user: "al@ice", password: "p:ss")
            ),
            ("http://bob@p:3128", ProxyEndpoint(kind: .http, host: "p", port: 3128, user: "bob")),
            (" http://p:3128 ", ProxyEndpoint(kind: .http, host: "p", port: 3128)),
        ])
    func proxyURL(text: String, expected: ProxyEndpoint) throws {
        #expect(try ProxyEndpoint(parsing: text) == expected)
    }

    @Test(
        "bad proxy URLs name the problem and never the password",
        arguments: [
            ("https://p:443", "HTTPS proxy"), ("socks4://p", "SOCKS4"), ("ftp://p", "scheme 'ftp'"),
            ("http://p:0", "not 1 to 65535"), ("http://p:99999", "not 1 to 65535"), ("http://p:x", "port 'x'"),
            ("http://", "names no host"), ("http://u:secret@", "names no host"), ("http://[::1", "unclosed"),
            ("socks5://u:secret@p", "no authentication"),
        ])
    func badProxyURL(text: String, fragment: String) {
        #expect {
            try ProxyEndpoint(parsing: text)
        } throws: { error in
            let message = (error as? DownloadError)?.message ?? ""
            return message.contains(fragment) && !message.contains("secret")
                && (error as? DownloadError)?.code == .invalidArgument
        }
    }

    @Test(
        "a proxy URL is stored without its credentials, and shown with them hidden",
        arguments: [
            ("http://u:p@h:1", "http://h:1", "'http://***@h:1'"), ("u:p@h:1", "h:1", "'***@h:1'"),
            ("http://h:1", "http://h:1", "'http://h:1'"), ("a:b@c://u:p@h", "h", "'***@h'"),
        ])
    func storedProxy(text: String, stored: String, shown: String) {
        #expect(ProxyEndpoint.withoutCredentials(text) == stored)
        #expect(ProxyEndpoint.redacted(text) == shown)
    }

    // MARK: which proxy

    @Test(
        "curl's precedence: --noproxy, then --proxy, then the scheme's variable, then all_proxy",
        arguments: [
            // (rules, environment, scheme, host, expected proxy host or nil)
            (ProxyRules(), ["http_proxy": "h:1"], "http", "a.example", "h"),
            (ProxyRules(), ["HTTP_PROXY": "H:1"], "http", "a.example", nil),  // upper case is ignored for http
            (ProxyRules(), ["https_proxy": "s:1", "HTTPS_PROXY": "S:1"], "https", "a.example", "s"),
            (ProxyRules(), ["HTTPS_PROXY": "S:1"], "https", "a.example", "S"),
            (ProxyRules(), ["http_proxy": "h:1"], "https", "a.example", nil),
            (ProxyRules(), ["all_proxy": "a:1", "ALL_PROXY": "A:1"], "https", "a.example", "a"),
            (ProxyRules(), ["ALL_PROXY": "A:1"], "http", "a.example", "A"),
            (ProxyRules(), ["https_proxy": "s:1", "all_proxy": "a:1"], "https", "a.example", "s"),
            (ProxyRules(), ["https_proxy": "", "all_proxy": "a:1"], "https", "a.example", "a"),
            (ProxyRules(), ["https_proxy": "s:1", "no_proxy": "example"], "https", "a.example", nil),
            (ProxyRules(), ["https_proxy": "s:1", "NO_PROXY": "a.example"], "https", "a.example", nil),
            (
                ProxyRules(), ["https_proxy": "s:1", "no_proxy": "other", "NO_PROXY": "a.example"], "https",
                "a.example", "s"
            ),
            (ProxyRules(proxy: "x:1"), ["https_proxy": "s:1"], "https", "a.example", "x"),
            (ProxyRules(proxy: ""), ["https_proxy": "s:1"], "https", "a.example", nil),
            (ProxyRules(proxy: "x:1"), ["no_proxy": "a.example"], "https", "a.example", nil),
            (ProxyRules(proxy: "x:1", noProxy: ""), ["no_proxy": "a.example"], "https", "a.example", "x"),
            (ProxyRules(noProxy: "*"), ["https_proxy": "s:1"], "https", "a.example", nil),
            (ProxyRules(), [:], "https", "a.example", nil),
        ] as [(ProxyRules, [String: String], String, String, String?)])
    func precedence(rules: ProxyRules, environment: [String: String], scheme: String, host: String, expected: String?)
        throws
    {
        #expect(try rules.proxy(scheme: scheme, host: host, environment: environment)?.host == expected)
    }

    @Test(
        "no_proxy matching: suffixes, addresses, CIDR ranges, *",
        arguments: [
            ("example.com", "example.com", true), ("example.com", "www.example.com", true),
            (".example.com", "example.com", true), (".example.com", "a.b.example.com", true),
            ("example.com", "badexample.com", false), ("example.com", "example.com.evil", false),
            ("EXAMPLE.com", "www.Example.COM.", true), ("a.com, b.com", "x.b.com", true),
            ("a.com b.com", "b.com", true), ("*", "anything", true), ("a.com,*", "b.org", true),
            ("192.168.1.5", "192.168.1.5", true), ("192.168.1.5", "192.168.1.6", false),
            ("10.0.0.0/8", "10.200.3.4", true), ("10.0.0.0/8", "11.0.0.1", false),
            ("192.168.0.0/23", "192.168.1.255", true), ("192.168.0.0/23", "192.168.2.0", false),
            ("0.0.0.0/0", "8.8.8.8", true), ("::1", "[::1]", true), ("[::1]", "::1", true),
            ("fd00::/8", "fd12:3456::1", true), ("fd00::/8", "fe80::1", false), ("10.0.0.0/8", "::ffff:1", false),
            ("localhost:80", "localhost", false), ("", "a.com", false), ("10.0.0.0/99", "10.0.0.1", false),
            ("1.com", "10.0.0.1", false), ("a\u{600},*", "b.org", true), ("a\u{600} b.com", "b.com", true),
        ])
    func noProxy(list: String, host: String, expected: Bool) {
        #expect(NoProxyList(list).matches(host: host) == expected, "\(list) vs \(host)")
    }

    // MARK: .netrc

    @Test("a .netrc with machines, default, macdef, comments and quoted tokens")
    func netrc() throws {
        let text = """
            # comment line
            machine files.example login alice password "p w\\"d"
            macdef init
            cd /pub
            machine inside.macro login mallory password no

            machine Other.Example
                login bob
                password hunter2 account acct
            machine files.example login carol password c4
            default login anonymous password me@example
            """
        let netrc = try Netrc(parsing: text)
        #expect(netrc.credentials(host: "files.example")! == ("alice", "p w\"d"))
        #expect(netrc.credentials(host: "files.example", login: "carol")! == ("carol", "c4"))
        #expect(netrc.credentials(host: "other.example")! == ("bob", "hunter2"))
        #expect(netrc.credentials(host: "inside.macro")! == ("anonymous", "me@example"))
        #expect(netrc.credentials(host: "nowhere")! == ("anonymous", "me@example"))
        #expect(try Netrc(parsing: "machine a login x").credentials(host: "b") == nil)
        #expect(try Netrc(parsing: "machine a login x").credentials(host: "a")! == ("x", nil))
    }

    @Test("a .netrc keyword without its value names the line")
    func badNetrc() {
        #expect {
            try Netrc(parsing: "machine a\n login x\n password")
        } throws: { error in
            (error as? DownloadError)?.message == ".netrc line 3: 'password' has no value"
        }
    }

    // MARK: cookies

    static let cookieFile = """
        # Netscape HTTP Cookie File
        .example.com\tTRUE\t/\tFALSE\t0\tsession\tall
        example.com\tFALSE\t/docs\tFALSE\t0\tdocs\tyes
        #HttpOnly_files.example.com\tFALSE\t/\tTRUE\t4102444800\tsecure\ts1
        example.com\tFALSE\t/\tFALSE\t946684800\told\tgone
        this line is wrong
        """

    @Test(
        "cookies go to their domain and path only, secure ones over HTTPS only, expired ones never",
        arguments: [
            ("example.com", "/", false, "session=all"),
            ("www.example.com", "/docs/a", false, "session=all"),
            ("example.com", "/docs", false, "docs=yes; session=all"),
            ("example.com", "/docs/x.bin", false, "docs=yes; session=all"),
            ("example.com", "/docsx", false, "session=all"),
            ("files.example.com", "/f", false, "session=all"),
            ("files.example.com", "/f", true, "session=all; secure=s1"),
            ("example.org", "/", true, nil),
            ("badexample.com", "/", true, nil),
        ] as [(String, String, Bool, String?)])
    func cookies(host: String, path: String, secure: Bool, expected: String?) throws {
        let file = try CookieFile(parsing: Self.cookieFile)
        #expect(file.cookies.count == 4)
        #expect(file.header(host: host, path: path, secure: secure, now: 1_800_000_000) == expected)
    }

    @Test("a cookie file with no cookie names its first bad line; --cookie data is name=value pairs")
    func badCookies() throws {
        #expect {
            try CookieFile(parsing: "# only a comment\n\nnot\ta\tcookie\n")
        } throws: { error in
            (error as? DownloadError)?.message.hasPrefix("line 3 is not a cookie") == true
        }
        #expect(try CookieFile(parsing: "# empty\n").cookies.isEmpty)
        #expect(try CookieFile.pairs(" a=1 ;b=2; ") == "a=1; b=2")
        #expect(throws: DownloadError.self) { try CookieFile.pairs("novalue") }
        #expect(throws: DownloadError.self) { try CookieFile.pairs("=x") }
        #expect(throws: DownloadError.self) { try CookieFile.pairs("a=1\r\nX: y") }
    }

    // MARK: authentication

    @Test("WWW-Authenticate: several challenges, quoted commas, token68")
    func challenges() {
        let parsed = AuthChallenge.parse([
            #"Newauth realm="apps", type=1, title="Login to \"apps\"", Basic realm="simple""#,
            #"Digest realm="a, b", qop="auth,auth-int", nonce="n1", algorithm=SHA-256"#, "Negotiate abc==",
        ])
        #expect(parsed.map(\.scheme) == ["newauth", "basic", "digest", "negotiate"])
        #expect(parsed[0].parameters == ["realm": "apps", "type": "1", "title": #"Login to "apps""#])
        #expect(parsed[2].parameters["realm"] == "a, b")
        #expect(parsed[2].parameters["qop"] == "auth,auth-int")
        #expect(HTTPAuthentication.choose(parsed) == parsed[2])
        #expect(HTTPAuthentication.choose(Array(parsed[0...1])) == parsed[1])
        #expect(HTTPAuthentication.choose([AuthChallenge(scheme: "negotiate")]) == nil)
        let intOnly = AuthChallenge.parse([#"Digest nonce="n", qop="auth-int""#])
        #expect(HTTPAuthentication.choose(intOnly) == nil)
    }

    static let hash: HTTPAuthentication.Hash = { algorithm, text in
        switch algorithm {
        case .md5: Insecure.MD5.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
        case .sha256: SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
        }
    }

    @Test("Digest answers match RFC 7616's worked examples (MD5 and SHA-256)")
    func digestRFC7616() throws {
        for (algorithm, response) in [
            ("MD5", "8ca523f5e9506fed4657c9700eebdbec"),
            ("SHA-256", "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1"),
        ] {
            let challenge = try #require(
                AuthChallenge.parse([
                    #"Digest realm="http-auth@example.org", qop="auth, auth-int", algorithm=\#(algorithm), "#
                        + #"nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", "#
                        + #"opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS""#
                ]).first)
            let header = try #require(
                HTTPAuthentication.digest(
                    challenge, credentials: Credentials(user: "Mufasa", password: "Circle of Life"), method: "GET",
                    uri: "/dir/index.html", cnonce: "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ", count: 1,
                    hash: Self.hash))
            #expect(header.contains(#"response="\#(response)""#), "\(header)")
            #expect(header.contains("nc=00000001"))
            #expect(header.contains("qop=auth,"))
            #expect(header.contains(#"opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS""#))
        }
    }

    @Test("Basic is base64 of user:password; credentials never print their password")
    func basic() {
        #expect(
            HTTPAuthentication.basic(Credentials(user: "Aladdin", password: "open sesame"))
                == "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==")
        for text in ["", "f", "fo", "foo", "foob", "fooba", "foobar"] {
            #expect(HTTPAuthentication.base64(Array(text.utf8)) == Data(text.utf8).base64EncodedString())
        }
        #expect("\(Credentials(user: "u", password: "secret"))" == "u:***")
    }
}
