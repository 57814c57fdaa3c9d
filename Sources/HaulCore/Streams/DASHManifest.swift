import Foundation

/// A static MPEG-DASH manifest (an MPD, ISO/IEC 23009-1): its representations, each with the init section and the
/// segments that make it, from a `SegmentTemplate` (with `$Number$` or a `SegmentTimeline` and `$Time$`), a
/// `SegmentList`, or a `SegmentBase` (the representation is one file). A dynamic (live) MPD, or one of several periods,
/// is refused, saying so.
public struct DASHManifest: Sendable, Equatable {
    /// What a piece of a representation is: a URI relative to its base URLs, and a byte range of it.
    public struct Reference: Sendable, Equatable {
        public var uri: String
        public var range: HLSPlaylist.ByteRange?
    }

    public enum Kind: String, Sendable, Equatable {
        case video, audio, other
    }

    public struct Representation: Sendable, Equatable {
        public var id: String
        public var bandwidth: Int
        public var kind: Kind
        public var mimeType: String?
        public var width: Int?
        public var height: Int?
        /// The `BaseURL`s from the MPD down to the representation, each relative to the one before (the first to the
        /// MPD's own URL).
        public var bases: [String]
        public var initialization: Reference?
        public var segments: [Reference]
    }

    public var representations: [Representation]

    /// The most segments a representation may have.
    public static let mostSegments = 1_000_000

    /// Times in timescale units must stay below this, where a Double still converts to an Int64.
    private static let largestTime = 9.2e18

    /// The representation of `kind` with the highest bandwidth; a video one may be named by `choice` as an HLS
    /// variant is (`1280x720`, `720p`, a bandwidth, or its id).
    public func best(_ kind: Kind, choice: String? = nil) -> Representation? {
        let candidates = representations.filter { $0.kind == kind }
        if let choice, !choice.isEmpty {
            let lowered = choice.lowercased()
            return candidates.first { representation in
                let size = representation.width.flatMap { width in representation.height.map { "\(width)x\($0)" } }
                return size == lowered || representation.height.map { "\($0)p" } == lowered
                    || String(representation.bandwidth) == choice || representation.id.lowercased() == lowered
            }
        }
        return candidates.max { $0.bandwidth < $1.bandwidth }
    }

    /// Parses `text`; the error says what is wrong.
    public static func parse(_ text: String) throws(DownloadError) -> DASHManifest {
        let root = try XMLElement.parse(text)
        guard root.name == "MPD" else { throw failure("the document is not an MPD") }
        if root.attributes["type"] == "dynamic" {
            throw DownloadError(.invalidArgument, "a live (dynamic) DASH manifest is not downloaded")
        }
        let periods = root.all("Period")
        guard periods.count == 1, let period = periods.first else {
            throw failure(periods.isEmpty ? "no Period" : "\(periods.count) periods; one is downloaded")
        }
        var total: Double?
        if let text = period.attributes["duration"] ?? root.attributes["mediaPresentationDuration"] {
            total = try duration(text)
        }
        var found: [Representation] = []
        let rootBases = root.first("BaseURL").map { [$0.text.trimmed] } ?? []
        let periodBases = rootBases + (period.first("BaseURL").map { [$0.text.trimmed] } ?? [])
        for set in period.all("AdaptationSet") {
            let setBases = periodBases + (set.first("BaseURL").map { [$0.text.trimmed] } ?? [])
            for representation in set.all("Representation") {
                guard let id = representation.attributes["id"], !id.isEmpty else {
                    throw failure("a Representation without an id")
                }
                let bandwidth = representation.attributes["bandwidth"].flatMap { Int($0) } ?? 0
                let mime = representation.attributes["mimeType"] ?? set.attributes["mimeType"]
                let content = set.attributes["contentType"]
                let width = (representation.attributes["width"] ?? set.attributes["width"]).flatMap { Int($0) }
                let height = (representation.attributes["height"] ?? set.attributes["height"]).flatMap { Int($0) }
                let kind: Kind =
                    mime?.hasPrefix("video/") == true || content == "video" || width != nil
                    ? .video : mime?.hasPrefix("audio/") == true || content == "audio" ? .audio : .other
                let bases = setBases + (representation.first("BaseURL").map { [$0.text.trimmed] } ?? [])
                var made = Representation(
                    id: id, bandwidth: bandwidth, kind: kind, mimeType: mime, width: width, height: height,
                    bases: bases, initialization: nil, segments: [])
                try fill(&made, representation: representation, set: set, period: period, total: total)
                found.append(made)
            }
        }
        guard !found.isEmpty else { throw failure("no Representation") }
        return DASHManifest(representations: found)
    }

    /// The init section and segments of `made`, from the most specific of its SegmentTemplate, SegmentList or
    /// SegmentBase (a Representation's own, else its AdaptationSet's, else its Period's).
    private static func fill(
        _ made: inout Representation, representation: XMLElement, set: XMLElement, period: XMLElement, total: Double?
    ) throws(DownloadError) {
        let levels = [representation, set, period]
        if let list = levels.lazy.compactMap({ $0.first("SegmentList") }).first {
            if let initial = list.first("Initialization") {
                var initRange: HLSPlaylist.ByteRange?
                if let text = initial.attributes["range"] { initRange = try range(text) }
                made.initialization = Reference(uri: initial.attributes["sourceURL"] ?? "", range: initRange)
            }
            for url in list.all("SegmentURL") {
                guard made.segments.count < mostSegments else { throw failure("more than \(mostSegments) segments") }
                var mediaRange: HLSPlaylist.ByteRange?
                if let text = url.attributes["mediaRange"] { mediaRange = try range(text) }
                made.segments.append(Reference(uri: url.attributes["media"] ?? "", range: mediaRange))
            }
            guard !made.segments.isEmpty else { throw failure("a SegmentList without SegmentURL") }
            return
        }
        // A template's attributes may be split between levels: the most specific one given wins.
        let templates = levels.compactMap { $0.first("SegmentTemplate") }
        if !templates.isEmpty {
            func attribute(_ name: String) -> String? { templates.lazy.compactMap { $0.attributes[name] }.first }
            let timeline = templates.lazy.compactMap { $0.first("SegmentTimeline") }.first
            guard let media = attribute("media") else { throw failure("a SegmentTemplate without media") }
            // Every count and time below is checked before it becomes an integer: a manifest is a server's text, and
            // a timescale of 1e617 (infinity), a repeat count of Int.max or a t near 2^63 must be refused, not trap.
            let start = attribute("startNumber").flatMap { Int($0) } ?? 1
            let timescale = attribute("timescale").flatMap { Double($0) } ?? 1
            guard timescale.isFinite, timescale > 0, start >= 0, start <= Int.max - mostSegments else {
                throw failure("a SegmentTemplate's timescale or startNumber")
            }
            if let initial = attribute("initialization") {
                made.initialization = Reference(
                    uri: try expand(initial, id: made.id, bandwidth: made.bandwidth, number: nil, time: nil),
                    range: nil)
            }
            var times: [(time: Int64, number: Int)] = []
            if let timeline {
                var time: Int64 = 0
                let end = try total.map { total throws(DownloadError) in
                    let scaled = (total * timescale).rounded()
                    guard scaled < Self.largestTime else {
                        throw failure("a timescale of \(timescale) for the duration")
                    }
                    return Int64(scaled)
                }
                for entry in timeline.all("S") {
                    guard let length = entry.attributes["d"].flatMap({ Int64($0) }), length > 0 else {
                        throw failure("a SegmentTimeline S without a positive d")
                    }
                    if let text = entry.attributes["t"] {
                        guard let given = Int64(text), given >= 0 else { throw failure("the time t=\"\(text)\"") }
                        time = given
                    }
                    let repeats = entry.attributes["r"].flatMap { Int($0) } ?? 0
                    guard repeats < mostSegments else { throw failure("more than \(mostSegments) segments") }
                    var count = repeats + 1
                    if repeats < 0 {
                        guard let end else { throw failure("r=-1 in a timeline without a known duration") }
                        // In floating point: end - time + length - 1 may pass 2^63.
                        let left = (Double(end - time) / Double(length)).rounded(.up)
                        guard left <= Double(mostSegments) else { throw failure("more than \(mostSegments) segments") }
                        count = Int(max(0, left))
                    }
                    for _ in 0..<count {
                        guard times.count < mostSegments else { throw failure("more than \(mostSegments) segments") }
                        times.append((time, start + times.count))
                        let (next, overflow) = time.addingReportingOverflow(length)
                        guard !overflow else { throw failure("segment times past 2^63") }
                        time = next
                    }
                }
            } else {
                guard let length = attribute("duration").flatMap({ Double($0) }), length.isFinite, length > 0 else {
                    throw failure("a SegmentTemplate with neither a duration nor a SegmentTimeline")
                }
                guard let total else { throw failure("an MPD without a duration: the segments cannot be counted") }
                let segments = (total * timescale / length).rounded(.up)
                guard segments <= Double(mostSegments) else { throw failure("more than \(mostSegments) segments") }
                let count = Int(segments)
                guard Double(count) * length < Self.largestTime else { throw failure("segment times past 2^63") }
                times = (0..<count).map { (Int64(Double($0) * length), start + $0) }
            }
            made.segments = try times.map { entry throws(DownloadError) in
                Reference(
                    uri: try expand(
                        media, id: made.id, bandwidth: made.bandwidth, number: entry.number, time: entry.time),
                    range: nil)
            }
            guard !made.segments.isEmpty else { throw failure("a SegmentTemplate that makes no segment") }
            return
        }
        // SegmentBase, or nothing: the representation is its BaseURL, one file.
        made.segments = [Reference(uri: "", range: nil)]
    }

    /// A template with `$RepresentationID$`, `$Bandwidth$`, `$Number$`, `$Time$` (each with an optional `%0Nd`) and
    /// `$$` replaced.
    static func expand(_ template: String, id: String, bandwidth: Int, number: Int?, time: Int64?)
        throws(DownloadError) -> String
    {
        var result = ""
        var rest = Substring(template)
        while let dollar = rest.firstIndex(of: "$") {
            result += rest[..<dollar]
            rest = rest[rest.index(after: dollar)...]
            guard let close = rest.firstIndex(of: "$") else { throw failure("an unclosed $ in '\(template)'") }
            let token = rest[..<close]
            rest = rest[rest.index(after: close)...]
            if token.isEmpty {
                result += "$"
                continue
            }
            let parts = token.split(separator: "%", maxSplits: 1)
            var width = 0
            if parts.count == 2 {
                let format = parts[1]
                guard format.hasSuffix("d"), let digits = Int(format.dropLast()), digits >= 0, digits <= 32 else {
                    throw failure("the format '%\(format)' in '\(template)'")
                }
                width = digits
            }
            let value: String
            switch parts[0] {
            case "RepresentationID": value = id
            case "Bandwidth": value = String(bandwidth)
            case "Number":
                guard let number else { throw failure("$Number$ where no number is known: '\(template)'") }
                value = String(number)
            case "Time":
                guard let time else { throw failure("$Time$ where no time is known: '\(template)'") }
                value = String(time)
            default: throw failure("the identifier $\(token)$ in '\(template)'")
            }
            result += String(repeating: "0", count: max(0, width - value.count)) + value
        }
        return result + rest
    }

    /// `first-last`, as a byte range.
    private static func range(_ text: String) throws(DownloadError) -> HLSPlaylist.ByteRange {
        let parts = text.split(separator: "-", maxSplits: 1)
        guard parts.count == 2, let first = Int64(parts[0]), let last = Int64(parts[1]), first >= 0, last >= first,
            last < 1 << 50
        else { throw failure("the byte range '\(text)'") }
        return HLSPlaylist.ByteRange(length: last - first + 1, offset: first)
    }

    /// An ISO 8601 duration as the MPD writes them (`PT1H2M3.5S`, `P1DT2H`), in seconds.
    static func duration(_ text: String) throws(DownloadError) -> Double {
        var seconds = 0.0
        var number = ""
        var inTime = false
        guard text.hasPrefix("P") else { throw failure("the duration '\(text)'") }
        for character in text.dropFirst() {
            if character.isNumber || character == "." {
                number.append(character)
                continue
            }
            if character == "T" {
                inTime = true
                continue
            }
            guard let value = Double(number), value.isFinite else { throw failure("the duration '\(text)'") }
            number = ""
            switch (character, inTime) {
            case ("D", false): seconds += value * 86_400
            case ("H", true): seconds += value * 3_600
            case ("M", true): seconds += value * 60
            case ("S", true): seconds += value
            default: throw failure("the duration '\(text)'")
            }
        }
        guard number.isEmpty, seconds.isFinite, seconds >= 0, seconds < 1e9 else {
            throw failure("the duration '\(text)'")
        }
        return seconds
    }

    private static func failure(_ why: String) -> DownloadError {
        DownloadError(.invalidResponse, "DASH manifest: \(why)")
    }
}

extension String {
    fileprivate var trimmed: String { trimmingCharacters(in: .whitespacesAndNewlines) }
}
