import HaulCore
import Testing

@Suite("Checksum files beside a download (--checksum auto)")
struct ChecksumListTests {
    let a = String(repeating: "ab", count: 32)
    let b = String(repeating: "cd", count: 32)
    let long = String(repeating: "ef", count: 64)

    @Test("sha256sum's forms: two spaces, binary mode, a lone digest, ./ names, CRLF, comments")
    func gnu() {
        let text = "# made by sha256sum\r\n\(a)  ./other.iso\r\n\(b) *file.iso\r\n\n"
        #expect(ChecksumList.checksum(in: text, for: "file.iso", algorithm: .sha256, isList: true)?.hex == b)
        #expect(ChecksumList.checksum(in: text, for: "other.iso", algorithm: .sha256, isList: true)?.hex == a)
        #expect(ChecksumList.checksum(in: text, for: "missing.iso", algorithm: .sha256, isList: true) == nil)
        #expect(ChecksumList.checksum(in: "\(a)\n", for: "x", algorithm: nil, isList: false)?.hex == a)
        // A single file's sidecar of one line counts whatever name it gives (the file was renamed on the mirror).
        #expect(ChecksumList.checksum(in: "\(a)  renamed.iso", for: "x.iso", algorithm: nil, isList: false)?.hex == a)
    }

    @Test("BSD and shasum --tag: ALGO (NAME) = HEX; the algorithm from the tag, else the file's, else the length")
    func bsd() {
        let text = "SHA256 (file.iso) = \(a)\nSHA512 (file.iso) = \(long)\n"
        #expect(ChecksumList.checksum(in: text, for: "file.iso", algorithm: nil, isList: true)?.algorithm == .sha256)
        #expect(
            ChecksumList.checksum(in: text, for: "file.iso", algorithm: .sha512, isList: true)
                == (try? Checksum(parsing: "sha512=\(long)")))
        #expect(ChecksumList.entries("\(long)  f").first?.checksum.algorithm == .sha512)
        #expect(ChecksumList.entries(String(repeating: "a", count: 40)).first?.checksum.algorithm == .sha1)
        // A digest of another length than the file's algorithm is not its checksum.
        #expect(ChecksumList.entries("\(a)  f", algorithm: .sha512).isEmpty)
    }

    @Test("an escaped name (a backslash first): \\n and \\\\ inside it")
    func escaped() {
        let text = "\\\(a)  new\\nline\\\\name.iso\n"
        #expect(ChecksumList.entries(text).first?.name == "new\nline\\name.iso")
    }

    @Test("lines that are no checksum are skipped, never guessed at")
    func junk() {
        for text in [
            "", "hello", "\(a)x  file", "SHA256 (f) = zz", "SHA9 (f) = \(a)", "\(a.dropLast())  f", "(", ") = ",
        ] {
            #expect(ChecksumList.entries(text).isEmpty, "\(text)")
        }
    }

    @Test("where a file's checksum may be: its own sidecars, then its folder's lists; the query is not the file's")
    func sidecars() {
        let found = ChecksumList.sidecars(of: "https://h/pub/f.iso?sig=1").map(\.url)
        #expect(
            found == [
                "https://h/pub/f.iso.sha256", "https://h/pub/f.iso.sha512", "https://h/pub/f.iso.sha256sum",
                "https://h/pub/SHA256SUMS", "https://h/pub/SHA512SUMS",
            ])
        #expect(ChecksumList.sidecars(of: "https://h").isEmpty)
    }
}
