import Foundation
import Haul
import Synchronization

/// A calendar clock for tests: the wall time and time zone it is set to, until it is set again.
public final class ManualCalendar: CalendarClock {
    private let state: Mutex<(date: Date, timeZone: TimeZone)>

    /// At `text` (`YYYY-MM-DD HH:MM`, wall time) in `zone`.
    public init(_ text: String, in zone: TimeZone) {
        state = Mutex((Self.date(text, in: zone), zone))
    }

    public var now: (date: Date, timeZone: TimeZone) { state.withLock { $0 } }

    /// Moves to `text` in the same time zone.
    public func set(_ text: String) {
        state.withLock { $0.date = Self.date(text, in: $0.timeZone) }
    }

    /// The instant of a wall time (the first, where the autumn hour repeats it).
    public static func date(_ text: String, in zone: TimeZone) -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let parts = text.split(whereSeparator: { "- :".contains($0) }).compactMap { Int($0) }
        return calendar.date(
            from: DateComponents(year: parts[0], month: parts[1], day: parts[2], hour: parts[3], minute: parts[4]))!
    }
}
