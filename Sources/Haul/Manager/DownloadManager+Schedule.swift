import Foundation
import HaulCore
import Logging

extension DownloadManager {
    /// Downloads transferring at once now: the settings', or the schedule's rule in force (0 while it pauses).
    var jobLimit: Int {
        guard let scheduleEffect else { return settings.maxConcurrentDownloads }
        if scheduleEffect.pauses { return 0 }
        // In a fleet, `jobs=` is the fleet's total (`fleetJobsInForce`); each worker keeps its own `-j`.
        if leasing != nil { return settings.maxConcurrentDownloads }
        return scheduleEffect.jobs ?? settings.maxConcurrentDownloads
    }

    /// In a fleet, the schedule's `jobs=` in force: the downloads the whole fleet runs at once (nil: the stored
    /// `--fleet-jobs`, if any).
    var fleetJobsInForce: Int? { leasing != nil ? scheduleEffect?.jobs : nil }

    /// The limit on all downloads together now: the settings', or the schedule's rule in force.
    var rateInForce: Int64? { scheduleEffect?.rate ?? settings.rateLimit }

    /// The schedule's rules that hold now, as written (nil when none does).
    public func scheduleInForce() -> String? { scheduleEffect?.rule }

    /// `settings` as the manager reports them: with the schedule's rules in force.
    func reported(_ settings: ManagerSettings) -> ManagerSettings {
        var settings = settings
        settings.scheduleInForce = scheduleEffect?.rule
        return settings
    }

    /// Reads the schedule at the calendar's time now and applies what changed: the rate at once, more downloads
    /// started when the rule allows more, and the running ones stopped (queued again, at their exact offsets) when it
    /// pauses. A rule that lowers `jobs` lets the running downloads finish, as lowering `-j` does. `run()` calls it
    /// every second.
    public func checkSchedule() {
        let effect = Self.effect(of: timetable, at: configuration.calendar)
        guard effect != scheduleEffect else { return }
        scheduleEffect = effect
        configuration.logger.notice(
            "\(effect.map { "the schedule's rule in force: \($0.rule)" } ?? "no schedule rule in force")")
        globalLimiter.setRate(rateShare(of: rateInForce))
        hub.emit(.settings(reported(settings)))
        if effect?.pauses == true {
            for (id, task) in tasks where !finishing.contains(id) {
                stopReasons[id] = .exit
                task.cancel()
            }
        }
        try? schedule()
    }

    /// What `timetable`'s rules change at `calendar`'s time now; nil without rules, and then the calendar is not read
    /// (a read makes the current time zone, and the rules a Gregorian calendar in it: a start without a schedule
    /// needs neither).
    static func effect(of timetable: Schedule, at calendar: any CalendarClock) -> Schedule.Effect? {
        guard !timetable.rules.isEmpty else { return nil }
        let now = calendar.now
        return timetable.effect(at: now.date, in: now.timeZone)
    }
}
