import Foundation
import HaulCore

// The input file (`-i FILE`): either every URL read is an http or https URL with a host, trimmed, with no space or
// control character, each once, no more than there are lines; or the error names a line of the file that is not.
// Adding a comment line or a blank line changes nothing.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    let split = URLList.lines(of: input)
    let lines = split.count
    // The trim reads scalars itself; Foundation's `trimmingCharacters(in:)` is the reference.
    let white = CharacterSet.whitespaces.union(CharacterSet(charactersIn: "\r"))
    for line in split {
        expect(
            String(URLList.trim(line)) == line.trimmingCharacters(in: white), "trimmed as Foundation trims",
            input: input)
    }
    let result = Result { () throws(DownloadError) in try URLList.parse(input) }
    switch result {
    case .success(let urls):
        expect(urls.count <= lines, "no more URLs than lines", input: input)
        expect(Set(urls).count == urls.count, "each URL once", input: input)
        for url in urls {
            expect(URLList.isDownloadable(url), "a downloadable URL: \(url)", input: input)
            expect(!url.unicodeScalars.contains { $0.value <= 0x20 || $0.value == 0x7F }, "no space", input: input)
        }
    case .failure(let error):
        expect(error.code == .invalidArgument, "a usage error", input: input)
        let line = error.message.split(separator: "(line ").last.flatMap { Int($0.prefix { $0.isNumber }) }
        expect(line.map { (1...lines).contains($0) } == true, "names a line: \(error.message)", input: input)
    }
    let padded = "# a comment\n\n" + input
    let again = Result { () throws(DownloadError) in try URLList.parse(padded) }
    switch (result, again) {
    case (.success(let a), .success(let b)): expect(a == b, "comments and blank lines change nothing", input: input)
    case (.failure, .failure): break
    default: expect(false, "comments and blank lines change nothing", input: input)
    }
    return 0
}
