import Foundation

/// Lexical path arithmetic (no file-system calls): Foundation's `standardizingPath` also resolves symbolic links,
/// which made it a tenth of the daemon's time when adding downloads one by one.
public enum PathName {
    /// `path` with `.`, `..`, repeated and trailing slashes removed; relative paths stay relative.
    public static func normalized(_ path: String) -> String {
        if isNormalizedAbsolute(path) { return path }
        let isAbsolute = path.utf8.first == UInt8(ascii: "/")
        var parts: [Substring] = []
        for component in path.split(separator: "/", omittingEmptySubsequences: true) {
            switch component {
            case ".": continue
            case "..":
                if let last = parts.last, last != ".." {
                    parts.removeLast()
                } else if !isAbsolute {
                    parts.append(component)
                }
            default: parts.append(component)
            }
        }
        let joined = parts.joined(separator: "/")
        if isAbsolute { return "/" + joined }
        return joined.isEmpty ? "." : joined
    }

    /// Whether `path` is absolute with no empty, `.` or `..` component and no trailing slash: what `normalized`
    /// would return unchanged (the common case, checked without splitting).
    static func isNormalizedAbsolute(_ path: String) -> Bool {
        var utf8 = path.utf8.makeIterator()
        guard utf8.next() == UInt8(ascii: "/") else { return false }
        // Bytes of the current component so far, and whether it is only dots.
        var length = 0
        var dots = 0
        var sawAny = false
        while let byte = utf8.next() {
            sawAny = true
            if byte == UInt8(ascii: "/") {
                if length == 0 || (length == dots && dots <= 2) { return false }
                length = 0
                dots = 0
            } else {
                length += 1
                if byte == UInt8(ascii: ".") { dots += 1 }
            }
        }
        // "/" alone is normalised; otherwise the last component must be a real name.
        return !sawAny || (length > 0 && !(length == dots && dots <= 2))
    }

    /// `path` made absolute against `base` (the current folder when nil), `~` expanded, then normalised.
    public static func absolute(_ path: String, base: String? = nil) -> String {
        var expanded = path
        if path == "~" || path.hasPrefix("~/") {
            expanded = NSHomeDirectory() + path.dropFirst()
        }
        if expanded.utf8.first == UInt8(ascii: "/") { return normalized(expanded) }
        return normalized((base ?? FileManager.default.currentDirectoryPath) + "/" + expanded)
    }

    /// The folder of `path`, as `NSString.deletingLastPathComponent` gives it ("" for a name alone, "/" for a name
    /// in the root, trailing and repeated slashes left out), worked out on the bytes: Foundation's crashes on a
    /// one-character name ("x", "x/"), and bridges to `NSString` for every download.
    public static func folder(of path: String) -> String {
        let slash = UInt8(ascii: "/")
        if isNormalizedAbsolute(path), let last = path.utf8.lastIndex(of: slash) {
            return last == path.utf8.startIndex ? "/" : String(path[..<last])
        }
        var bytes = Array(path.utf8)
        while bytes.count > 1, bytes.last == slash { bytes.removeLast() }
        guard let last = bytes.lastIndex(of: slash) else { return "" }
        var end = last
        while end > 0, bytes[end - 1] == slash { end -= 1 }
        return end == 0 ? "/" : String(decoding: bytes[..<end], as: UTF8.self)
    }

    /// The name of `path`: `NSString.lastPathComponent`, without Foundation for a normalised absolute path.
    public static func lastComponent(of path: String) -> String {
        guard isNormalizedAbsolute(path), let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else {
            return (path as NSString).lastPathComponent
        }
        let isRoot = slash == path.utf8.index(before: path.utf8.endIndex)
        return isRoot ? "/" : String(path[path.utf8.index(after: slash)...])
    }

    /// `NSString.appendingPathComponent`: a folder and a name (no `/`, not `.` or `..`, not empty) joined without
    /// Foundation when the folder is a normalised absolute path.
    static func appending(_ name: String, to folder: String) -> String {
        guard isNormalizedAbsolute(folder), !name.isEmpty, name != ".", name != "..",
            !name.utf8.contains(UInt8(ascii: "/"))
        else { return (folder as NSString).appendingPathComponent(name) }
        return folder == "/" ? "/" + name : folder + "/" + name
    }

    /// `path` made absolute against `base`, without normalising, for joining a folder and a name.
    public static func join(_ folder: String, _ name: String) -> String {
        folder.hasSuffix("/") ? folder + name : folder + "/" + name
    }
}
