import Foundation
import HaulCore
import OpenAPIRuntime

/// The API's dates, `2026-11-23T05:49:14Z`, written and read without Foundation's ISO 8601 formatter, which goes
/// through ICU, which costs more than the rest of reading a download. Any other
/// ISO 8601 form (fractions, offsets) is read by the generated code's own transcoder. Used by the daemon's generated
/// routes and by the `haul` command's generated client.
public struct APIDateTranscoder: DateTranscoder {
    public init() {}

    public func encode(_ date: Date) throws -> String {
        var bytes: [UInt8] = []
        JSONText.appendDate(date, to: &bytes)
        return String(decoding: bytes.dropFirst().dropLast(), as: UTF8.self)
    }

    public func decode(_ text: String) throws -> Date {
        if let seconds = HTTPDate.parseISO8601UTC(text) { return Date(timeIntervalSince1970: TimeInterval(seconds)) }
        return try ISO8601DateTranscoder().decode(text)
    }
}
