import Foundation

/// Turns a name proposed by a server or a URL into one that is safe to create inside the destination folder.
public enum FileNameSanitizer {
    /// The name used when nothing usable is left.
    public static let fallbackName = "index.html"
    /// The longest name most Linux file systems accept, in UTF-8 bytes; room is kept for ` (99)` and `.part`.
    public static let maximumBytes = 200

    /// A single path component: no `/`, `\`, NUL or control characters, no leading dots or spaces, not `.` or `..`,
    /// at most `maximumBytes` UTF-8 bytes with the extension kept. Returns `fallbackName` when nothing is left.
    public static func sanitize(_ proposed: String) -> String {
        isSafeAsIs(proposed) ? proposed : sanitizeScalars(proposed)
    }

    /// Whether `proposed` is already a safe name, as most are (`f0001.bin`, `report 2024.pdf`): printable ASCII
    /// without `/` or `\`, neither starting with a dot, a dash or a space nor ending with a dot or a space, and
    /// short enough. `sanitizeScalars` returns such a name unchanged; this saves its scalar-by-scalar passes for
    /// every download.
    static func isSafeAsIs(_ proposed: String) -> Bool {
        let bytes = proposed.utf8
        guard let first = bytes.first, let last = bytes.last, bytes.count <= maximumBytes,
            first != UInt8(ascii: "."), first != UInt8(ascii: "-"), first != UInt8(ascii: " "),
            last != UInt8(ascii: "."), last != UInt8(ascii: " ")
        else { return false }
        return bytes.allSatisfy { $0 >= 0x20 && $0 <= 0x7E && $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "\\") }
    }

    /// `sanitize` the long way, scalar by scalar.
    static func sanitizeScalars(_ proposed: String) -> String {
        // Keep only the last component of anything that looks like a path, Unix or Windows. Split by scalars, not
        // characters: a separator after a prepended mark (U+0605) or before a combining one is part of a larger
        // character, and would be missed.
        let lastComponent = proposed.unicodeScalars.split(whereSeparator: { $0 == "/" || $0 == "\\" }).last ?? []
        var name = String(
            String.UnicodeScalarView(
                lastComponent.filter { scalar in
                    !(scalar.value < 0x20 || scalar.value == 0x7F || (0x80...0x9F).contains(scalar.value))
                }
            )
        )
        name = trimmed(name)
        guard !name.isEmpty else { return fallbackName }
        return truncated(name)
    }

    /// `name` without white space at either end, leading dots and dashes (a hidden file, an option to a shell
    /// command) or trailing dots, until none is left. By scalars: what makes a file hidden is its first byte, even
    /// when a combining mark makes `.` part of a larger character.
    private static func trimmed(_ name: String) -> String {
        var name = name
        while true {
            let before = name
            name = name.trimmingCharacters(in: .whitespacesAndNewlines)
            var scalars = name.unicodeScalars
            while let first = scalars.first, first == "." || first == "-" { scalars.removeFirst() }
            while scalars.last == "." { scalars.removeLast() }
            name = String(scalars)
            if name == before { return name }
        }
    }

    /// Cuts a long name to `maximumBytes`, keeping a short extension; what the cut leaves at the end of the stem (a
    /// dot, a space) goes too, so the result is as safe as the input. A stem that is one huge character (a letter with
    /// hundreds of combining marks) is cut between its scalars; one that vanishes becomes `download`.
    private static func truncated(_ name: String) -> String {
        guard name.utf8.count > maximumBytes else { return name }
        let (stem, ext) = split(name)
        let keptExtension = ext.utf8.count <= 20 ? ext : ""
        let room = maximumBytes - keptExtension.utf8.count
        var shortened = ""
        for character in stem {
            if shortened.utf8.count + character.utf8.count > room { break }
            shortened.append(character)
        }
        if shortened.isEmpty {
            var scalars = String.UnicodeScalarView()
            var used = 0
            for scalar in stem.unicodeScalars {
                used += String(scalar).utf8.count
                if used > room { break }
                scalars.append(scalar)
            }
            shortened = String(scalars)
        }
        shortened = trimmed(shortened)
        if shortened.isEmpty { shortened = "download" }
        return shortened + keptExtension
    }

    /// Splits `name.ext` into `name` and `.ext` (the extension includes its dot; empty when there is none).
    public static func split(_ name: String) -> (stem: String, extension: String) {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (name, "") }
        var stem = String(name[..<dot])
        var ext = String(name[dot...])
        // Keep double extensions such as .tar.gz together.
        if let inner = stem.lastIndex(of: "."), inner != stem.startIndex, stem[inner...] == ".tar" {
            ext = String(stem[inner...]) + ext
            stem = String(stem[..<inner])
        }
        return (stem, ext)
    }

    /// The n-th alternative for a taken name: `name (n).ext`.
    public static func alternative(_ name: String, number: Int) -> String {
        let (stem, ext) = split(name)
        return "\(stem) (\(number))\(ext)"
    }

    /// The name for a download: Content-Disposition first, then the last path segment of the final URL
    /// (percent-decoded), then `fallbackName`; always sanitised.
    public static func name(contentDisposition: String?, finalURLPath: String) -> String {
        if let header = contentDisposition, let proposed = ContentDisposition.fileName(from: header) {
            let clean = sanitize(proposed)
            if clean != fallbackName || proposed == fallbackName { return clean }
        }
        // The last segment that is not empty, without splitting the whole path.
        var path = Substring(finalURLPath)
        while path.last == "/" { path.removeLast() }
        let segment = String(path[(path.lastIndex(of: "/").map(path.index(after:)) ?? path.startIndex)...])
        // Foundation's decoding only where there is something to decode.
        let decoded = segment.utf8.contains(UInt8(ascii: "%")) ? segment.removingPercentEncoding ?? segment : segment
        return sanitize(decoded)
    }
}
