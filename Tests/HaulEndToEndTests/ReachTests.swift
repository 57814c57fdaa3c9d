import Foundation
import HaulTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Proxies (tinyproxy for HTTP and CONNECT, microsocks for SOCKS5), credentials (nginx's Basic auth) and cookies,
/// with the built `haul` against real servers.
@Suite("Proxies, credentials and cookies, end to end", .serialized, .timeLimit(.minutes(3)))
struct ReachTests {
    /// 6 MiB: at nginx's 2 MiB/s per connection, long enough for the ramp to open more connections.
    let body = testBytes(6 << 20, seed: 12)

    /// nginx on `port`: `/file.bin`, `/slow/file.bin` at 2 MiB/s a connection, `/private/file.bin` behind Basic auth (alice:wonder),
    /// `/c/file.bin` only with the cookie `session=ok`. The access log records the `Via` and `Authorization` a
    /// request arrived with.
    func startNginx(_ workspace: Workspace, port: Int) throws -> ServerProcess {
        let root = workspace.root + "/www"
        for folder in ["", "/slow", "/private", "/c"] {
            try FileManager.default.createDirectory(atPath: root + folder, withIntermediateDirectories: true)
            _ = FileManager.default.createFile(atPath: root + folder + "/file.bin", contents: Data(body))
        }
        try "alice:{PLAIN}wonder\n".write(toFile: workspace.root + "/htpasswd", atomically: true, encoding: .utf8)
        let http = """
            log_format reach '$request_uri $status $body_bytes_sent via="$http_via" auth="$http_authorization"';
            access_log \(workspace.root)/access.log reach;
            server {
                listen 127.0.0.1:\(port);
                root \(root);
                location /slow/ {
                    limit_rate 2m;
                }
                location /private/ {
                    auth_basic "files";
                    auth_basic_user_file \(workspace.root)/htpasswd;
                }
                location /c/ {
                    if ($cookie_session != "ok") { return 403; }
                }
            }
            """
        return try runNginx(in: workspace, port: port, http: http)
    }

    /// tinyproxy on `port`, logging each request line to `tinyproxy.log`; with `credentials` ("user pw") it asks
    /// for them.
    func startTinyproxy(_ workspace: Workspace, port: Int, credentials: String? = nil) throws -> ServerProcess {
        let tinyproxy = try #require(executable("tinyproxy"), "tinyproxy must be installed (.ci/run installs it)")
        let configuration = """
            Port \(port)
            Listen 127.0.0.1
            Timeout 60
            MaxClients 64
            LogLevel Connect
            LogFile "\(workspace.root)/tinyproxy.log"
            PidFile "\(workspace.root)/tinyproxy.pid"
            \(credentials.map { "BasicAuth \($0)" } ?? "")
            """
        try configuration.write(toFile: workspace.root + "/tinyproxy.conf", atomically: true, encoding: .utf8)
        return try ServerProcess(
            executable: tinyproxy, arguments: ["-d", "-c", workspace.root + "/tinyproxy.conf"], port: port,
            directory: workspace.root)
    }

    func log(_ workspace: Workspace, _ name: String) -> [String] {
        ((try? String(contentsOfFile: workspace.root + "/" + name, encoding: .utf8)) ?? "")
            .split(separator: "\n").map(String.init)
    }

    @Test("an HTTP proxy: plain requests, several connections with ranges, resume; no_proxy goes direct")
    func httpProxy() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let (webPort, proxyPort) = (freePort(), freePort())
        let web = try startNginx(workspace, port: webPort)
        defer { web.stop() }
        let proxy = try startTinyproxy(workspace, port: proxyPort)
        defer { proxy.stop() }
        #expect(await web.ready())
        #expect(await proxy.ready())
        let url = "http://127.0.0.1:\(webPort)/slow/file.bin"
        let environment = ["http_proxy": "http://127.0.0.1:\(proxyPort)", "no_proxy": ""]

        let several = try await HaulProcess.run(
            ["get", url, "-o", "a.bin", "-x", "4", "--min-split-size", "1M"], in: workspace, environment: environment)
        #expect(several.status == 0, "\(several.stderr)")
        #expect(workspace.holds("a.bin", body))
        let lines = log(workspace, "access.log")
        #expect(lines.count >= 2, "several connections: \(lines)")
        #expect(lines.allSatisfy { $0.contains("tinyproxy/") }, "every request through the proxy: \(lines)")
        #expect(lines.contains { $0.contains(" 206 ") }, "ranges through the proxy: \(lines)")
        #expect(
            log(workspace, "tinyproxy.log").contains { $0.contains("GET http://127.0.0.1:\(webPort)/slow/file.bin") },
            "absolute-form requests, not CONNECT")

        // Resume through the proxy: only the missing bytes travel.
        _ = FileManager.default.createFile(atPath: workspace.path("r.bin"), contents: Data(body[..<(4 << 20)]))
        let resumed = try await HaulProcess.run(
            ["get", url, "-o", "r.bin", "-c", "-x", "1"], in: workspace, environment: environment)
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(workspace.holds("r.bin", body))
        let resumeLines = log(workspace, "access.log").dropFirst(lines.count)
        let sent = resumeLines.compactMap { Int($0.split(separator: " ")[2]) }.reduce(0, +)
        #expect(sent < (2 << 20) + (512 << 10), "only the missing 2 MiB (and the overlap check): \(resumeLines)")
        #expect(resumeLines.allSatisfy { $0.contains("tinyproxy/") })

        // no_proxy: the host goes direct.
        let before = log(workspace, "access.log").count
        let direct = try await HaulProcess.run(
            ["get", url, "-o", "d.bin", "-x", "1"], in: workspace,
            environment: ["http_proxy": "http://127.0.0.1:\(proxyPort)", "no_proxy": "localhost,127.0.0.0/8"])
        #expect(direct.status == 0, "\(direct.stderr)")
        #expect(log(workspace, "access.log").dropFirst(before).allSatisfy { $0.contains("via=\"-\"") })
    }

    @Test("HTTPS through a CONNECT tunnel with proxy credentials; a proxy that wants them says so")
    func connectTunnel() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let network = NetworkTests()
        try await makeCertificates(in: workspace.root)
        let (tlsPort, proxyPort, webPort) = (freePort(), freePort(), freePort())
        let tls = try network.startTLSNginx(workspace, port: tlsPort)
        defer { tls.stop() }
        let proxy = try startTinyproxy(workspace, port: proxyPort, credentials: "carol p4ss")
        defer { proxy.stop() }
        #expect(await tls.ready())
        #expect(await proxy.ready())
        let url = "https://localhost:\(tlsPort)/file.bin"
        let trusted = ["--cacert", workspace.root + "/ca.pem"]

        let tunnelled = try await HaulProcess.run(
            ["get", url, "-o", "a.bin", "--proxy", "http://carol:p4ss@127.0.0.1:\(proxyPort)"] + trusted,
            in: workspace)
        #expect(tunnelled.status == 0, "\(tunnelled.stderr)")
        #expect(workspace.holds("a.bin", network.body))
        #expect(log(workspace, "tinyproxy.log").contains { $0.contains("CONNECT localhost:\(tlsPort)") })

        let refused = try await HaulProcess.run(
            ["get", url, "-o", "b.bin", "--proxy", "127.0.0.1:\(proxyPort)"] + trusted, in: workspace)
        #expect(refused.status != 0)
        #expect(
            refused.stderr.contains("the proxy http://127.0.0.1:\(proxyPort) asks for credentials"), "\(refused.stderr)"
        )
        #expect(!refused.stderr.contains("gave up after"), "not retried")

        // The same for a plain request (a 407 answer rather than a refused tunnel).
        let web = try startNginx(workspace, port: webPort)
        defer { web.stop() }
        #expect(await web.ready())
        let plain = try await HaulProcess.run(
            ["get", "http://127.0.0.1:\(webPort)/file.bin", "-o", "c.bin", "--proxy", "127.0.0.1:\(proxyPort)"],
            in: workspace)
        #expect(plain.status != 0)
        #expect(plain.stderr.contains("asks for credentials"), "\(plain.stderr)")

        // The proxy's password is in no file of the state folder.
        for name in (try? FileManager.default.contentsOfDirectory(atPath: workspace.state)) ?? [] {
            let bytes = FileManager.default.contents(atPath: workspace.state + "/" + name) ?? Data()
            #expect(bytes.range(of: Data("p4ss".utf8)) == nil, "\(name) holds the proxy's password")
        }
    }

    @Test("SOCKS5: the name goes to the proxy, which connects")
    func socks() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let microsocks = try #require(executable("microsocks"), "microsocks must be installed (.ci/run installs it)")
        let (webPort, proxyPort) = (freePort(), freePort())
        let web = try startNginx(workspace, port: webPort)
        defer { web.stop() }
        let proxy = try ServerProcess(
            executable: microsocks, arguments: ["-i", "127.0.0.1", "-p", "\(proxyPort)"], port: proxyPort,
            directory: workspace.root, output: workspace.root + "/socks.log")
        defer { proxy.stop() }
        #expect(await web.ready())
        #expect(await proxy.ready())
        let outcome = try await HaulProcess.run(
            [
                "get", "http://localhost:\(webPort)/file.bin", "-o", "a.bin", "--proxy",
                "socks5h://127.0.0.1:\(proxyPort)",
            ],
            in: workspace)
        #expect(outcome.status == 0, "\(outcome.stderr)")
        #expect(workspace.holds("a.bin", body))
        #expect(log(workspace, "socks.log").contains { $0.contains("connected to localhost:\(webPort)") })
    }

    @Test("Basic auth: a hint without credentials; --user, the URL's, --netrc-file; a wrong password; none stored")
    func basicAuth() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let port = freePort()
        let web = try startNginx(workspace, port: port)
        defer { web.stop() }
        #expect(await web.ready())
        let url = "http://127.0.0.1:\(port)/private/file.bin"
        let isolated = ["HOME": workspace.root]  // no ~/.netrc of the machine's

        let missing = try await HaulProcess.run(["get", url, "-o", "a.bin"], in: workspace, environment: isolated)
        #expect(missing.status != 0)
        #expect(missing.stderr.contains("HTTP 401") && missing.stderr.contains("--user"), "\(missing.stderr)")

        let user = try await HaulProcess.run(
            ["get", url, "-o", "b.bin", "-u", "alice:wonder"], in: workspace, environment: isolated)
        #expect(user.status == 0, "\(user.stderr)")
        #expect(workspace.holds("b.bin", body))

        let inURL = try await HaulProcess.run(
            ["get", "http://alice:wonder@127.0.0.1:\(port)/private/file.bin", "-o", "c.bin", "--json"], in: workspace,
            environment: isolated)
        #expect(inURL.status == 0, "\(inURL.stderr)")
        #expect(workspace.holds("c.bin", body))
        #expect(!inURL.stdout.contains("wonder"), "\(inURL.stdout)")

        try "machine 127.0.0.1 login alice password wonder\n".write(
            toFile: workspace.root + "/netrc", atomically: true, encoding: .utf8)
        let netrc = try await HaulProcess.run(
            ["get", url, "-o", "d.bin", "--netrc-file", workspace.root + "/netrc"], in: workspace, environment: isolated
        )
        #expect(netrc.status == 0, "\(netrc.stderr)")
        #expect(workspace.holds("d.bin", body))
        try "machine 127.0.0.1 login alice password wonder\n".write(
            toFile: workspace.root + "/.netrc", atomically: true, encoding: .utf8)
        let homeNetrc = try await HaulProcess.run(["get", url, "-o", "e.bin"], in: workspace, environment: isolated)
        #expect(homeNetrc.status == 0, "~/.netrc is read: \(homeNetrc.stderr)")

        let wrong = try await HaulProcess.run(
            ["get", url, "-o", "f.bin", "-u", "alice:nope", "--no-netrc"], in: workspace, environment: isolated)
        #expect(wrong.status != 0)
        #expect(wrong.stderr.contains("refused the credentials of alice"), "\(wrong.stderr)")
        #expect(!wrong.stderr.contains("nope"))
        let wrongInURL = try await HaulProcess.run(
            ["get", "http://alice:badpass@127.0.0.1:\(port)/private/file.bin", "-d", "out", "--no-netrc"],
            in: workspace, environment: isolated)
        #expect(wrongInURL.status != 0)
        #expect(
            !wrongInURL.stderr.contains("badpass") && !wrongInURL.stdout.contains("badpass"), "\(wrongInURL.stderr)")

        let listed = try await HaulProcess.run(
            ["ls", "--json", "--state-dir", workspace.state], in: workspace, environment: isolated)
        #expect(!listed.stdout.contains("wonder") && !listed.stdout.contains("nope"), "\(listed.stdout)")
        for name in (try? FileManager.default.contentsOfDirectory(atPath: workspace.state)) ?? [] {
            let bytes = FileManager.default.contents(atPath: workspace.state + "/" + name) ?? Data()
            #expect(bytes.range(of: Data("wonder".utf8)) == nil, "\(name) holds the password")
        }
    }

    @Test("through a daemon: haul add --user and haul get -b reach nginx; the password is stored nowhere")
    func throughDaemon() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let nginx = try startNginx(workspace, port: freePort())
        defer { nginx.stop() }
        #expect(await nginx.ready())
        let daemon = try await DaemonProcess(workspace)
        let state = ["--state-dir", workspace.state]
        let add = try await HaulProcess.run(
            [
                "add", "http://127.0.0.1:\(nginx.port)/private/file.bin", "-o", workspace.path("p.bin"), "--user",
                "alice:wonder", "--no-netrc",
            ] + state, in: workspace)
        #expect(add.status == 0, "\(add.stderr)")
        let id = add.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let done = try await daemon.waitUntilStopped(id)
        #expect(done["state"] as? String == "completed", "\(done)")
        #expect(workspace.holds("p.bin", body))
        let get = try await HaulProcess.run(
            ["get", "http://127.0.0.1:\(nginx.port)/c/file.bin", "-o", "c.bin", "-b", "session=ok"] + state,
            in: workspace)
        #expect(get.status == 0, "\(get.stderr)")
        #expect(workspace.holds("c.bin", body))
        let listed = try await HaulProcess.run(["ls", "--json"] + state, in: workspace)
        #expect(!listed.stdout.contains("wonder"))
        _ = await daemon.stop(SIGTERM)
        for name in try FileManager.default.subpathsOfDirectory(atPath: workspace.state) {
            let data = FileManager.default.contents(atPath: workspace.state + "/" + name) ?? Data()
            #expect(data.range(of: Data("wonder".utf8)) == nil, "\(name) holds the password")
        }
    }

    @Test("cookies: -b pairs and --load-cookies reach the server; without them it refuses")
    func cookies() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let port = freePort()
        let web = try startNginx(workspace, port: port)
        defer { web.stop() }
        #expect(await web.ready())
        let url = "http://127.0.0.1:\(port)/c/file.bin"

        let without = try await HaulProcess.run(["get", url, "-o", "a.bin"], in: workspace)
        #expect(without.status != 0 && without.stderr.contains("HTTP 403"), "\(without.stderr)")

        let pairs = try await HaulProcess.run(["get", url, "-o", "b.bin", "-b", "lang=en; session=ok"], in: workspace)
        #expect(pairs.status == 0, "\(pairs.stderr)")
        #expect(workspace.holds("b.bin", body))

        try "127.0.0.1\tFALSE\t/c\tFALSE\t0\tsession\tok\n".write(
            toFile: workspace.root + "/cookies.txt", atomically: true, encoding: .utf8)
        let file = try await HaulProcess.run(
            ["get", url, "-o", "c.bin", "--load-cookies", workspace.root + "/cookies.txt"], in: workspace)
        #expect(file.status == 0, "\(file.stderr)")
        #expect(workspace.holds("c.bin", body))

        let bad = try await HaulProcess.run(["get", url, "-o", "d.bin", "-b", "=x"], in: workspace)
        #expect(bad.status == 64 || bad.status == 2, "\(bad.stderr)")
        #expect(bad.stderr.contains("--cookie '=x' is not name=value"), "\(bad.stderr)")
    }
}
