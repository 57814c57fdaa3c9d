import Foundation
import HaulCore

// Schedule rules (`haul serve --schedule`, the config file, the API's settings): a rule that parses reads back the same
// from its own text, has days, a span inside the day and something to apply; the rule's effect at any moment in any
// of a few time zones never crashes, and holds only what the rule sets.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = text(start, count)
    guard let rule = try? Schedule.Rule(input) else { return 0 }
    guard let again = try? Schedule.Rule(rule.text) else {
        expect(false, "its own text parses: \(rule.text)", input: input)
        return 0
    }
    expect(
        again.days == rule.days && again.span?.start == rule.span?.start && again.span?.end == rule.span?.end
            && again.rate == rule.rate && again.jobs == rule.jobs && again.pauses == rule.pauses,
        "the same rule from its text", input: input)
    expect(!rule.days.isEmpty && rule.days.allSatisfy { (0..<7).contains($0) }, "days 0 to 6", input: input)
    if let span = rule.span {
        expect((0...1440).contains(span.start) && (0...1440).contains(span.end), "a span inside the day", input: input)
    }
    expect(rule.rate != nil || rule.jobs != nil || rule.pauses, "something applies", input: input)
    let schedule = Schedule([rule])
    let raw = bytes(start, count)
    let seconds = Double(raw.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
    for zone in ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"] {
        guard let zone = TimeZone(identifier: zone) else { continue }
        if let effect = schedule.effect(at: Date(timeIntervalSince1970: 1_700_000_000 + seconds), in: zone) {
            expect(effect.rule == rule.text, "the effect names the rule", input: input)
            expect(effect.jobs == rule.jobs && effect.pauses == rule.pauses, "only what the rule sets", input: input)
        }
    }
    return 0
}
