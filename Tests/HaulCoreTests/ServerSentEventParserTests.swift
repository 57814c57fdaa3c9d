import HaulCore
import Testing

@Suite("The event stream's reader (text/event-stream)")
struct ServerSentEventParserTests {
    typealias Event = ServerSentEventParser.Event

    /// Every event of `text` fed whole.
    static func events(_ text: String) throws -> [Event] {
        var parser = ServerSentEventParser()
        return try parser.feed(Array(text.utf8))
    }

    static let standard: [(String, [Event])] = [
        ("data: a\n\n", [Event(data: "a")]),
        ("event: changed\ndata: {}\nid: 7\n\n", [Event(event: "changed", data: "{}", id: "7")]),
        ("data:a\ndata: b\ndata\n\n", [Event(data: "a\nb\n")]),
        ("data: x\r\n\r\ndata: y\r\rdata: z\n\n", [Event(data: "x"), Event(data: "y"), Event(data: "z")]),
        (": keep-alive\n\n", []),
        ("event: a\n\ndata: b\n\n", [Event(data: "b")]),
        ("data:  two spaces\n\n", [Event(data: " two spaces")]),
        ("id: a\u{0}b\ndata: c\n\n", [Event(data: "c")]),
        ("retry: 1500\ndata: c\n\nretry: 1.5\ndata: d\n\n", [Event(data: "c", retry: 1500), Event(data: "d")]),
        ("unknown: v\ndata: c\n\n", [Event(data: "c")]),
        ("data: unfinished\n", []),
        ("\u{FEFF}data: bom\n\n", [Event(data: "bom")]),
        ("data: \u{FEFF}kept\n\n", [Event(data: "\u{FEFF}kept")]),
    ]

    @Test("the standard's rules", arguments: standard)
    func rules(_ text: String, _ expected: [Event]) throws {
        #expect(try Self.events(text) == expected)
    }

    @Test("the standard's rules, each text split in two at every byte (a line across chunks is read in place)")
    func rulesSplit() throws {
        for (text, expected) in Self.standard {
            let bytes = Array(text.utf8)
            for split in 0...bytes.count {
                var parser = ServerSentEventParser()
                let events = try parser.feed(bytes[..<split]) + parser.feed(bytes[split...])
                #expect(events == expected, "\(text.debugDescription) split at \(split)")
            }
        }
    }

    @Test("invalid UTF-8 is replaced, not refused")
    func invalidUTF8() throws {
        var parser = ServerSentEventParser()
        let events = try parser.feed(Array("data: a".utf8) + [0xC3, 0x28] + Array("\n\n".utf8))
        #expect(events == [Event(data: "a\u{FFFD}(")])
    }

    @Test("split anywhere, even between CR and LF or inside the byte order mark, a stream reads the same")
    func splitAnywhere() throws {
        let text = "\u{FEFF}event: added\r\ndata: {\"a\":1}\r\nid: 1\r\n\r\n: comment\rdata: b\rdata: c\r\rdata: d\n\n"
        let bytes = Array(text.utf8)
        let whole = try Self.events(text)
        #expect(whole.count == 3)
        for first in 0...bytes.count {
            for second in first...min(bytes.count, first + 3) {
                var parser = ServerSentEventParser()
                var events = try parser.feed(bytes[..<first])
                events += try parser.feed(bytes[first..<second])
                events += try parser.feed(bytes[second...])
                #expect(events == whole, "split at \(first) and \(second)")
            }
        }
        var parser = ServerSentEventParser()
        var events: [Event] = []
        for byte in bytes { events += try parser.feed([byte]) }
        #expect(events == whole)
    }

    @Test("a chunk of many events is read whole: 20,000 events of 500 bytes in one 10 MB chunk")
    func largeChunk() throws {
        let one = "event: changed\ndata: " + String(repeating: "x", count: 480) + "\n\n"
        var parser = ServerSentEventParser()
        let events = try parser.feed(Array(String(repeating: one, count: 20_000).utf8))
        #expect(events.count == 20_000)
        #expect(events.allSatisfy { $0.event == "changed" && $0.data.utf8.count == 480 })
    }
}
