import Foundation
import HaulTesting
import Testing

/// Reaching servers: certificates from a private CA (trusted with --cacert or SSL_CERT_FILE, refused without, never
/// retried), --insecure, and plain one-line errors for names that do not resolve and ports that refuse.
@Suite("Networks, end to end", .serialized, .timeLimit(.minutes(2)))
struct NetworkTests {
    let body = testBytes(300_000, seed: 11)

    /// nginx serving `www/file.bin` over TLS, offering HTTP/2 and HTTP/1.1, with the certificate of `makeCertificates`.
    func startTLSNginx(_ workspace: Workspace, port: Int, clientCertificates: Bool = false) throws -> ServerProcess {
        let root = workspace.root + "/www"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: root + "/file.bin", contents: Data(body))
        let http = """
            access_log \(workspace.root)/access.log;
            server {
                listen 127.0.0.1:\(port) ssl http2;
                ssl_certificate \(workspace.root)/server.pem;
                ssl_certificate_key \(workspace.root)/server.key;
                \(clientCertificates ? "ssl_verify_client on; ssl_client_certificate \(workspace.root)/ca.pem;" : "")
                root \(root);
            }
            """
        return try runNginx(in: workspace, port: port, http: http)
    }

    /// The requests nginx logged.
    func requestCount(_ workspace: Workspace) -> Int {
        let log = (try? String(contentsOfFile: workspace.root + "/access.log", encoding: .utf8)) ?? ""
        return log.split(separator: "\n").count
    }

    @Test("a certificate from a private CA: refused at once without --cacert, trusted with it or with SSL_CERT_FILE")
    func privateCA() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        try await makeCertificates(in: workspace.root)
        let port = freePort()
        let server = try startTLSNginx(workspace, port: port)
        defer { server.stop() }
        #expect(await server.ready())
        let url = "https://localhost:\(port)/file.bin"

        let refused = try await HaulProcess.run(["get", url, "-o", "a.bin"], in: workspace)
        #expect(refused.status != 0)
        let line = refused.stderr.split(separator: "\n").last.map(String.init) ?? ""
        #expect(
            line.contains("the TLS certificate of localhost:\(port) is not signed by a CA Haul trusts")
                && line.contains("--cacert"), "\(line)")
        #expect(!refused.stderr.contains("gave up after"), "a certificate is not retried: \(refused.stderr)")
        #expect(!refused.stderr.contains("NIOSSL") && !refused.stderr.contains(".swift"), "\(refused.stderr)")
        #expect(requestCount(workspace) == 0, "no request got through")

        let trusted = try await HaulProcess.run(
            ["get", url, "-o", "b.bin", "--cacert", workspace.root + "/ca.pem"], in: workspace)
        #expect(trusted.status == 0, "\(trusted.stderr)")
        #expect(workspace.holds("b.bin", body))

        let fromEnvironment = try await HaulProcess.run(
            ["get", url, "-o", "c.bin"], in: workspace, environment: ["SSL_CERT_FILE": workspace.root + "/ca.pem"])
        #expect(fromEnvironment.status == 0, "\(fromEnvironment.stderr)")
        #expect(workspace.holds("c.bin", body))

        let insecure = try await HaulProcess.run(["get", url, "-o", "d.bin", "-k"], in: workspace)
        #expect(insecure.status == 0, "\(insecure.stderr)")
        #expect(insecure.stderr.contains("warning: --insecure"))
        #expect(workspace.holds("d.bin", body))
        // nginx offers HTTP/2 (ALPN); Haul speaks HTTP/1.1 on purpose (README, "HTTP/2").
        let requests = (try? String(contentsOfFile: workspace.root + "/access.log", encoding: .utf8)) ?? ""
        #expect(requests.contains("\"GET /file.bin HTTP/1.1\" 200"), "\(requests)")
        #expect(!requests.contains("HTTP/2"))
    }

    @Test("a certificate for another name is refused, naming the host, even with its CA trusted")
    func wrongName() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        try await makeCertificates(in: workspace.root, names: "DNS:elsewhere.test")
        let port = freePort()
        let server = try startTLSNginx(workspace, port: port)
        defer { server.stop() }
        #expect(await server.ready())
        let outcome = try await HaulProcess.run(
            ["get", "https://localhost:\(port)/file.bin", "-o", "a.bin", "--cacert", workspace.root + "/ca.pem"],
            in: workspace)
        #expect(outcome.status != 0)
        #expect(
            outcome.stderr.contains("the TLS certificate of localhost:\(port) is for 'elsewhere.test', not this name"),
            "\(outcome.stderr)")
        #expect(!outcome.stderr.contains("gave up after"))
        #expect(!FileManager.default.fileExists(atPath: workspace.path("a.bin")))
    }

    @Test("a server that asks for a client certificate gets it from --cert and --key (or one file with both)")
    func clientCertificate() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        try await makeCertificates(in: workspace.root)
        try await openssl(
            [
                "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=haul client", "-keyout", "client.key", "-out",
                "client.csr",
            ], in: workspace.root)
        try await openssl(
            [
                "x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days",
                "2", "-out", "client.pem",
            ], in: workspace.root)
        let both =
            try String(contentsOfFile: workspace.root + "/client.pem", encoding: .utf8)
            + String(contentsOfFile: workspace.root + "/client.key", encoding: .utf8)
        try both.write(toFile: workspace.root + "/both.pem", atomically: true, encoding: .utf8)
        let port = freePort()
        let server = try startTLSNginx(workspace, port: port, clientCertificates: true)
        defer { server.stop() }
        #expect(await server.ready())
        let url = "https://localhost:\(port)/file.bin"
        let trust = ["--cacert", workspace.root + "/ca.pem"]

        let without = try await HaulProcess.run(["get", url, "-o", "a.bin"] + trust, in: workspace)
        #expect(without.status != 0)
        #expect(without.stderr.contains("HTTP 400"), "nginx answers 400 without a certificate: \(without.stderr)")

        let separate = try await HaulProcess.run(
            [
                "get", url, "-o", "b.bin", "--cert", workspace.root + "/client.pem", "--key",
                workspace.root + "/client.key",
            ]
                + trust, in: workspace)
        #expect(separate.status == 0, "\(separate.stderr)")
        #expect(workspace.holds("b.bin", body))

        let oneFile = try await HaulProcess.run(
            ["get", url, "-o", "c.bin", "--cert", workspace.root + "/both.pem"] + trust, in: workspace)
        #expect(oneFile.status == 0, "\(oneFile.stderr)")
        #expect(workspace.holds("c.bin", body))
    }

    @Test("an expired certificate says so, even with its CA trusted")
    func expired() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        try await makeCertificates(in: workspace.root, days: -1)
        let port = freePort()
        let server = try startTLSNginx(workspace, port: port)
        defer { server.stop() }
        #expect(await server.ready())
        let outcome = try await HaulProcess.run(
            ["get", "https://localhost:\(port)/file.bin", "-o", "a.bin", "--cacert", workspace.root + "/ca.pem"],
            in: workspace)
        #expect(outcome.status != 0)
        #expect(
            outcome.stderr.contains("the TLS certificate of localhost:\(port) expired 24 hours ago (--insecure"),
            "\(outcome.stderr)")
        #expect(requestCount(workspace) == 0)
    }

    @Test("an unknown name fails at once in curl's words; a refused port, https to plain HTTP: each names its cause")
    func plainErrors() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let missing = try await HaulProcess.run(["get", "http://nonexistent.invalid/x.bin"], in: workspace)
        #expect(missing.status != 0)
        #expect(missing.stderr.contains("could not resolve host nonexistent.invalid"), "\(missing.stderr)")
        #expect(!missing.stderr.contains("gave up after"), "an unknown name is not retried: \(missing.stderr)")
        #expect(!missing.stderr.contains("SocketAddressError") && !missing.stderr.contains("DNS error"))

        // Port 1: nothing listens there (a free port picked now could be taken by a parallel test's server).
        let port = 1
        let refused = try await HaulProcess.run(
            ["get", "http://127.0.0.1:\(port)/x.bin", "--retries", "1"], in: workspace)
        #expect(refused.status != 0)
        #expect(
            refused.stderr.contains("could not connect to 127.0.0.1:\(port): connection refused"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("errno") && !refused.stderr.contains("error set"), "\(refused.stderr)")
        // An IPv6 address is written as a URL writes it, so its port can be told from it.
        let six = try await HaulProcess.run(["get", "http://[::1]:\(port)/x.bin", "--retries", "1"], in: workspace)
        #expect(six.status != 0 && six.stderr.contains("could not connect to [::1]:\(port)"), "\(six.stderr)")

        // https:// to servers of plain HTTP: nginx answers the TLS hello with an HTTP error, which is no TLS record;
        // the fault server closes the connection. Each error says which.
        let plainPort = freePort()
        let nginx = try runNginx(
            in: workspace, port: plainPort, http: "server { listen 127.0.0.1:\(plainPort); root \(workspace.root); }")
        defer { nginx.stop() }
        #expect(await nginx.ready())
        let wrong = try await HaulProcess.run(["get", "https://127.0.0.1:\(plainPort)/x.bin"], in: workspace)
        #expect(wrong.status == 1)
        #expect(
            wrong.stderr.contains(
                "the TLS handshake with 127.0.0.1:\(plainPort) failed (wrong version number: the server does not speak TLS"
            ),
            "\(wrong.stderr)")
        let server = try await FaultServer.start()
        let plain = server.url("/x.bin").absoluteString.replacingOccurrences(of: "http://", with: "https://")
        let closed = try await HaulProcess.run(["get", plain], in: workspace)
        #expect(closed.status == 1)
        #expect(closed.stderr.contains("failed (the server closed the connection during it)"), "\(closed.stderr)")
        await server.stop()
    }

    @Test("TLS flags are checked before anything runs")
    func flagsChecked() async throws {
        let workspace = try Workspace()
        defer { workspace.remove() }
        let outcome = try await HaulProcess.run(
            ["get", "https://localhost:1/x.bin", "--cacert", workspace.root + "/none.pem"], in: workspace)
        #expect(outcome.status == 64 || outcome.status == 2, "\(outcome.status)")
        #expect(
            outcome.stderr.contains("--cacert \(workspace.root)/none.pem: no readable file there"), "\(outcome.stderr)")
    }
}
