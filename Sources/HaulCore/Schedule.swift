import Foundation

/// Rules that change the limits by the local time of day and the day of the week, such as `mon-fri 09:00-18:00
/// rate=512K`, `00:00-06:00 jobs=8 rate=0` or `sat,sun pause`.
///
/// A rule is some days (`mon`, `mon-fri`, `sat,sun`, `fri-mon`, `monday`, `daily`, `weekdays`, `weekends`; every day
/// when left out), a span of time (`HH:MM-HH:MM`, its end not included; the whole day when left out) and what applies
/// then: `rate=RATE` (all downloads together; `0` for no limit), `jobs=N` (downloads at once; a fleet's total in a
/// fleet) and `pause` (none transfers). A span whose end is not after its start runs past midnight and belongs to the
/// day it starts on (`fri 22:00-02:00` holds until Saturday 02:00). The rules are read in order and a later one that
/// holds overrides what it sets, so a general rule comes first and its exceptions after it. Outside every rule the
/// settings apply as they are.
///
/// Times are wall-clock times in the time zone given: a rule keeps its hours across a daylight-saving change (the hour
/// skipped in spring holds no time; the hour repeated in autumn holds twice).
public struct Schedule: Sendable, Equatable {
    public var rules: [Rule]

    public init(_ rules: [Rule] = []) { self.rules = rules }

    /// Parses each of `texts` as a rule.
    public init(parsing texts: [String]) throws(DownloadError) {
        rules = try texts.map { text throws(DownloadError) in try Rule(text) }
    }

    /// What the rules change at `date` in `zone`: nil when none holds.
    public func effect(at date: Date, in zone: TimeZone) -> Effect? {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let parts = calendar.dateComponents([.weekday, .hour, .minute], from: date)
        // Monday 0 … Sunday 6.
        let day = ((parts.weekday ?? 2) + 5) % 7
        let minute = (parts.hour ?? 0) * 60 + (parts.minute ?? 0)
        var effect: Effect?
        for rule in rules where rule.holds(day: day, minute: minute) {
            var merged = effect ?? Effect(rule: rule.text)
            merged.rule = effect == nil ? rule.text : merged.rule + "; " + rule.text
            if let rate = rule.rate { merged.rate = rate }
            if let jobs = rule.jobs { merged.jobs = jobs }
            if rule.pauses { merged.pauses = true }
            effect = merged
        }
        return effect
    }

    /// What holds at one moment.
    public struct Effect: Sendable, Equatable {
        /// The rules that hold, as written, joined by `; `.
        public var rule: String
        /// The rate limit: nil when no rule sets one, `.some(nil)` for no limit.
        public var rate: Int64??
        /// Downloads at once, when a rule sets it.
        public var jobs: Int?
        /// Whether no download transfers.
        public var pauses = false

        public init(rule: String, rate: Int64?? = nil, jobs: Int? = nil, pauses: Bool = false) {
            self.rule = rule
            self.rate = rate
            self.jobs = jobs
            self.pauses = pauses
        }
    }

    /// One rule.
    public struct Rule: Sendable, Equatable {
        /// The rule as written (blanks collapsed).
        public var text: String
        /// The days it starts on, Monday 0 … Sunday 6.
        public var days: Set<Int>
        /// Its span in minutes of the day, the end not included; nil for the whole day.
        public var span: (start: Int, end: Int)?
        public var rate: Int64??
        public var jobs: Int?
        public var pauses: Bool

        static let dayNames = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]

        public static func == (lhs: Rule, rhs: Rule) -> Bool { lhs.text == rhs.text }

        public init(_ text: String) throws(DownloadError) {
            let words = text.split(whereSeparator: \.isWhitespace).map(String.init)
            func refuse(_ problem: String) -> DownloadError {
                DownloadError(.invalidArgument, "the schedule rule '\(text)': \(problem)")
            }
            self.text = words.joined(separator: " ")
            days = Set(0..<7)
            span = nil
            rate = nil
            jobs = nil
            pauses = false
            var index = 0
            if index < words.count, words[index].first?.isLetter == true, words[index] != "pause",
                !words[index].contains("=")
            {
                guard let parsed = Self.days(words[index].lowercased()) else {
                    throw refuse("'\(words[index])' is not days such as mon-fri, sat,sun, daily, weekdays or weekends")
                }
                days = parsed
                index += 1
            }
            if index < words.count, words[index].first?.isNumber == true, !words[index].contains("=") {
                guard let parsed = Self.span(words[index]) else {
                    throw refuse("'\(words[index])' is not a time span such as 09:00-18:00")
                }
                span = parsed
                index += 1
            }
            guard index < words.count else { throw refuse("it says what applies: rate=RATE, jobs=N or pause") }
            for word in words[index...] {
                if word == "pause" {
                    pauses = true
                    continue
                }
                let pair = word.split(separator: "=", maxSplits: 1).map(String.init)
                guard pair.count == 2 else {
                    throw refuse("'\(word)' is not rate=RATE, jobs=N or pause (days and times come first)")
                }
                switch pair[0] {
                case "rate":
                    if let limit = TokenBucket.parseLimit(pair[1]) {
                        rate = .some(limit == 0 ? nil : limit)
                    } else {
                        throw refuse("'\(pair[1])' is not a rate such as 512K or 2M (0: no limit)")
                    }
                case "jobs":
                    guard let count = Int(pair[1]), DownloadRules.concurrentDownloads.contains(count) else {
                        throw refuse(
                            "jobs='\(pair[1])' is not a number from \(DownloadRules.concurrentDownloads.lowerBound) to "
                                + "\(DownloadRules.concurrentDownloads.upperBound)")
                    }
                    jobs = count
                default:
                    throw refuse("'\(pair[0])' is not rate, jobs or pause")
                }
            }
        }

        /// Whether the rule holds on `day` (Monday 0) at `minute` of the day.
        func holds(day: Int, minute: Int) -> Bool {
            guard let span else { return days.contains(day) }
            if span.start < span.end { return days.contains(day) && (span.start..<span.end).contains(minute) }
            // Past midnight: the evening of a day it starts on, or the morning after one.
            return (minute >= span.start && days.contains(day)) || (minute < span.end && days.contains((day + 6) % 7))
        }

        /// Words for sets of days, as qBittorrent's and Transmission's schedulers name them.
        static let daySets: [String: Set<Int>] = [
            "daily": Set(0..<7), "weekdays": Set(0..<5), "weekends": [5, 6], "weekend": [5, 6],
        ]

        static let fullDayNames = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]

        /// The day a name gives: `mon` or `monday`.
        static func day(_ name: String) -> Int? {
            dayNames.firstIndex(of: name) ?? fullDayNames.firstIndex(of: name)
        }

        static func days(_ text: String) -> Set<Int>? {
            if let set = daySets[text] { return set }
            var days: Set<Int> = []
            for part in text.split(separator: ",", omittingEmptySubsequences: false) {
                let ends = part.split(separator: "-", omittingEmptySubsequences: false).map(String.init)
                guard (1...2).contains(ends.count), let first = day(ends[0]), let last = day(ends[ends.count - 1])
                else { return nil }
                var day = first
                while true {
                    days.insert(day)
                    if day == last { break }
                    day = (day + 1) % 7
                }
            }
            return days
        }

        static func span(_ text: String) -> (start: Int, end: Int)? {
            let ends = text.split(separator: "-").map(String.init)
            guard ends.count == 2, let start = minute(ends[0]), let end = minute(ends[1]) else { return nil }
            return (start, end)
        }

        /// `HH:MM` (24:00 for the end of the day) as minutes.
        static func minute(_ text: String) -> Int? {
            let parts = text.split(separator: ":").map(String.init)
            guard parts.count == 2, parts[0].count <= 2, parts[1].count == 2, let hour = Int(parts[0]),
                let minute = Int(parts[1]), (0...59).contains(minute),
                (0...23).contains(hour) || (hour == 24 && minute == 0)
            else { return nil }
            return hour * 60 + minute
        }
    }
}
