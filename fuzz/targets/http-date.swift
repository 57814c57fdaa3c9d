import HaulCore

// HTTP dates (RFC 9110 §5.6.7: IMF-fixdate, RFC 850, asctime) and the API's ISO 8601 form: a date that parses prints
// as an IMF-fixdate that parses back to the same second, any second of years 1 to 9999 survives the round trip, and
// the byte reader of IMF-fixdate gives what the general reader gives for every text it accepts.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    if let fast = HTTPDate.parseFixdate(input) {
        expect(
            HTTPDate.parseAnyForm(input) == fast, "the byte reader of IMF-fixdate agrees with the general one",
            input: input)
    }
    // A leap second on 9999-12-31 is the first second of year 10000, which no HTTP date can print.
    if let seconds = HTTPDate.parse(input), seconds < 253_402_300_800 {
        expect(HTTPDate.parse(imfFixdate(seconds)) == seconds, "round trip as \(imfFixdate(seconds))", input: input)
    }
    if let seconds = HTTPDate.parseISO8601UTC(input) {
        expect(HTTPDate.parse(imfFixdate(seconds)) == seconds, "ISO 8601 agrees with IMF-fixdate", input: input)
    }
    let raw = bytes(start, count)
    if raw.count >= 8 {
        let value = raw.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let seconds = Int64(value % 315_537_897_600) - 62_135_596_800  // 0001-01-01 to 9999-12-31
        let printed = imfFixdate(seconds)
        expect(HTTPDate.parse(printed) == seconds, "\(seconds) printed as \(printed) parses back", input: input)
    }
    return 0
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` for seconds since 1970 (Howard Hinnant's civil_from_days).
func imfFixdate(_ seconds: Int64) -> String {
    let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
    let secondOfDay = seconds - days * 86_400
    let z = days + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let doe = z - era * 146_097
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
    let mp = (5 * doy + 2) / 153
    let day = doy - (153 * mp + 2) / 5 + 1
    let month = mp < 10 ? mp + 3 : mp - 9
    let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][Int(((days % 7) + 7) % 7)]
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
    let paddedYear = String(repeating: "0", count: max(0, 4 - String(year).count)) + String(year)
    return "\(weekday), \(two(day)) \(months[Int(month - 1)]) \(paddedYear) "
        + "\(two(secondOfDay / 3600)):\(two(secondOfDay / 60 % 60)):\(two(secondOfDay % 60)) GMT"
}
