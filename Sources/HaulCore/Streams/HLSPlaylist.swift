/// An HLS playlist (RFC 8216): a master playlist's variants, or a media playlist's segments with their keys,
/// byte ranges, init sections and discontinuities. What Haul does not download (SAMPLE-AES, a key format other than
/// identity's) is an error naming it, not a file that will not play.
public enum HLSPlaylist: Sendable, Equatable {
    case master(Master)
    case media(Media)

    /// One variant stream of a master playlist.
    public struct Variant: Sendable, Equatable {
        public var uri: String
        public var bandwidth: Int
        /// `WIDTHxHEIGHT`, when given.
        public var resolution: String?
        public var codecs: String?
    }

    public struct Master: Sendable, Equatable {
        public var variants: [Variant]
    }

    /// How segments are encrypted.
    public struct Key: Sendable, Equatable {
        /// The key's URI (AES-128: 16 bytes).
        public var uri: String
        /// The IV; nil: the segment's media sequence number, big-endian, as RFC 8216 §5.2 says.
        public var iv: [UInt8]?
    }

    /// `length@offset` of a resource.
    public struct ByteRange: Sendable, Equatable {
        public var length: Int64
        public var offset: Int64

        public init(length: Int64, offset: Int64) {
            self.length = length
            self.offset = offset
        }
    }

    /// An init section (`EXT-X-MAP`), written before the segments that follow it.
    public struct Map: Sendable, Equatable {
        public var uri: String
        public var byteRange: ByteRange?

        public init(uri: String, byteRange: ByteRange?) {
            self.uri = uri
            self.byteRange = byteRange
        }
    }

    public struct Segment: Sendable, Equatable {
        public var uri: String
        public var duration: Double
        public var sequence: Int
        public var byteRange: ByteRange?
        public var key: Key?
        public var map: Map?
        /// An `EXT-X-DISCONTINUITY` comes before it.
        public var discontinuity: Bool
    }

    public struct Media: Sendable, Equatable {
        public var targetDuration: Double
        public var mediaSequence: Int
        public var segments: [Segment]
        /// `EXT-X-ENDLIST`: no segment will be added (a live playlist has none).
        public var isEnded: Bool
    }

    /// The most segments a playlist may list.
    public static let mostSegments = 1_000_000

    /// The largest byte range's length and offset, given or reached by a chain of ranges without offsets.
    static let largestRange: Int64 = 1 << 50

    /// Parses `text`; the error names the line that is wrong.
    public static func parse(_ text: String) throws(DownloadError) -> HLSPlaylist {
        var lines = text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" })
            .map { line in trimmed(line) }
        while lines.last?.isEmpty == true { lines.removeLast() }
        guard lines.first == "#EXTM3U" else { throw failure(1, "an HLS playlist starts with #EXTM3U") }
        var variants: [Variant] = []
        var pendingVariant: Variant?
        var segments: [Segment] = []
        var target: Double = 0
        var firstSequence = 0
        var sequenceSet = false
        var isEnded = false
        var duration: Double?
        var byteRange: (length: Int64, offset: Int64?)?
        var key: Key?
        var map: Map?
        var discontinuity = false
        var lastRange: (uri: String, end: Int64)?
        for (index, line) in lines.enumerated().dropFirst() {
            let number = index + 1
            if line.isEmpty { continue }
            if !line.hasPrefix("#") {
                if let variant = pendingVariant {
                    variants.append(
                        Variant(
                            uri: line, bandwidth: variant.bandwidth, resolution: variant.resolution,
                            codecs: variant.codecs))
                    pendingVariant = nil
                    continue
                }
                guard let length = duration else { throw failure(number, "a URI without #EXTINF before it") }
                guard segments.count < mostSegments else { throw failure(number, "more than \(mostSegments) segments") }
                var range: ByteRange?
                if let byteRange {
                    let offset: Int64
                    if let given = byteRange.offset {
                        offset = given
                    } else if let last = lastRange, last.uri == line {
                        // A chain of ranges stays within the bound a given offset has: thousands of large ranges
                        // in a row must not add up past Int64.
                        guard last.end <= largestRange else {
                            throw failure(number, "a byte range's offset must be a number up to 2^50")
                        }
                        offset = last.end
                    } else {
                        throw failure(number, "EXT-X-BYTERANGE without an offset follows no range of the same URI")
                    }
                    range = ByteRange(length: byteRange.length, offset: offset)
                    lastRange = (line, offset + byteRange.length)
                } else {
                    lastRange = nil
                }
                segments.append(
                    Segment(
                        uri: line, duration: length, sequence: firstSequence + segments.count, byteRange: range,
                        key: key, map: map, discontinuity: discontinuity))
                duration = nil
                byteRange = nil
                discontinuity = false
                continue
            }
            let (tag, value) = split(line)
            switch tag {
            case "#EXT-X-STREAM-INF":
                let attributes = try attributeList(value, line: number)
                guard let bandwidth = attributes["BANDWIDTH"].flatMap({ Int($0) }), bandwidth >= 0 else {
                    throw failure(number, "EXT-X-STREAM-INF without a BANDWIDTH")
                }
                pendingVariant = Variant(
                    uri: "", bandwidth: bandwidth, resolution: attributes["RESOLUTION"], codecs: attributes["CODECS"])
            case "#EXTINF":
                let text = trimmed(value.prefix { $0 != "," })
                guard let seconds = Double(text), seconds.isFinite, seconds >= 0 else {
                    throw failure(number, "EXTINF needs a duration in seconds")
                }
                duration = seconds
            case "#EXT-X-TARGETDURATION":
                guard let seconds = Double(value), seconds.isFinite, seconds >= 0 else {
                    throw failure(number, "EXT-X-TARGETDURATION needs seconds")
                }
                target = seconds
            case "#EXT-X-MEDIA-SEQUENCE":
                guard let first = Int(value), first >= 0, first <= Int(Int32.max), segments.isEmpty, !sequenceSet else {
                    throw failure(number, "EXT-X-MEDIA-SEQUENCE needs a number, before the first segment")
                }
                firstSequence = first
                sequenceSet = true
            case "#EXT-X-BYTERANGE":
                byteRange = try parseRange(value, line: number)
            case "#EXT-X-DISCONTINUITY":
                discontinuity = true
            case "#EXT-X-ENDLIST":
                isEnded = true
            case "#EXT-X-KEY":
                let attributes = try attributeList(value, line: number)
                switch attributes["METHOD"] {
                case "NONE":
                    key = nil
                case "AES-128":
                    if let format = attributes["KEYFORMAT"], format != "identity" {
                        throw failure(number, "a key of format \(format) (DRM) is not downloaded")
                    }
                    guard let uri = attributes["URI"], !uri.isEmpty else {
                        throw failure(number, "AES-128 without a URI")
                    }
                    var iv: [UInt8]?
                    if let text = attributes["IV"] {
                        guard let bytes = hexBytes(text), bytes.count == 16 else {
                            throw failure(number, "IV must be 0x and 32 hex digits")
                        }
                        iv = bytes
                    }
                    key = Key(uri: uri, iv: iv)
                case let method?:
                    throw failure(number, "segments encrypted with \(method) are not downloaded (only AES-128)")
                case nil:
                    throw failure(number, "EXT-X-KEY without a METHOD")
                }
            case "#EXT-X-MAP":
                let attributes = try attributeList(value, line: number)
                guard let uri = attributes["URI"], !uri.isEmpty else {
                    throw failure(number, "EXT-X-MAP without a URI")
                }
                var range: ByteRange?
                if let text = attributes["BYTERANGE"] {
                    let parsed = try parseRange(text, line: number)
                    guard let offset = parsed.offset else {
                        throw failure(number, "EXT-X-MAP's BYTERANGE needs @offset")
                    }
                    range = ByteRange(length: parsed.length, offset: offset)
                }
                map = Map(uri: uri, byteRange: range)
            default:
                continue  // Other tags (and comments) change nothing Haul fetches.
            }
        }
        if pendingVariant != nil { throw failure(lines.count, "EXT-X-STREAM-INF without a URI after it") }
        if !variants.isEmpty {
            guard segments.isEmpty else { throw failure(1, "a playlist with both variants and segments") }
            return .master(Master(variants: variants))
        }
        return .media(Media(targetDuration: target, mediaSequence: firstSequence, segments: segments, isEnded: isEnded))
    }

    /// Without spaces, tabs, carriage returns or a byte-order mark at either end.
    private static func trimmed(_ text: Substring) -> String {
        let blank: Set<Character> = [" ", "\t", "\r", "\u{FEFF}"]
        var text = text
        while let first = text.first, blank.contains(first) { text.removeFirst() }
        while let last = text.last, blank.contains(last) { text.removeLast() }
        return String(text)
    }

    private static func failure(_ line: Int, _ why: String) -> DownloadError {
        DownloadError(.invalidResponse, "HLS playlist line \(line): \(why)")
    }

    /// `#TAG:VALUE` as the tag and its value.
    private static func split(_ line: String) -> (String, String) {
        guard let colon = line.firstIndex(of: ":") else { return (line, "") }
        return (String(line[..<colon]), String(line[line.index(after: colon)...]))
    }

    /// `n[@o]`.
    private static func parseRange(_ text: String, line: Int) throws(DownloadError) -> (length: Int64, offset: Int64?) {
        let parts = text.split(separator: "@", maxSplits: 1, omittingEmptySubsequences: false)
        guard let length = Int64(parts[0]), length > 0, length <= largestRange else {
            throw failure(line, "a byte range needs a positive length")
        }
        guard parts.count == 2 else { return (length, nil) }
        guard let offset = Int64(parts[1]), offset >= 0, offset <= largestRange else {
            throw failure(line, "a byte range's offset must be a number")
        }
        return (length, offset)
    }

    /// An attribute list: `NAME=value,NAME="quoted, value"`.
    static func attributeList(_ text: String, line: Int) throws(DownloadError) -> [String: String] {
        var result: [String: String] = [:]
        var rest = Substring(text)
        while !rest.isEmpty {
            guard let equals = rest.firstIndex(of: "=") else { throw failure(line, "an attribute without =") }
            let name = trimmed(rest[..<equals])
            rest = rest[rest.index(after: equals)...]
            var value: Substring
            if rest.first == "\"" {
                rest.removeFirst()
                guard let close = rest.firstIndex(of: "\"") else { throw failure(line, "an unclosed quoted value") }
                value = rest[..<close]
                rest = rest[rest.index(after: close)...]
            } else {
                let end = rest.firstIndex(of: ",") ?? rest.endIndex
                value = rest[..<end]
                rest = rest[end...]
            }
            result[name] = String(value)
            if rest.first == "," {
                rest.removeFirst()
            } else if !rest.isEmpty {
                throw failure(line, "attributes must be separated by commas")
            }
        }
        return result
    }

    /// `0x…` as bytes.
    private static func hexBytes(_ text: String) -> [UInt8]? {
        guard text.hasPrefix("0x") || text.hasPrefix("0X") else { return nil }
        let digits = Array(text.utf8.dropFirst(2))
        guard digits.count % 2 == 0, !digits.isEmpty else { return nil }
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let high = hexValue(digits[index]), let low = hexValue(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 48...57: byte - 48
        case 65...70: byte - 55
        case 97...102: byte - 87
        default: nil
        }
    }
}

extension HLSPlaylist.Master {
    /// The variant `choice` names (a resolution `1280x720`, a height `720p`, a bandwidth, or part of its URI), else
    /// the one of the highest bandwidth.
    public func variant(_ choice: String?) -> HLSPlaylist.Variant? {
        guard let choice, !choice.isEmpty else { return variants.max { $0.bandwidth < $1.bandwidth } }
        let lowered = choice.lowercased()
        if let match = variants.first(where: { $0.resolution?.lowercased() == lowered }) { return match }
        if lowered.hasSuffix("p"), let height = Int(lowered.dropLast()) {
            let matching = variants.filter { $0.resolution?.split(separator: "x").last.flatMap { Int($0) } == height }
            if let best = matching.max(by: { $0.bandwidth < $1.bandwidth }) { return best }
        }
        if let bandwidth = Int(choice), let match = variants.first(where: { $0.bandwidth == bandwidth }) {
            return match
        }
        return variants.first { $0.uri.lowercased().contains(lowered) }
    }
}
