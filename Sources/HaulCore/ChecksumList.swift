/// The checksum files mirrors and release pages publish beside a file (`--checksum auto`): one file's digest
/// (`file.iso.sha256`, `file.iso.sha256sum`), or a list of them (`SHA256SUMS`, `SHA512SUMS`). Both of the forms the
/// tools write are read, line by line:
///
/// - GNU coreutils' (`sha256sum`): `HEX  NAME`, `HEX *NAME` (binary mode), a lone `HEX`; a line starting with `\`
///   has its name escaped (`\\n` for a newline in it, `\\\\` for a backslash);
/// - BSD's and `shasum --tag`'s: `SHA256 (NAME) = HEX`.
///
/// Blank lines and `#` comments are skipped, and `./` before a name is not part of it. The digest's algorithm is the
/// file's when its name says it (`.sha512`, `SHA512SUMS`), else its length's (64 hex digits are SHA-256, 128
/// SHA-512, 40 SHA-1, 32 MD5).
public enum ChecksumList {
    /// One line of a checksum file.
    public struct Entry: Equatable, Sendable {
        public var checksum: Checksum
        /// The file it is for; nil for a lone digest.
        public var name: String?
    }

    /// The entries of `text`, in order; lines that are none of the forms are skipped.
    public static func entries(_ text: String, algorithm: Checksum.Algorithm? = nil) -> [Entry] {
        var found: [Entry] = []
        for raw in text.split(omittingEmptySubsequences: true, whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            var line = Substring(raw)
            while line.last == "\r" || line.last == " " || line.last == "\t" { line.removeLast() }
            while line.first == " " || line.first == "\t" { line.removeFirst() }
            if line.isEmpty || line.first == "#" { continue }
            if let entry = bsd(line, algorithm: algorithm) ?? gnu(line, algorithm: algorithm) { found.append(entry) }
        }
        return found
    }

    /// The checksum of the file named `name` in `text`. A list (`isList`) names its files, and only the matching line
    /// counts; a single file's sidecar counts with a lone digest, with the file's name, or as its only line.
    public static func checksum(in text: String, for name: String, algorithm: Checksum.Algorithm?, isList: Bool)
        -> Checksum?
    {
        let found = entries(text, algorithm: algorithm)
        if let match = found.first(where: { $0.name.map { bare($0) == name } ?? false }) { return match.checksum }
        guard !isList else { return nil }
        if let lone = found.first(where: { $0.name == nil }) { return lone.checksum }
        return found.count == 1 ? found[0].checksum : nil
    }

    /// `NAME` without a leading `./` or `*`.
    private static func bare(_ name: String) -> String {
        var name = Substring(name)
        if name.hasPrefix("*") { name.removeFirst() }
        while name.hasPrefix("./") { name.removeFirst(2) }
        return String(name)
    }

    /// `ALGO (NAME) = HEX`.
    private static func bsd(_ line: Substring, algorithm: Checksum.Algorithm?) -> Entry? {
        guard let open = line.firstIndex(of: " "), line[line.index(after: open)...].hasPrefix("("),
            let close = line.range(of: ") = ", options: .backwards)
        else { return nil }
        let tag = line[..<open].lowercased().replacingOccurrences(of: "-", with: "")
        guard let named = Checksum.Algorithm(rawValue: tag) else { return nil }
        if let algorithm, algorithm != named { return nil }
        let nameStart = line.index(open, offsetBy: 2)
        guard nameStart <= close.lowerBound else { return nil }
        let name = String(line[nameStart..<close.lowerBound])
        guard let checksum = digest(line[close.upperBound...], algorithm: named) else { return nil }
        return Entry(checksum: checksum, name: name.isEmpty ? nil : name)
    }

    /// `HEX  NAME`, `HEX *NAME`, `\HEX  ESCAPED-NAME` or a lone `HEX`.
    private static func gnu(_ line: Substring, algorithm: Checksum.Algorithm?) -> Entry? {
        var line = line
        let escaped = line.first == "\\"
        if escaped { line.removeFirst() }
        let hex = line.prefix { $0.isHexDigit && $0.isASCII }
        guard let checksum = digest(hex, algorithm: algorithm) else { return nil }
        var rest = line[hex.endIndex...]
        if rest.isEmpty { return Entry(checksum: checksum, name: nil) }
        guard rest.first == " " || rest.first == "\t" else { return nil }
        rest.removeFirst()
        if rest.first == " " || rest.first == "*" { rest.removeFirst() }
        guard !rest.isEmpty else { return Entry(checksum: checksum, name: nil) }
        let name = escaped ? unescape(rest) : String(rest)
        return Entry(checksum: checksum, name: name)
    }

    /// A digest of `algorithm`, or of the algorithm its length implies.
    private static func digest(_ hex: Substring, algorithm: Checksum.Algorithm?) -> Checksum? {
        let implied = algorithm ?? Checksum.Algorithm.allCases.first { $0.byteCount * 2 == hex.count }
        guard let implied, hex.count == implied.byteCount * 2 else { return nil }
        return try? Checksum(parsing: "\(implied.rawValue)=\(hex)")
    }

    /// A name as `sha256sum` escapes it: `\n` and `\\`.
    private static func unescape(_ text: Substring) -> String {
        var result = ""
        var iterator = text.makeIterator()
        while let character = iterator.next() {
            guard character == "\\", let next = iterator.next() else {
                result.append(character)
                continue
            }
            result.append(next == "n" ? "\n" : next)
        }
        return result
    }

    /// Where a file's checksum may be published beside `url` (its path; a query is a signature, not the file's), in
    /// the order `--checksum auto` tries them: the file's own sidecars, then the folder's lists. Each with the
    /// algorithm its name says and whether it is a list.
    public static func sidecars(of url: String) -> [(url: String, algorithm: Checksum.Algorithm, isList: Bool)] {
        let base = String(url.prefix { $0 != "?" && $0 != "#" })
        guard let slash = base.lastIndex(of: "/"), base.distance(from: base.startIndex, to: slash) > 8 else {
            return []
        }
        let folder = base[...slash]
        return [
            (base + ".sha256", .sha256, false), (base + ".sha512", .sha512, false),
            (base + ".sha256sum", .sha256, false), (folder + "SHA256SUMS", .sha256, true),
            (folder + "SHA512SUMS", .sha512, true),
        ]
    }
}
