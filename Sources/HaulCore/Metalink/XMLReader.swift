/// A small XML reader for Metalink documents: elements with their attributes and text, namespaces dropped to the
/// local name. It takes what Metalink files hold (the declaration, comments, CDATA, character and the five named
/// entities) and refuses a DOCTYPE (no entity can expand into megabytes), a mismatched or unclosed element, and nesting
/// deeper than 64; it never reads outside the text it is given.
public struct XMLElement: Sendable, Equatable {
    public var name: String
    public var attributes: [String: String]
    public var children: [XMLElement]
    /// The text directly inside the element, entities decoded.
    public var text: String

    /// The children named `name`.
    public func all(_ name: String) -> [XMLElement] { children.filter { $0.name == name } }

    /// The first child named `name`.
    public func first(_ name: String) -> XMLElement? { children.first { $0.name == name } }

    /// Parses `text` into its root element.
    public static func parse(_ text: String) throws(DownloadError) -> XMLElement {
        var reader = Reader(Array(text.utf8))
        return try reader.document()
    }

    struct Reader {
        let bytes: [UInt8]
        var index = 0

        init(_ bytes: [UInt8]) { self.bytes = bytes }

        func failure(_ problem: String) -> DownloadError {
            DownloadError(.invalidResponse, "the document is not well-formed XML: \(problem) (byte \(index))")
        }

        func starts(with prefix: String) -> Bool {
            let prefix = Array(prefix.utf8)
            return bytes.count - index >= prefix.count && Array(bytes[index..<index + prefix.count]) == prefix
        }

        mutating func skip(past end: String) throws(DownloadError) {
            while index < bytes.count {
                if starts(with: end) {
                    index += end.utf8.count
                    return
                }
                index += 1
            }
            throw failure("'\(end)' is missing")
        }

        mutating func skipBlanks() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        /// Skips the declaration, comments and processing instructions before or after the root.
        mutating func skipMisc() throws(DownloadError) {
            while true {
                skipBlanks()
                if starts(with: "<?") {
                    try skip(past: "?>")
                } else if starts(with: "<!--") {
                    try skip(past: "-->")
                } else if starts(with: "<!") {
                    throw failure("a DOCTYPE is not taken")
                } else {
                    return
                }
            }
        }

        mutating func document() throws(DownloadError) -> XMLElement {
            if starts(with: "\u{FEFF}") { index += 3 }
            try skipMisc()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "<") else { throw failure("no root element") }
            let root = try element(depth: 0)
            try skipMisc()
            guard index == bytes.count else { throw failure("text after the root element") }
            return root
        }

        static func isNameByte(_ byte: UInt8) -> Bool {
            byte >= 0x80 || (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A)
                || (byte >= 0x61 && byte <= 0x7A) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: ":")
        }

        mutating func name() throws(DownloadError) -> String {
            let start = index
            while index < bytes.count, Self.isNameByte(bytes[index]) { index += 1 }
            guard index > start else { throw failure("a name is missing") }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }

        /// The local part of a qualified name (`m:file` is `file`).
        static func local(_ name: String) -> String {
            name.split(separator: ":").last.map(String.init) ?? name
        }

        mutating func element(depth: Int) throws(DownloadError) -> XMLElement {
            guard depth < 64 else { throw failure("elements nested deeper than 64") }
            index += 1  // <
            let qualified = try name()
            var element = XMLElement(name: Self.local(qualified), attributes: [:], children: [], text: "")
            while true {
                skipBlanks()
                guard index < bytes.count else { throw failure("<\(qualified)> is not closed") }
                if starts(with: "/>") {
                    index += 2
                    return element
                }
                if bytes[index] == UInt8(ascii: ">") {
                    index += 1
                    break
                }
                let attribute = try name()
                skipBlanks()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "=") else {
                    throw failure("attribute \(attribute) has no value")
                }
                index += 1
                skipBlanks()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") || bytes[index] == UInt8(ascii: "'")
                else { throw failure("attribute \(attribute) is not quoted") }
                let quote = bytes[index]
                index += 1
                let start = index
                while index < bytes.count, bytes[index] != quote { index += 1 }
                guard index < bytes.count else { throw failure("attribute \(attribute) is not closed") }
                element.attributes[Self.local(attribute)] = try decode(bytes[start..<index])
                index += 1
            }
            var text: [UInt8] = []
            while true {
                guard index < bytes.count else { throw failure("<\(qualified)> is not closed") }
                if starts(with: "</") {
                    index += 2
                    let closing = try name()
                    skipBlanks()
                    guard closing == qualified, index < bytes.count, bytes[index] == UInt8(ascii: ">") else {
                        throw failure("<\(qualified)> is closed by </\(closing)>")
                    }
                    index += 1
                    element.text = try decode(text[...])
                    return element
                } else if starts(with: "<!--") {
                    try skip(past: "-->")
                } else if starts(with: "<![CDATA[") {
                    index += 9
                    let start = index
                    try skip(past: "]]>")
                    // CDATA is text as it stands: escaped so that decoding gives it back.
                    for byte in bytes[start..<index - 3] {
                        if byte == UInt8(ascii: "&") {
                            text.append(contentsOf: "&amp;".utf8)
                        } else {
                            text.append(byte)
                        }
                    }
                } else if starts(with: "<?") {
                    try skip(past: "?>")
                } else if bytes[index] == UInt8(ascii: "<") {
                    element.children.append(try self.element(depth: depth + 1))
                } else {
                    text.append(bytes[index])
                    index += 1
                }
            }
        }

        /// Text with its entities decoded.
        func decode(_ raw: ArraySlice<UInt8>) throws(DownloadError) -> String {
            guard raw.contains(UInt8(ascii: "&")) else { return String(decoding: raw, as: UTF8.self) }
            var out: [UInt8] = []
            var position = raw.startIndex
            while position < raw.endIndex {
                let byte = raw[position]
                guard byte == UInt8(ascii: "&") else {
                    out.append(byte)
                    position += 1
                    continue
                }
                guard let end = raw[position...].firstIndex(of: UInt8(ascii: ";")), end - position <= 12 else {
                    throw failure("an '&' that starts no entity")
                }
                let entity = String(decoding: raw[(position + 1)..<end], as: UTF8.self)
                switch entity {
                case "amp": out.append(UInt8(ascii: "&"))
                case "lt": out.append(UInt8(ascii: "<"))
                case "gt": out.append(UInt8(ascii: ">"))
                case "quot": out.append(UInt8(ascii: "\""))
                case "apos": out.append(UInt8(ascii: "'"))
                default:
                    let number: UInt32? =
                        entity.hasPrefix("#x")
                        ? UInt32(entity.dropFirst(2), radix: 16)
                        : entity.hasPrefix("#") ? UInt32(entity.dropFirst()) : nil
                    guard let number, number > 0, let scalar = Unicode.Scalar(number) else {
                        throw failure("the entity &\(entity); is not one XML defines")
                    }
                    out.append(contentsOf: String(Character(scalar)).utf8)
                }
                position = end + 1
            }
            return String(decoding: out, as: UTF8.self)
        }
    }
}
