import Foundation
import Testing

@testable import HaulCore

@Suite("FTP replies and the FTP session machine")
struct FTPSessionTests {
    // MARK: Replies

    func parse(_ chunks: [String]) throws -> [FTPReply] {
        var parser = FTPReplyParser()
        var replies: [FTPReply] = []
        for chunk in chunks { replies += try parser.feed(Array(chunk.utf8)) }
        #expect(!parser.isMidReply)
        return replies
    }

    @Test(
        "replies: one line, several lines, bare LF, split anywhere",
        arguments: [
            (["220 (vsFTPd 3.0.3)\r\n"], [FTPReply(code: 220, lines: ["(vsFTPd 3.0.3)"])]),
            (
                ["2", "20 hi\r", "\n331 pw\n"],
                [FTPReply(code: 220, lines: ["hi"]), FTPReply(code: 331, lines: ["pw"])]
            ),
            (
                ["211-Features:\r\n EPSV\r\n211-not the end\r\n 213 nor this\r\n211 End\r\n"],
                [FTPReply(code: 211, lines: ["Features:", " EPSV", "211-not the end", " 213 nor this", "End"])]
            ),
            (["226\r\n"], [FTPReply(code: 226, lines: [""])]),
            (
                ["150-a\r\n150 b\r\n226 ok\r\n"],
                [FTPReply(code: 150, lines: ["a", "b"]), FTPReply(code: 226, lines: ["ok"])]
            ),
        ])
    func replies(chunks: [String], expected: [FTPReply]) throws {
        #expect(try parse(chunks) == expected)
    }

    @Test(
        "malformed replies are errors that say what came",
        arguments: [
            ("hello\r\n", "where a reply code was expected"), ("22 x\r\n", "where a reply code was expected"),
            ("620 x\r\n", "where a reply code was expected"), ("220x\r\n", "where a reply code was expected"),
            (String(repeating: "a", count: 9000), "longer than 8192 bytes"),
            ("211-x\r\n" + String(repeating: "y\r\n", count: 1001), "more than 1000 lines"),
        ])
    func malformed(text: String, fragment: String) {
        #expect {
            _ = try parse([text])
        } throws: { error in
            (error as? DownloadError)?.message.contains(fragment) == true
        }
    }

    @Test(
        "EPSV replies: the port between four equal delimiters",
        arguments: [
            ("Entering Extended Passive Mode (|||40039|)", 40039), ("ok (!!!1!)", 1), ("(|||65535|)", 65535),
            ("(|||0|)", nil), ("(|||65536|)", nil), ("(||40039|)", nil), ("(|1|2|3|)", nil), ("(|||x|)", nil),
            ("no parentheses |||5|", nil), ("(|||12345678|)", nil), ("(| | |1|)", nil),
        ] as [(String, Int?)])
    func extendedPassive(text: String, port: Int?) {
        #expect(FTPReply(code: 229, lines: [text]).extendedPassivePort == port)
        #expect(FTPReply(code: 200, lines: [text]).extendedPassivePort == nil)
    }

    @Test(
        "PASV replies: six numbers anywhere; only the port is used",
        arguments: [
            ("Entering Passive Mode (127,0,0,1,156,64).", "127.0.0.1", 40000),
            ("Entering Passive Mode 10,1,2,3,0,21", "10.1.2.3", 21),
            ("=192,168,0,1,4,1", "192.168.0.1", 1025),
            ("(256,0,0,1,1,1)", nil, nil), ("(1,2,3,4,5)", nil, nil), ("(1,2,3,4,0,0)", nil, nil),
            ("(1,2,3,4,5,6666)", nil, nil), ("no numbers", nil, nil),
        ] as [(String, String?, Int?)])
    func passive(text: String, host: String?, port: Int?) {
        let address = FTPReply(code: 227, lines: [text]).passiveAddress
        #expect(address?.host == host)
        #expect(address?.port == port)
    }

    @Test(
        "SIZE and MDTM values",
        arguments: [
            ("3000000", 3_000_000, nil), ("0", 0, nil), ("-1", nil, nil), ("12a", nil, nil), ("", nil, nil),
            ("20261123054914", 20_261_123_054_914, 1_795_412_954), ("20261123054914.123", nil, 1_795_412_954),
            ("20261323054914", 20_261_323_054_914, nil), ("2026112305491", 2_026_112_305_491, nil),
            ("20261123054914.", nil, nil),
        ] as [(String, Int64?, Int64?)])
    func values(text: String, size: Int64?, seconds: Int64?) {
        let reply = FTPReply(code: 213, lines: [text])
        #expect(reply.size == size)
        #expect(reply.modificationTime?.seconds == seconds)
        if seconds != nil { #expect(reply.modificationTime?.digits == text) }
        #expect(FTPReply(code: 550, lines: [text]).size == nil)
    }

    // MARK: Requests

    @Test(
        "URLs become paths relative to the login directory; a line break never reaches the server",
        arguments: [
            ("ftp://h/f.bin", "f.bin", FTPSession.Security.plain), ("ftp://h/dir/a%20b.iso", "dir/a b.iso", .plain),
            ("ftp://h/%2Fsrv/f", "/srv/f", .plain), ("ftpes://h/f;type=i", "f", .explicit),
            ("ftps://h:990/f", "f", .implicit),
        ])
    func paths(url: String, path: String, security: FTPSession.Security) throws {
        let request = try FTPSession.Request(
            url: URL(string: url)!, range: nil, ifRange: nil, user: nil, password: nil)
        #expect(request.path == path)
        #expect(request.security == security)
        #expect(request.user == "anonymous")
        #expect(request.password == "haul@")
    }

    @Test(
        "URLs that cannot be fetched over FTP",
        arguments: [
            ("ftp://h/", "names no file"), ("ftp://h", "names no file"), ("ftp://h/dir/", "names no file"),
            ("ftp://h/a%0D%0ADELE%20b", "line break"), ("ftp://h/a%00b", "line break"), ("http://h/f", "not an FTP"),
        ])
    func badURLs(url: String, fragment: String) {
        #expect {
            _ = try FTPSession.Request(url: URL(string: url)!, range: nil, ifRange: nil, user: nil, password: nil)
        } throws: { error in
            (error as? DownloadError)?.message.contains(fragment) == true
        }
    }

    @Test("a password with a line break is refused; ranges read as the engine writes them")
    func loginAndRanges() {
        #expect(throws: DownloadError.self) {
            _ = try FTPSession.Request(
                url: URL(string: "ftp://h/f")!, range: nil, ifRange: nil, user: "u", password: "a\r\nDELE f")
        }
        #expect(FTPSession.Request.byteRange("bytes=100-") ?? (0, 0) == (100, nil))
        #expect(FTPSession.Request.byteRange("bytes=0-99") ?? (1, 1) == (0, 99))
        for bad in ["bytes=5-1", "bytes=-5", "bytes=1-2,4-5", "items=1-", "bytes=x-"] {
            #expect(FTPSession.Request.byteRange(bad) == nil, "\(bad)")
        }
    }

    // MARK: The session

    /// Feeds `replies` in order and returns every action, the sends as their command lines.
    func run(_ session: inout FTPSession, _ replies: [(Int, String)]) -> [FTPSession.Action] {
        var actions: [FTPSession.Action] = []
        for (code, text) in replies { actions += session.received(FTPReply(code: code, lines: [text])) }
        return actions
    }

    func sends(_ actions: [FTPSession.Action]) -> [String] {
        actions.compactMap { if case .send(let line) = $0 { line } else { nil } }
    }

    @Test("anonymous, the whole file: login, binary, SIZE, MDTM, EPSV, RETR; answered as a 200 with a strong ETag")
    func wholeFile() {
        var session = FTPSession(request: .init(path: "f.bin"), host: "h:21")
        var actions = run(
            &session,
            [
                (220, "hi"), (230, "in"), (200, "binary"), (213, "3000000"), (213, "20261123054914"),
                (229, "(|||40039|)"),
            ])
        #expect(
            sends(actions) == ["USER anonymous", "TYPE I", "SIZE f.bin", "MDTM f.bin", "EPSV"])
        #expect(actions.last == .connectData(port: 40039))
        actions = session.dataConnected()
        #expect(actions == [.send("RETR f.bin")])
        actions = run(&session, [(150, "Opening BINARY mode")])
        let head = ResponseHead(
            status: 200,
            headers: [
                ("ETag", "\"ftp-20261123054914-3000000\""), ("Accept-Ranges", "bytes"), ("Content-Length", "3000000"),
            ])
        #expect(actions == [.respond(head, limit: nil)])
        #expect(head.validators.isStrong)
        #expect(head.validators.ifRangeValue == "\"ftp-20261123054914-3000000\"")
        #expect(run(&session, [(226, "Transfer complete")]) == [.transferConfirmed])
    }

    @Test("a password when asked; a refused login says whose, and how to give credentials")
    func login() {
        var session = FTPSession(request: .init(path: "f", user: "alice", password: "wonder"), host: "h")
        #expect(sends(run(&session, [(220, ""), (331, "pw?")])) == ["USER alice", "PASS wonder"])
        let refused = run(&session, [(530, "Login incorrect.")])
        guard case .fail(let error) = refused.first else { return #expect(Bool(false)) }
        #expect(error.message == "h refused the credentials of alice (530 Login incorrect.)")
        #expect(error.status == 401 && !error.isRetryable)

        var anonymous = FTPSession(request: .init(path: "f"), host: "h")
        guard case .fail(let denied) = run(&anonymous, [(220, ""), (530, "Anonymous access not allowed.")]).last else {
            return #expect(Bool(false))
        }
        #expect(denied.message.hasPrefix("h refused anonymous login (530 Anonymous access not allowed.); give"))

        var plain = FTPSession(request: .init(path: "f"), host: "h")
        guard
            case .fail(let wantsTLS) = run(&plain, [(220, ""), (530, "Anonymous sessions must use encryption.")]).last
        else { return #expect(Bool(false)) }
        #expect(wantsTLS.message.hasSuffix("it wants TLS: use ftpes:// (AUTH TLS) or ftps://"))
    }

    @Test("a resume of the same file: REST at the offset, answered as a 206 from there")
    func resume() {
        var session = FTPSession(
            request: .init(path: "f", start: 1000, ifRange: "\"ftp-20261123054914-3000\""), host: "h")
        let actions = run(
            &session,
            [
                (220, ""), (230, ""), (200, ""), (213, "3000"), (213, "20261123054914"), (350, "Restarting at 1000"),
                (229, "(|||5000|)"),
            ])
        #expect(sends(actions).suffix(2) == ["REST 1000", "EPSV"])
        #expect(session.dataConnected() == [.send("RETR f")])
        guard case .respond(let head, let limit) = run(&session, [(150, "")]).first else {
            return #expect(Bool(false))
        }
        #expect(head.status == 206)
        #expect(head.value("Content-Range") == "bytes 1000-2999/3000")
        #expect(head.value("Content-Length") == "2000")
        #expect(limit == 2000)
    }

    @Test(
        "the file changed, or REST is refused: no offset, the whole file as a 200, as HTTP's failed If-Range",
        arguments: [
            ("\"ftp-20261123054914-3000\"", "20261124000000", 350),  // MDTM changed
            ("\"ftp-20261123054914-2999\"", "20261123054914", 350),  // size changed
            ("\"ftp-20261123054914-3000\"", "20261123054914", 502),  // REST not implemented
        ])
    func restartFromZero(ifRange: String, modified: String, restReply: Int) {
        var session = FTPSession(request: .init(path: "f", start: 1000, ifRange: ifRange), host: "h")
        // A changed file sends no REST; an unchanged one does, and the server refuses it.
        let changed = restReply == 350
        let actions = run(
            &session,
            [(220, ""), (230, ""), (200, ""), (213, "3000"), (213, modified)] + (changed ? [] : [(restReply, "")])
                + [(229, "(|||5|)")])
        #expect(sends(actions).contains("REST 1000") == !changed)
        _ = session.dataConnected()
        guard case .respond(let head, let limit) = run(&session, [(150, "")]).first else {
            return #expect(Bool(false))
        }
        #expect(head.status == 200)
        #expect(head.value("Content-Length") == "3000")
        #expect(head.value("Content-Range") == nil)
        #expect(limit == nil)
    }

    @Test("one segment: REST at its start, the data connection cut after its last byte")
    func segment() {
        var session = FTPSession(request: .init(path: "f", start: 1000, end: 1999), host: "h")
        _ = run(&session, [(220, ""), (230, ""), (200, ""), (213, "3000"), (213, "20261123054914"), (350, "")])
        _ = run(&session, [(229, "(|||5|)")])
        _ = session.dataConnected()
        #expect(
            run(&session, [(125, "")])
                == [
                    .respond(
                        ResponseHead(
                            status: 206,
                            headers: [
                                ("ETag", "\"ftp-20261123054914-3000\""), ("Accept-Ranges", "bytes"),
                                ("Content-Range", "bytes 1000-1999/3000"), ("Content-Length", "1000"),
                            ]), limit: 1000)
                ])
        var first = FTPSession(request: .init(path: "f", start: 0, end: 999), host: "h")
        let actions = run(&first, [(220, ""), (230, ""), (200, ""), (213, "3000"), (550, "no MDTM"), (229, "(|||5|)")])
        #expect(!sends(actions).contains { $0.hasPrefix("REST") })
        _ = first.dataConnected()
        guard case .respond(let head, let limit) = run(&first, [(150, "")]).first else { return #expect(Bool(false)) }
        #expect(head.value("Content-Range") == "bytes 0-999/3000")
        #expect(head.value("ETag") == nil, "without MDTM, no validator")
        #expect(limit == 1000)
    }

    @Test("a range at the end of the file: a 416 with the size, no transfer")
    func pastTheEnd() {
        var session = FTPSession(
            request: .init(path: "f", start: 3000, ifRange: "\"ftp-20261123054914-3000\""), host: "h")
        let actions = run(&session, [(220, ""), (230, ""), (200, ""), (213, "3000"), (213, "20261123054914")])
        #expect(
            actions.last
                == .respondWithoutBody(
                    ResponseHead(
                        status: 416,
                        headers: [("Content-Range", "bytes */3000"), ("ETag", "\"ftp-20261123054914-3000\"")])))
    }

    @Test("EPSV unknown: PASV, and only its port is used")
    func passiveFallback() {
        var session = FTPSession(request: .init(path: "f"), host: "h")
        let actions = run(
            &session,
            [
                (220, ""), (230, ""), (200, ""), (213, "1"), (213, "20261123054914"), (500, "EPSV?"),
                (227, "Entering Passive Mode (10,9,8,7,156,64)"),
            ])
        #expect(sends(actions).suffix(2) == ["EPSV", "PASV"])
        #expect(actions.last == .connectData(port: 40000))
    }

    @Test("explicit FTPS: AUTH TLS before the login, PBSZ 0 and PROT P after it; a server without TLS is refused")
    func explicitTLS() {
        var session = FTPSession(request: .init(path: "f", security: .explicit), host: "h")
        #expect(run(&session, [(220, "")]) == [.send("AUTH TLS")])
        #expect(run(&session, [(234, "Proceed")]) == [.startTLS])
        #expect(session.tlsEstablished() == [.send("USER anonymous")])
        #expect(sends(run(&session, [(230, ""), (200, ""), (200, "")])) == ["PBSZ 0", "PROT P", "TYPE I"])

        var refused = FTPSession(request: .init(path: "f", security: .explicit), host: "h")
        guard case .fail(let error) = run(&refused, [(220, ""), (500, "AUTH not understood")]).last else {
            return #expect(Bool(false))
        }
        #expect(error.code == .tls && !error.isRetryable)
        #expect(error.message.contains("does not offer TLS"))

        var implicit = FTPSession(request: .init(path: "f", security: .implicit), host: "h")
        #expect(sends(run(&implicit, [(220, ""), (230, "")])) == ["USER anonymous", "PBSZ 0"])
    }

    @Test(
        "failures: 421 is a refused session, 550 a missing file, 4xx transient, 5xx final, 522 a TLS refusal",
        arguments: [
            ([(421, "Too many connections")], DownloadError.Code.connectionFailed, true, "refused the session"),
            (
                [(220, ""), (230, ""), (200, ""), (213, "1"), (213, "x"), (229, "(|||5|)"), (550, "No such file")],
                .httpStatus, false, "has no file f (550 No such file)"
            ),
            ([(220, ""), (230, ""), (451, "local error")], .connectionLost, true, "451 local error after TYPE I"),
            ([(220, ""), (230, ""), (504, "no")], .invalidResponse, false, "504 no after TYPE I"),
            (
                [
                    (220, ""), (230, ""), (200, ""), (213, "1"), (213, "x"), (229, "(|||5|)"), (150, ""),
                    (426, "aborted"),
                ],
                .connectionLost, true, "ended the transfer with 426 aborted"
            ),
            (
                [
                    (220, ""), (230, ""), (200, ""), (213, "1"), (213, "x"), (229, "(|||5|)"), (150, ""),
                    (522, "SSL connection failed: session reuse required"),
                ],
                .tls, false, "requires TLS session reuse"
            ),
        ] as [([(Int, String)], DownloadError.Code, Bool, String)])
    func failures(replies: [(Int, String)], code: DownloadError.Code, retryable: Bool, fragment: String) {
        var session = FTPSession(request: .init(path: "f"), host: "h")
        var actions: [FTPSession.Action] = []
        for (index, (reply, text)) in replies.enumerated() {
            actions += session.received(FTPReply(code: reply, lines: [text]))
            if reply == 229, index < replies.count - 1 { actions += session.dataConnected() }
        }
        guard case .fail(let error) = actions.last else { return #expect(Bool(false), "\(actions)") }
        #expect(error.code == code)
        #expect(error.isRetryable == retryable)
        #expect(error.message.contains(fragment), "\(error.message)")
    }
}
