import Foundation

/// Parses the three HTTP date formats of RFC 9110 §5.6.7 into seconds since 1970, without Foundation formatters.
public enum HTTPDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    /// Seconds since 1970-01-01 UTC, or nil when `text` is not an HTTP date.
    public static func parse(_ text: String) -> Int64? {
        parseFixdate(text) ?? parseAnyForm(text)
    }

    /// `parse` the general way, word by word, for the three forms (public for the fuzz target's comparison).
    public static func parseAnyForm(_ text: String) -> Int64? {
        let parts = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "," }).map(String.init)
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
        if parts.count == 6, parts[5].uppercased() == "GMT", let day = Int(parts[1]), let month = month(parts[2]),
            let year = Int(parts[3]), parts[3].count == 4
        {
            return build(year: year, month: month, day: day, time: parts[4])
        }
        // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
        if parts.count == 4, parts[3].uppercased() == "GMT" {
            let dmy = parts[1].split(separator: "-").map(String.init)
            guard dmy.count == 3, let day = Int(dmy[0]), let month = month(dmy[1]), let yy = Int(dmy[2]) else {
                return nil
            }
            let year = dmy[2].count == 2 ? (yy < 70 ? 2000 + yy : 1900 + yy) : yy
            return build(year: year, month: month, day: day, time: parts[2])
        }
        // asctime: Sun Nov  6 08:49:37 1994
        if parts.count == 5, let month = month(parts[1]), let day = Int(parts[2]), let year = Int(parts[4]) {
            return build(year: year, month: month, day: day, time: parts[3])
        }
        return nil
    }

    /// The common form, IMF-fixdate exactly as RFC 9110 writes it (`Sun, 06 Nov 1994 08:49:37 GMT`), read from its
    /// bytes; nil for anything else, which `parse` then reads the general way (`parseAnyForm`, which gives the same
    /// value for every text this accepts). Every response carries one or two dates, and splitting each into strings
    /// is most of what reading it costs.
    public static func parseFixdate(_ text: String) -> Int64? {
        var text = text
        return text.withUTF8 { bytes -> Int64? in
            guard bytes.count == 29, bytes[3] == UInt8(ascii: ","), bytes[4] == UInt8(ascii: " "),
                bytes[7] == UInt8(ascii: " "), bytes[11] == UInt8(ascii: " "), bytes[16] == UInt8(ascii: " "),
                bytes[19] == UInt8(ascii: ":"), bytes[22] == UInt8(ascii: ":"), bytes[25] == UInt8(ascii: " "),
                bytes[26] == UInt8(ascii: "G"), bytes[27] == UInt8(ascii: "M"), bytes[28] == UInt8(ascii: "T"),
                (0..<3).allSatisfy({ ![UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: ",")].contains(bytes[$0]) })
            else { return nil }
            func number(_ range: Range<Int>) -> Int? {
                var value = 0
                for index in range {
                    let digit = Int(bytes[index]) &- 48
                    guard (0...9).contains(digit) else { return nil }
                    value = value * 10 + digit
                }
                return value
            }
            let name = (bytes[8] | 0x20, bytes[9] | 0x20, bytes[10] | 0x20)
            guard let day = number(5..<7), let year = number(12..<16), let hour = number(17..<19),
                let minute = number(20..<22), let second = number(23..<25),
                let month = monthBytes.firstIndex(where: { $0 == name }), bytes[8] >= 0x41, bytes[9] >= 0x41,
                bytes[10] >= 0x41
            else { return nil }
            return build(year: year, month: month + 1, day: day, hms: [hour, minute, second])
        }
    }

    private static let monthBytes: [(UInt8, UInt8, UInt8)] = months.map { name in
        let bytes = Array(name.utf8)
        return (bytes[0], bytes[1], bytes[2])
    }

    /// Seconds since 1970-01-01 UTC for an ISO 8601 date-time in UTC to the second, `2026-11-23T05:49:14Z` (the form
    /// Haul's API writes), or nil for anything else (fractions, offsets, lower-case letters).
    public static func parseISO8601UTC(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count == 20 else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for index in range {
                let digit = Int(bytes[index]) - 48
                guard (0...9).contains(digit) else { return nil }
                value = value * 10 + digit
            }
            return value
        }
        let separators: [(Int, Character)] = [(4, "-"), (7, "-"), (10, "T"), (13, ":"), (16, ":"), (19, "Z")]
        guard separators.allSatisfy({ bytes[$0.0] == $0.1.asciiValue }), let year = number(0..<4),
            let month = number(5..<7), (1...12).contains(month), let day = number(8..<10), let hour = number(11..<13),
            let minute = number(14..<16), let second = number(17..<19)
        else { return nil }
        return build(year: year, month: month, day: day, hms: [hour, minute, second])
    }

    private static func month(_ text: String) -> Int? {
        months.firstIndex(of: text.lowercased()).map { $0 + 1 }
    }

    private static func build(year: Int, month: Int, day: Int, time: String) -> Int64? {
        build(year: year, month: month, day: day, hms: time.split(separator: ":").compactMap { Int($0) })
    }

    private static func build(year: Int, month: Int, day: Int, hms: [Int]) -> Int64? {
        guard hms.count == 3, (1...31).contains(day), (0...23).contains(hms[0]), (0...59).contains(hms[1]),
            (0...60).contains(hms[2]), (1...9999).contains(year)
        else { return nil }
        return daysFromCivil(year: year, month: month, day: day) * 86_400 + Int64(hms[0] * 3600 + hms[1] * 60 + hms[2])
    }

    // Howard Hinnant's days_from_civil.
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int64 {
        let y = Int64(month <= 2 ? year - 1 : year)
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let m = Int64(month)
        let doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + Int64(day) - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}
