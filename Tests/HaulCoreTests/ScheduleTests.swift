import Foundation
import HaulCore
import Testing

@Suite("Schedules")
struct ScheduleTests {
    let berlin = TimeZone(identifier: "Europe/Berlin")!

    /// The instant of a wall-clock time in `zone` (the first, when the autumn hour repeats it).
    func at(_ text: String, in zone: TimeZone) -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let parts = text.split(whereSeparator: { "- :".contains($0) }).compactMap { Int($0) }
        return calendar.date(
            from: DateComponents(year: parts[0], month: parts[1], day: parts[2], hour: parts[3], minute: parts[4]))!
    }

    @Test("the rules are read in order over a whole week, minute by minute; a later rule overrides what it sets")
    func acrossAWeek() throws {
        let schedule = try Schedule(parsing: [
            "00:00-06:00 jobs=8 rate=0", "mon-fri 09:00-18:00 rate=512K", "sat,sun pause", "fri 22:00-02:00 jobs=2",
        ])
        // Monday 2026-11-23 00:00 in Berlin, every minute for a week.
        let start = at("2026-11-23 00:00", in: berlin)
        var seen: [String: Int] = [:]
        for minute in 0..<(7 * 24 * 60) {
            let date = start.addingTimeInterval(Double(minute * 60))
            let day = minute / 1440
            let time = minute % 1440
            let effect = schedule.effect(at: date, in: berlin)
            var expected: Schedule.Effect?
            func add(_ rule: String, rate: Int64?? = nil, jobs: Int? = nil, pauses: Bool = false) {
                var merged = expected ?? Schedule.Effect(rule: rule)
                merged.rule = expected == nil ? rule : merged.rule + "; " + rule
                if let rate { merged.rate = rate }
                if let jobs { merged.jobs = jobs }
                if pauses { merged.pauses = true }
                expected = merged
            }
            if time < 360 { add("00:00-06:00 jobs=8 rate=0", rate: .some(nil), jobs: 8) }
            if day < 5 && (540..<1080).contains(time) { add("mon-fri 09:00-18:00 rate=512K", rate: .some(512 * 1024)) }
            if day >= 5 { add("sat,sun pause", pauses: true) }
            if (day == 4 && time >= 1320) || (day == 5 && time < 120) { add("fri 22:00-02:00 jobs=2", jobs: 2) }
            #expect(effect == expected, "day \(day) minute \(time)")
            seen[effect?.rule ?? "none", default: 0] += 1
        }
        #expect(seen["none"] == 5 * 540 - 120)
        #expect(seen["00:00-06:00 jobs=8 rate=0; sat,sun pause; fri 22:00-02:00 jobs=2"] == 120)
    }

    @Test("wall-clock hours across daylight saving: the spring hour that does not exist, the autumn hour twice")
    func daylightSaving() throws {
        let schedule = try Schedule(parsing: ["02:00-03:00 jobs=9", "sun 01:00-04:00 rate=1M"])
        // 2026-10-25: Berlin goes from 03:00 CEST back to 02:00 CET. 02:30 happens twice, an hour apart.
        let first = at("2026-10-25 02:30", in: berlin)
        #expect(berlin.isDaylightSavingTime(for: first))
        let second = first.addingTimeInterval(3600)
        #expect(!berlin.isDaylightSavingTime(for: second))
        for date in [first, second] {
            #expect(schedule.effect(at: date, in: berlin)?.jobs == 9)
            #expect(schedule.effect(at: date, in: berlin)?.rate == .some(1 << 20))
        }
        // From 00:00 to 05:00 wall time that day is six hours of real time; the Sunday rule holds for four of them
        // (01:00 to 04:00 wall time, the repeated hour included), minute by minute.
        let night = minutes(from: at("2026-10-25 00:00", in: berlin), count: 6 * 60, of: schedule)
        #expect(night.filter { $0?.rate != nil }.count == 4 * 60)
        #expect(night.filter { $0?.jobs == 9 }.count == 2 * 60)
        // 2026-03-29: 02:00 CET jumps to 03:00 CEST; the rule of 02:00-03:00 holds for no time at all that night.
        let spring = minutes(from: at("2026-03-29 00:00", in: berlin), count: 5 * 60, of: schedule)
        #expect(spring.allSatisfy { $0?.jobs == nil })
        // The same instant is another wall time elsewhere.
        let utc = TimeZone(identifier: "UTC")!
        #expect(schedule.effect(at: at("2026-11-24 02:15", in: utc), in: utc)?.jobs == 9)
        #expect(schedule.effect(at: at("2026-11-24 02:15", in: utc), in: berlin)?.jobs == nil)
    }

    /// The effect in Berlin of each of `count` minutes from `start`.
    func minutes(from start: Date, count: Int, of schedule: Schedule) -> [Schedule.Effect?] {
        (0..<count).map { minute in schedule.effect(at: start.addingTimeInterval(Double(minute * 60)), in: berlin) }
    }

    @Test("a rule that does not read is refused, naming the rule and the part")
    func badRules() {
        let cases: [(String, String)] = [
            ("workdays rate=1M", "'workdays' is not days"), ("mo-fr rate=1M", "'mo-fr' is not days"),
            ("mon-fri 9-18 rate=1M", "'9-18' is not a time span"),
            ("mon 25:00-26:00 pause", "'25:00-26:00' is not a time span"),
            ("mon-fri 09:00-18:00", "it says what applies"),
            ("rate=fast", "'fast' is not a rate"),
            ("jobs=0", "jobs='0' is not a number from 1 to 1000"),
            ("09:00-10:00 speed=1M", "'speed' is not rate, jobs or pause"),
            ("09:00-10:00 mon pause", "'mon' is not rate=RATE"),
        ]
        for (text, says) in cases {
            do {
                _ = try Schedule.Rule(text)
                Issue.record("'\(text)' was taken")
            } catch {
                #expect(error.message.contains(says) && error.message.contains(text), "\(error.message)")
            }
        }
        #expect((try? Schedule.Rule("  sat,sun   pause ").text) == "sat,sun pause")
        #expect((try? Schedule.Rule("fri-mon 00:00-24:00 rate=0"))?.days == [4, 5, 6, 0])
    }

    @Test(
        "days by their names, whole or short, and the words schedulers use for sets of them",
        arguments: [
            ("daily", Set(0..<7)), ("weekdays", Set(0..<5)), ("weekends", [5, 6]), ("Weekend", [5, 6]),
            ("monday-wednesday", [0, 1, 2]), ("saturday,sun", [5, 6]), ("Fri", [4]),
        ] as [(String, Set<Int>)])
    func dayWords(_ words: String, _ days: Set<Int>) throws {
        #expect(try Schedule.Rule("\(words) 09:00-18:00 rate=1M").days == days)
    }
}
