import Foundation
import Haul
import HaulTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// FTP with the built `haul` against real servers: vsftpd (anonymous, throttled, FTPS explicit and implicit with a CA
/// made by the test) and pyftpdlib (credentials, a server without EPSV or REST, one session per address). Both are
/// installed by `.ci/run`; a missing one fails these tests.
@Suite("FTP, end to end", .serialized, .timeLimit(.minutes(3)))
struct FTPTests {
    let body = testBytes(6 << 20, seed: 31)

    /// vsftpd on `port` serving `workspace.root/ftp` anonymously, logging every command to `vsftpd-PORT.log`;
    /// `rate` limits each session (bytes/s); `tls` is nil, "explicit", "implicit" or "reuse" (explicit, insisting
    /// on TLS session reuse, vsftpd's default).
    func startVsftpd(_ workspace: Workspace, port: Int, rate: Int = 0, tls: String? = nil) throws -> ServerProcess {
        let vsftpd = try #require(executable("vsftpd"), "vsftpd must be installed (.ci/run installs it)")
        let tlsLines =
            tls.map {
                """
                ssl_enable=YES
                allow_anon_ssl=YES
                force_anon_logins_ssl=YES
                force_anon_data_ssl=YES
                rsa_cert_file=\(workspace.root)/server.pem
                rsa_private_key_file=\(workspace.root)/server.key
                require_ssl_reuse=\($0 == "reuse" ? "YES" : "NO")
                implicit_ssl=\($0 == "implicit" ? "YES" : "NO")
                """
            } ?? ""
        // Standalone, as the user running the tests, no chroot: vsftpd needs no privilege for this.
        let configuration = """
            listen=YES
            listen_ipv6=NO
            listen_address=127.0.0.1
            listen_port=\(port)
            background=NO
            anonymous_enable=YES
            anon_root=\(workspace.root)/ftp
            no_anon_password=YES
            local_enable=NO
            write_enable=NO
            pasv_enable=YES
            pasv_address=127.0.0.1
            seccomp_sandbox=NO
            run_as_launching_user=YES
            secure_chroot_dir=\(workspace.root)/empty
            xferlog_enable=YES
            log_ftp_protocol=YES
            vsftpd_log_file=\(workspace.root)/vsftpd-\(port).log
            anon_max_rate=\(rate)
            \(tlsLines)
            """
        try FileManager.default.createDirectory(atPath: workspace.root + "/empty", withIntermediateDirectories: true)
        let file = workspace.root + "/vsftpd-\(port).conf"
        try configuration.write(toFile: file, atomically: true, encoding: .utf8)
        return try ServerProcess(executable: vsftpd, arguments: [file], port: port, directory: workspace.root)
    }

    /// pyftpdlib on `port` serving `workspace.root/ftp`, logging each command line to `pyftpd-PORT.log` (passwords
    /// hidden). Options: `--user NAME:PASSWORD` (else anonymous), `--no-rest`, `--no-epsv` (answered 502),
    /// `--max-per-ip N`, `--rate BYTES`.
    func startPyftpd(_ workspace: Workspace, port: Int, options: [String]) throws -> ServerProcess {
        let python = "/usr/bin/python3"
        let script = workspace.root + "/pyftpd.py"
        try Self.pyftpdScript.write(toFile: script, atomically: true, encoding: .utf8)
        return try ServerProcess(
            executable: python,
            arguments: [
                script, "--port", "\(port)", "--root", workspace.root + "/ftp", "--log",
                workspace.root + "/pyftpd-\(port).log",
            ] + options, port: port, directory: workspace.root, output: workspace.root + "/pyftpd-\(port).out")
    }

    static let pyftpdScript = """
        import argparse
        from pyftpdlib.authorizers import DummyAuthorizer
        from pyftpdlib.handlers import FTPHandler, ThrottledDTPHandler
        from pyftpdlib.servers import FTPServer

        parser = argparse.ArgumentParser()
        parser.add_argument("--port", type=int, required=True)
        parser.add_argument("--root", required=True)
        parser.add_argument("--log", required=True)
        parser.add_argument("--user")
        parser.add_argument("--no-rest", action="store_true")
        parser.add_argument("--no-epsv", action="store_true")
        parser.add_argument("--max-per-ip", type=int, default=0)
        parser.add_argument("--rate", type=int, default=0)
        options = parser.parse_args()

        authorizer = DummyAuthorizer()
        if options.user:
            name, password = options.user.split(":", 1)
            authorizer.add_user(name, password, options.root, perm="elr")
        else:
            authorizer.add_anonymous(options.root)

        class Handler(FTPHandler):
            def pre_process_command(self, line, cmd, arg):
                with open(options.log, "a") as log:
                    log.write(("PASS ***" if cmd == "PASS" else line) + "\\n")
                if (cmd == "REST" and options.no_rest) or (cmd == "EPSV" and options.no_epsv):
                    self.respond("502 Command not implemented.")
                    return
                return super().pre_process_command(line, cmd, arg)

        Handler.authorizer = authorizer
        if options.rate:
            class DTP(ThrottledDTPHandler):
                read_limit = options.rate
                write_limit = options.rate
            Handler.dtp_handler = DTP
        server = FTPServer(("127.0.0.1", options.port), Handler)
        server.max_cons_per_ip = options.max_per_ip
        server.serve_forever()
        """

    func setUp() throws -> Workspace {
        let workspace = try Workspace()
        try FileManager.default.createDirectory(atPath: workspace.root + "/ftp", withIntermediateDirectories: true)
        try put(body, "f.bin", in: workspace)
        return workspace
    }

    func put(_ bytes: [UInt8], _ name: String, in workspace: Workspace, modified: Date? = nil) throws {
        let path = workspace.root + "/ftp/" + name
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        if let modified { try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: path) }
    }

    func log(_ workspace: Workspace, _ name: String) -> [String] {
        let text = (try? String(contentsOfFile: workspace.root + "/" + name, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init)
    }

    /// The commands of a vsftpd log, as sent: `"REST 1500000"` → `REST 1500000`.
    func commands(_ lines: some Sequence<String>) -> [String] {
        lines.compactMap { line in
            guard let range = line.range(of: "FTP command: Client \"127.0.0.1\", \"") else { return nil }
            return String(line[range.upperBound...].dropLast())
        }
    }

    /// Waits until the store holds a durable offset for the one download (a checkpoint landed).
    func waitForCheckpoint(_ workspace: Workspace, _ haul: HaulProcess) async throws -> Bool {
        let store = try DownloadStore(directory: workspace.state)
        return await waitUntil {
            guard haul.process.isRunning else { return false }
            return ((try? store.allRecords().first)?.durableOffset ?? 0) > 0
        }
    }

    @Test(
        "vsftpd: the file arrives identical; four sessions fetch their quarters (REST at each); a missing file says so")
    func vsftpdSegments() async throws {
        let workspace = try setUp()
        defer { workspace.remove() }
        let server = try startVsftpd(workspace, port: freePort(), rate: 2_000_000)
        defer { server.stop() }
        #expect(await server.ready())
        let url = "ftp://127.0.0.1:\(server.port)/f.bin"
        let result = try await HaulProcess.run(
            ["get", url, "-o", "f.bin", "-x", "4", "--min-split-size", "1M"], in: workspace)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(workspace.holds("f.bin", body))
        let sent = commands(log(workspace, "vsftpd-\(server.port).log"))
        #expect(sent.filter { $0.hasPrefix("RETR") }.count >= 2, "\(sent)")
        #expect(sent.contains { $0.hasPrefix("REST ") }, "\(sent)")
        #expect(sent.contains("TYPE I") && sent.contains("SIZE f.bin") && sent.contains("MDTM f.bin"))

        let missing = try await HaulProcess.run(
            ["get", "ftp://127.0.0.1:\(server.port)/dir/missing.bin", "-o", "m.bin"], in: workspace)
        #expect(missing.status == 1)
        #expect(
            missing.stderr.contains("127.0.0.1:\(server.port) has no file dir/missing.bin (550"), "\(missing.stderr)")
        #expect(!FileManager.default.fileExists(atPath: workspace.path("m.bin")))
        #expect(!missing.stderr.contains("retrying"), "a missing file is not retried")
    }

    @Test("kill -9, then a rerun: REST at the stored offset; a file changed meanwhile starts over, never mixed")
    func killAndChange() async throws {
        let workspace = try setUp()
        defer { workspace.remove() }
        let server = try startVsftpd(workspace, port: freePort(), rate: 1_000_000)
        defer { server.stop() }
        #expect(await server.ready())
        let url = "ftp://127.0.0.1:\(server.port)/f.bin"
        let logName = "vsftpd-\(server.port).log"

        let first = try HaulProcess(["get", url, "-o", "f.bin", "-x", "1"], in: workspace)
        #expect(try await waitForCheckpoint(workspace, first))
        first.signal(SIGKILL)
        _ = await first.finish()
        let held = try #require(workspace.size("f.bin.part"))
        let before = log(workspace, logName).count
        let rerun = try await HaulProcess.run(["get", url, "-o", "f.bin", "-x", "1"], in: workspace)
        #expect(rerun.status == 0, "\(rerun.stderr)")
        #expect(workspace.holds("f.bin", body))
        let resumed = commands(log(workspace, logName).dropFirst(before))
        let rest = try #require(resumed.first { $0.hasPrefix("REST ") }, "\(resumed)")
        let offset = try #require(Int64(rest.dropFirst("REST ".count)))
        #expect(offset > 0 && offset <= held, "REST \(offset), part held \(held)")

        // The same again on g.bin, which changes (new bytes, a later MDTM) while Haul is away.
        try put(body, "g.bin", in: workspace)
        let changedURL = "ftp://127.0.0.1:\(server.port)/g.bin"
        let second = try HaulProcess(["get", changedURL, "-o", "g.bin", "-x", "1"], in: workspace)
        #expect(try await waitForCheckpoint(workspace, second))
        second.signal(SIGKILL)
        _ = await second.finish()
        let newer = testBytes(5 << 20, seed: 32)
        try put(newer, "g.bin", in: workspace, modified: Date().addingTimeInterval(86_400))
        let mark = log(workspace, logName).count
        let after = try await HaulProcess.run(["get", changedURL, "-o", "g.bin", "-x", "1"], in: workspace)
        #expect(after.status == 0, "\(after.stderr)")
        #expect(workspace.holds("g.bin", newer))
        let restarted = commands(log(workspace, logName).dropFirst(mark))
        #expect(restarted.contains("RETR g.bin"))
        #expect(!restarted.contains { $0.hasPrefix("REST ") }, "the changed file is fetched from 0: \(restarted)")
    }

    @Test(
        "FTPS: explicit (AUTH TLS) and implicit with --cacert; refused without it; a server insisting on TLS reuse says so"
    )
    func ftps() async throws {
        let workspace = try setUp()
        defer { workspace.remove() }
        try await makeCertificates(in: workspace.root)
        let explicit = try startVsftpd(workspace, port: freePort(), tls: "explicit")
        defer { explicit.stop() }
        let implicit = try startVsftpd(workspace, port: freePort(), tls: "implicit")
        defer { implicit.stop() }
        let reuse = try startVsftpd(workspace, port: freePort(), tls: "reuse")
        defer { reuse.stop() }
        #expect(await explicit.ready())
        #expect(await implicit.ready())
        #expect(await reuse.ready())
        let ca = workspace.root + "/ca.pem"

        let viaAuth = try await HaulProcess.run(
            ["get", "ftpes://localhost:\(explicit.port)/f.bin", "-o", "e.bin", "--cacert", ca], in: workspace)
        #expect(viaAuth.status == 0, "\(viaAuth.stderr)")
        #expect(workspace.holds("e.bin", body))
        let sent = commands(log(workspace, "vsftpd-\(explicit.port).log"))
        #expect(Array(sent.prefix(4)) == ["AUTH TLS", "USER anonymous", "PBSZ 0", "PROT P"], "\(sent)")

        let fromStart = try await HaulProcess.run(
            ["get", "ftps://localhost:\(implicit.port)/f.bin", "-o", "i.bin", "--cacert", ca], in: workspace)
        #expect(fromStart.status == 0, "\(fromStart.stderr)")
        #expect(workspace.holds("i.bin", body))

        let untrusted = try await HaulProcess.run(
            ["get", "ftpes://localhost:\(explicit.port)/f.bin", "-o", "u.bin"], in: workspace)
        #expect(untrusted.status == 1)
        #expect(untrusted.stderr.contains("TLS certificate of localhost:\(explicit.port)"), "\(untrusted.stderr)")
        #expect(untrusted.stderr.contains("--cacert"))
        #expect(!untrusted.stderr.contains("retrying"), "a certificate is not retried")

        let plain = try await HaulProcess.run(
            ["get", "ftp://localhost:\(explicit.port)/f.bin", "-o", "p.bin"], in: workspace)
        #expect(plain.status == 1)
        #expect(plain.stderr.contains("use ftpes:// (AUTH TLS) or ftps://"), "\(plain.stderr)")

        let refused = try await HaulProcess.run(
            ["get", "ftpes://localhost:\(reuse.port)/f.bin", "-o", "r.bin", "--cacert", ca], in: workspace)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("requires TLS session reuse"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("retrying"))
    }

    @Test("pyftpdlib: credentials from --user, the URL or --netrc-file; a wrong password; PASV when EPSV is unknown")
    func credentials() async throws {
        let workspace = try setUp()
        defer { workspace.remove() }
        let server = try startPyftpd(
            workspace, port: freePort(), options: ["--user", "alice:wonder", "--no-epsv"])
        defer { server.stop() }
        #expect(await server.ready())
        let url = "ftp://127.0.0.1:\(server.port)/f.bin"

        let anonymous = try await HaulProcess.run(["get", url, "-o", "a.bin"], in: workspace)
        #expect(anonymous.status == 1)
        #expect(anonymous.stderr.contains("refused anonymous login (530"), "\(anonymous.stderr)")
        #expect(anonymous.stderr.contains("--user"))

        let wrong = try await HaulProcess.run(["get", url, "-o", "w.bin", "--user", "alice:nope"], in: workspace)
        #expect(wrong.status == 1)
        #expect(wrong.stderr.contains("refused the credentials of alice (530"), "\(wrong.stderr)")
        #expect(!wrong.stderr.contains("nope"))

        let given = try await HaulProcess.run(["get", url, "-o", "u.bin", "--user", "alice:wonder"], in: workspace)
        #expect(given.status == 0, "\(given.stderr)")
        #expect(workspace.holds("u.bin", body))

        let inURL = try await HaulProcess.run(
            ["get", "ftp://alice:wonder@127.0.0.1:\(server.port)/f.bin", "-o", "l.bin"], in: workspace)
        #expect(inURL.status == 0, "\(inURL.stderr)")
        #expect(workspace.holds("l.bin", body))
        #expect(!inURL.stderr.contains("wonder"), "the URL's password is never printed")

        let netrc = workspace.root + "/netrc"
        try "machine 127.0.0.1 login alice password wonder\n".write(toFile: netrc, atomically: true, encoding: .utf8)
        let fromNetrc = try await HaulProcess.run(["get", url, "-o", "n.bin", "--netrc-file", netrc], in: workspace)
        #expect(fromNetrc.status == 0, "\(fromNetrc.stderr)")
        #expect(workspace.holds("n.bin", body))

        let sent = log(workspace, "pyftpd-\(server.port).log")
        #expect(sent.contains("EPSV") && sent.contains("PASV"), "EPSV refused, PASV used")
        #expect(!sent.contains { $0.contains("wonder") || $0.contains("nope") }, "the log hides PASS")
        // Nothing of the credentials reaches the store.
        let state = try FileManager.default.subpathsOfDirectory(atPath: workspace.state)
        for name in state {
            let data = FileManager.default.contents(atPath: workspace.state + "/" + name) ?? Data()
            #expect(data.range(of: Data("wonder".utf8)) == nil, "\(name) holds the password")
        }
    }

    @Test("a server that refuses REST: the rerun after kill -9 takes the whole file from 0, identical")
    func restRefused() async throws {
        let workspace = try setUp()
        defer { workspace.remove() }
        let server = try startPyftpd(workspace, port: freePort(), options: ["--no-rest", "--rate", "1000000"])
        defer { server.stop() }
        #expect(await server.ready())
        let url = "ftp://127.0.0.1:\(server.port)/f.bin"
        let first = try HaulProcess(["get", url, "-o", "f.bin", "-x", "1"], in: workspace)
        #expect(try await waitForCheckpoint(workspace, first))
        first.signal(SIGKILL)
        _ = await first.finish()
        let logName = "pyftpd-\(server.port).log"
        let mark = log(workspace, logName).count
        let rerun = try await HaulProcess.run(["get", url, "-o", "f.bin", "-x", "1"], in: workspace)
        #expect(rerun.status == 0, "\(rerun.stderr)")
        #expect(workspace.holds("f.bin", body))
        let sent = Array(log(workspace, logName).dropFirst(mark))
        let rest = try #require(sent.firstIndex { $0.hasPrefix("REST ") }, "\(sent)")
        #expect(sent[rest...].contains("RETR f.bin"), "REST refused, RETR of the whole file follows")
    }

    @Test("one session per address: -x 4 finishes on what the server allows, identical")
    func oneSessionPerAddress() async throws {
        let workspace = try setUp()
        defer { workspace.remove() }
        let server = try startPyftpd(workspace, port: freePort(), options: ["--max-per-ip", "1", "--rate", "2000000"])
        defer { server.stop() }
        #expect(await server.ready())
        let result = try await HaulProcess.run(
            ["get", "ftp://127.0.0.1:\(server.port)/f.bin", "-o", "f.bin", "-x", "4", "--min-split-size", "1M"],
            in: workspace)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(workspace.holds("f.bin", body))
        let output = (try? String(contentsOfFile: workspace.root + "/pyftpd-\(server.port).out", encoding: .utf8)) ?? ""
        let refusals = output.components(separatedBy: "Too many connections").count - 1
        #expect(refusals >= 1, "the ramp tried a second session")
        #expect(refusals <= 2, "and stopped trying once refused: \(refusals)")
    }
}
