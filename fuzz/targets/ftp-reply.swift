import HaulCore

// An FTP server's control connection: the reply parser never crashes, holds bounded text, gives the same replies
// however the bytes are split, and every reply has a code of 100 to 599; the readers of EPSV, PASV, SIZE and MDTM
// return only values in range; a session fed the replies never sends a command with a line break in it.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = start.map { Array(UnsafeRawBufferPointer(start: $0, count: count)) } ?? []
    let input = text(start, count)
    var whole = FTPReplyParser()
    let replies = try? whole.feed(bytes)
    // The same bytes one at a time, then split in the middle: the same replies (or the same failure).
    var single = FTPReplyParser()
    var one: [FTPReply]? = []
    for byte in bytes {
        guard let got = try? single.feed([byte]) else {
            one = nil
            break
        }
        one? += got
    }
    expect(replies == one, "the same replies byte by byte", input: input)
    var halves = FTPReplyParser()
    let middle = bytes.count / 2
    let split = (try? halves.feed(bytes[..<middle])).flatMap { first in
        (try? halves.feed(bytes[middle...])).map { first + $0 }
    }
    expect(replies == split, "the same replies in two halves", input: input)
    for security in [FTPSession.Security.plain, .explicit] {
        var session = FTPSession(
            request: .init(path: "dir/f.bin", security: security, start: 100, ifRange: "\"ftp-20260101000000-1000\""),
            host: "h")
        for reply in replies ?? [] {
            expect((100...599).contains(reply.code), "a code of 100 to 599", input: input)
            expect(
                reply.lines.allSatisfy { $0.utf8.count <= FTPReplyParser.maximumLineLength }, "bounded", input: input)
            for code in [227, 229, 213] {
                let typed = FTPReply(code: code, lines: reply.lines)
                if let port = typed.extendedPassivePort {
                    expect((1...65535).contains(port), "EPSV port", input: input)
                }
                if let address = typed.passiveAddress {
                    expect((1...65535).contains(address.port), "PASV port", input: input)
                }
                if let size = typed.size { expect(size >= 0, "a size", input: input) }
                if let time = typed.modificationTime { expect(time.digits.count >= 14, "MDTM digits", input: input) }
            }
            var actions = session.received(reply)
            if actions.contains(where: { if case .connectData = $0 { true } else { false } }) {
                actions += session.dataConnected()
            }
            if actions.contains(.startTLS) { actions += session.tlsEstablished() }
            for action in actions {
                if case .send(let line) = action {
                    expect(!line.contains("\r") && !line.contains("\n"), "one command line", input: input)
                }
            }
        }
    }
    return 0
}
