import Foundation
import HaulAPI
import HaulCore
import HaulServer
import HaulTesting
import HummingbirdTesting
import Testing

/// The settings' schedule through the API: its rules, the rules in force, and a rule that does not read.
@Suite("The API's schedule", .timeLimit(.minutes(1)), .teardowns)
struct ScheduleSettingsTests {
    @Test("a schedule is set and cleared through /settings, the rules in force are shown, a bad rule is a 400")
    func scheduleThroughTheAPI() async throws {
        let h = try await ServerHarness.make()
        try await h.application().test(.router) { client in
            // A schedule whose one rule holds every minute of every day: in force at once, whatever the time.
            let scheduled = try body(
                Components.Schemas.Settings.self,
                try await client.execute(
                    uri: "/api/v1/settings", method: .patch, headers: authorized,
                    body: json(#"{"schedule": ["mon-sun 00:00-24:00 jobs=2"]}"#)))
            #expect(scheduled.schedule == ["mon-sun 00:00-24:00 jobs=2"])
            #expect(scheduled.scheduleInForce == "mon-sun 00:00-24:00 jobs=2")
            #expect(scheduled.maxConcurrentDownloads == 3)
            let unscheduled = try body(
                Components.Schemas.Settings.self,
                try await client.execute(
                    uri: "/api/v1/settings", method: .patch, headers: authorized, body: json(#"{"schedule": []}"#)))
            #expect(unscheduled.schedule == [] && unscheduled.scheduleInForce == nil)
            let refused = try await client.execute(
                uri: "/api/v1/settings", method: .patch, headers: authorized,
                body: json(#"{"schedule": ["workdays rate=1M"]}"#))
            #expect(refused.status == .badRequest)
            #expect(String(buffer: refused.body).contains("'workdays' is not days"), "\(String(buffer: refused.body))")
        }
    }
}
