import Foundation

/// Reads the file name out of a `Content-Disposition` header (RFC 6266), preferring `filename*` (RFC 8187).
public enum ContentDisposition {
    /// The decoded, unsanitised file name the header proposes, or nil. Callers must pass it through
    /// `FileNameSanitizer` before using it on disk.
    public static func fileName(from header: String) -> String? {
        let parameters = parse(header)
        if let extended = parameters["filename*"], let decoded = decodeExtended(extended) {
            return decoded
        }
        if let plain = parameters["filename"] {
            // Some servers percent-encode plain filename; decode only when the result is valid UTF-8.
            return plain.contains("%") ? (plain.removingPercentEncoding ?? plain) : plain
        }
        return nil
    }

    /// Parameters of a disposition header, names lowercased; quoted strings unescaped.
    static func parse(_ header: String) -> [String: String] {
        var result: [String: String] = [:]
        var index = header.startIndex
        // Skip the disposition type.
        while index < header.endIndex, header[index] != ";" { index = header.index(after: index) }
        while index < header.endIndex {
            index = header.index(after: index)  // past ';'
            var name = ""
            while index < header.endIndex, header[index] != "=", header[index] != ";" {
                name.append(header[index])
                index = header.index(after: index)
            }
            guard index < header.endIndex, header[index] == "=" else { continue }
            index = header.index(after: index)
            while index < header.endIndex, header[index] == " " { index = header.index(after: index) }
            var value = ""
            if index < header.endIndex, header[index] == "\"" {
                index = header.index(after: index)
                while index < header.endIndex, header[index] != "\"" {
                    if header[index] == "\\" {
                        index = header.index(after: index)
                        guard index < header.endIndex else { break }
                    }
                    value.append(header[index])
                    index = header.index(after: index)
                }
                while index < header.endIndex, header[index] != ";" { index = header.index(after: index) }
            } else {
                while index < header.endIndex, header[index] != ";" {
                    value.append(header[index])
                    index = header.index(after: index)
                }
                value = value.trimmingCharacters(in: .whitespaces)
            }
            let key = name.trimmingCharacters(in: .whitespaces).lowercased()
            if !key.isEmpty, result[key] == nil { result[key] = value }
        }
        return result
    }

    /// Decodes `charset'language'percent-encoded` (RFC 8187); UTF-8 and ISO-8859-1 are supported.
    static func decodeExtended(_ value: String) -> String? {
        let parts = value.split(separator: "'", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        let charset = parts[0].lowercased()
        var bytes: [UInt8] = []
        var iterator = Array(parts[2].utf8).makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next(), let low = iterator.next(),
                    let value = UInt8(String(bytes: [high, low], encoding: .ascii) ?? "", radix: 16)
                else { return nil }
                bytes.append(value)
            } else {
                bytes.append(byte)
            }
        }
        switch charset {
        case "utf-8": return String(bytes: bytes, encoding: .utf8)
        case "iso-8859-1": return String(bytes: bytes, encoding: .isoLatin1)
        default: return nil
        }
    }
}
