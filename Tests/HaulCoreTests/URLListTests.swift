import Foundation
import HaulCore
import Testing

@Suite("Input files: the URLs of -i FILE")
struct URLListTests {
    /// Foundation's trim of the same characters: what `URLList.trim` must agree with.
    static func reference(_ text: String) -> String {
        text.trimmingCharacters(in: CharacterSet.whitespaces.union(CharacterSet(charactersIn: "\r")))
    }

    static let lines: [String] = [
        "", " ", "\t\r", "http://h/a", "  http://h/a  ", "\thttp://h/a\r", "http://h/a b", " \u{A0}http://h/a\u{3000} ",
        "\u{2003}\u{2009}x\u{200A}", "\u{85}x\u{85}", "\u{2028}x", "é", " é ", "😀 ", "\r\r x \r", "\u{0B}x\u{0C}",
        "x\u{1680}", "\u{202F}\u{205F}",
    ]

    @Test("trims what Foundation's whitespaces and a carriage return are, and nothing else", arguments: lines)
    func trim(_ line: String) {
        #expect(String(URLList.trim(Substring(line))) == Self.reference(line), "\(line.unicodeScalars.map(\.value))")
    }

    @Test("one URL a line, trimmed; comments and blank lines skipped; each URL once; a bad line named")
    func parse() throws {
        let text = "# list\n\n  http://h/a \r\n\thttps://h/b\nhttp://h/a\n\u{A0}ftp://h/c\u{A0}\n"
        #expect(try URLList.parse(text) == ["http://h/a", "https://h/b", "ftp://h/c"])
        // A file written on Windows: "\r\n" is one character to Swift, and ends a line all the same.
        #expect(
            try URLList.parse("http://h/a\r\nhttp://h/b\r\n\r\n# c\r\nhttp://h/d") == [
                "http://h/a", "http://h/b", "http://h/d",
            ])
        #expect(URLList.lines(of: "a\r\nb\nc\r\n").count == 4)
        // Lines found in the bytes are the lines Swift's characters give, with text of any script around the breaks.
        for text in ["a\r\nb\nc\r\n", "é\n\u{301}x\r\n😀\t\u{301}\n", "\r\r\n\n\t", "x\ry\nz", "", "\n"] {
            let characters = text.split(omittingEmptySubsequences: false) { $0 == "\n" || $0 == "\r\n" }
            #expect(URLList.lines(of: text) == characters, "\(text.unicodeScalars.map(\.value))")
        }
        // Tabs between URLs: one file and its mirrors, each checked, the file's own URL never its own mirror.
        #expect(
            try URLList.entries("http://h/a\thttp://m/a \t http://h/a\thttp://n/a\r\nhttp://h/b\n") == [
                .init(url: "http://h/a", mirrors: ["http://m/a", "http://n/a"]), .init(url: "http://h/b"),
            ])
        // Each entry carries its URL as parsed when it was checked.
        #expect(try URLList.entries("http://h/a?q=1\n").map(\.parsedURL) == [URL(string: "http://h/a?q=1")])
        #expect(throws: DownloadError.self) { try URLList.entries("http://h/a\tnot a url\n") }
        #expect(throws: DownloadError.self) { try URLList.parse("http://h/a\nnot a url\n") }
        do {
            _ = try URLList.parse("http://h/a\n\nmailto:x@h\n")
            Issue.record("a mailto: line is refused")
        } catch {
            #expect(error.message.contains("(line 3)"), "\(error.message)")
        }
    }

    @Test("a list with several bad lines is refused naming each of them, up to twenty")
    func everyBadLine() {
        let lines = ["http://h/a", "not a url", "http://h/b", "ftp://", "http://h/c\tmailto:x@h"]
        do {
            _ = try URLList.entries(lines.joined(separator: "\n"))
            Issue.record("the list was taken")
        } catch {
            let said = error.message.split(separator: "\n").map(String.init)
            #expect(said.first == "3 lines of the list are not URLs to download; nothing was added:", "\(said)")
            #expect(said.count == 4 && said[1].contains("(line 2)") && said[2].contains("'ftp://' (line 4)"), "\(said)")
            #expect(said.last?.contains("'mailto:x@h' (line 5)") == true, "\(said)")
        }
        let many = (1...25).map { "bad url \($0)" }.joined(separator: "\n")
        do {
            _ = try URLList.entries(many)
            Issue.record("the list was taken")
        } catch {
            let said = error.message.split(separator: "\n").map(String.init)
            #expect(said.count == 22 && said.last == "  and 5 more", "\(said)")
        }
    }
}
