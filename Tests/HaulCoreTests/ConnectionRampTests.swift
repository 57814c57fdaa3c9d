import HaulCore
import Testing

@Suite("Connection ramp")
struct ConnectionRampTests {
    /// A simulated download: `perConnection` bytes a second on each connection, all together at most `link`, sampled
    /// every 10 ms for `seconds`; `extra` bytes arrive on top at the moments it names. Returns the connections open at
    /// the end, every action taken, and when.
    static func simulate(
        perConnection: Double, link: Double, maximum: Int, seconds: Double = 3, canAdd: Bool = true,
        ramp: ConnectionRamp? = nil, extra: [Duration: Double] = [:]
    ) -> (connections: Int, actions: [ConnectionRamp.Action], ramp: ConnectionRamp, times: [Duration]) {
        var ramp = ramp ?? ConnectionRamp(maximum: maximum, window: .milliseconds(100))
        var connections = 1
        var bytes: Double = 0
        var actions: [ConnectionRamp.Action] = []
        var times: [Duration] = []
        let step = Duration.milliseconds(10)
        var now = Duration.zero
        for _ in 0..<Int(seconds * 100) {
            now += step
            bytes += min(perConnection * Double(connections), link) * 0.01 + (extra[now] ?? 0)
            let action = ramp.decide(
                now: now, bytes: Int64(bytes), connections: connections, flowing: connections, canAdd: canAdd)
            switch action {
            case .add: connections += 1
            case .drop(let count): connections -= count
            case .hold: break
            }
            if action != .hold {
                actions.append(action)
                times.append(now)
            }
        }
        return (connections, actions, ramp, times)
    }

    @Test(
        "how many connections it settles on",
        arguments: [
            // (per connection, link, maximum) -> connections
            (1_000_000.0, 100_000_000.0, 8, 8),  // capped connections, wide link: all of them
            (1_000_000.0, 100_000_000.0, 4, 4),
            (1_000_000.0, 3_000_000.0, 8, 3),  // the link fills at three: the fourth is closed again
            (10_000_000.0, 10_000_000.0, 8, 1),  // one connection fills the link: back to one
            (1_000_000.0, 100_000_000.0, 1, 1),  // -x 1: exactly one
        ])
    func settlesOn(perConnection: Double, link: Double, maximum: Int, expected: Int) {
        let result = Self.simulate(perConnection: perConnection, link: link, maximum: maximum, seconds: 1.5)
        #expect(result.connections == expected)
        #expect(result.ramp.isSettled)
    }

    @Test func addsOneAtATime() {
        let result = Self.simulate(perConnection: 1_000_000, link: 100_000_000, maximum: 8)
        #expect(result.actions == Array(repeating: .add, count: 7))
    }

    @Test func itAsksToBeLookedAtOftenOnlyWhileMeasuringOrJudging() {
        var ramp = ConnectionRamp(maximum: 2, window: .milliseconds(100))
        // Before the first decision: the first window must start at the normal pace.
        #expect(!ramp.isMeasuring)
        _ = ramp.decide(now: .milliseconds(5), bytes: 0, connections: 1, flowing: 1, canAdd: true)
        #expect(ramp.isMeasuring)
        let action = ramp.decide(now: .milliseconds(105), bytes: 2_000_000, connections: 1, flowing: 1, canAdd: true)
        #expect(action == .add)
        #expect(ramp.isMeasuring)  // judging the new connection
        // It doubles the rate: at the maximum, the ramp settles and looks at the normal pace again.
        _ = ramp.decide(now: .milliseconds(110), bytes: 4_000_000, connections: 2, flowing: 2, canAdd: true)
        #expect(ramp.isSettled)
        #expect(!ramp.isMeasuring)
    }

    @Test func begunWithTheFirstBytesItMeasuresFromHalfAWindowLater() {
        var ramp = ConnectionRamp(maximum: 2, window: .milliseconds(100))
        ramp.begin(now: .milliseconds(1000))
        // Looked at often at once, so the first window starts when it should, not at the next tick at the normal pace.
        #expect(ramp.isMeasuring)
        // The server's first burst (2 MB at once) lands before the window: counted, it would double the baseline (a
        // window from 1000 would be full at 1100 and show 40 MB/s).
        for (time, bytes) in [(1000, 0), (1001, 2_000_000), (1020, 2_000_000), (1049, 2_000_000)] {
            let action = ramp.decide(
                now: .milliseconds(time), bytes: Int64(bytes), connections: 1, flowing: 1, canAdd: true)
            #expect(action == .hold)
        }
        // The window runs from 1050 to 1150: one burst of 2 MB in it, the real 20 MB/s.
        #expect(
            ramp.decide(now: .milliseconds(1050), bytes: 2_000_000, connections: 1, flowing: 1, canAdd: true) == .hold)
        #expect(
            ramp.decide(now: .milliseconds(1100), bytes: 4_000_000, connections: 1, flowing: 1, canAdd: true) == .hold)
        #expect(
            ramp.decide(now: .milliseconds(1150), bytes: 4_000_000, connections: 1, flowing: 1, canAdd: true) == .add)
        // The second connection brings its own first burst and the rate rises past the baseline's 1.5 times: judged
        // at once, and at the maximum the ramp settles.
        _ = ramp.decide(now: .milliseconds(1152), bytes: 6_000_000, connections: 2, flowing: 2, canAdd: true)
        #expect(ramp.isSettled)
        #expect(!ramp.isMeasuring)
    }

    @Test func beginIsForARampNotYetDeciding() {
        // Begun after its first decision, it keeps its window; with one connection allowed it never measures.
        var deciding = ConnectionRamp(maximum: 2, window: .milliseconds(100))
        _ = deciding.decide(now: .milliseconds(5), bytes: 0, connections: 1, flowing: 1, canAdd: true)
        deciding.begin(now: .milliseconds(50))
        #expect(
            deciding.decide(now: .milliseconds(105), bytes: 2_000_000, connections: 1, flowing: 1, canAdd: true) == .add
        )
        var single = ConnectionRamp(maximum: 1, window: .milliseconds(100))
        single.begin(now: .zero)
        #expect(!single.isMeasuring)
    }

    @Test func nothingToSplitMeansNoNewConnection() {
        let result = Self.simulate(perConnection: 1_000_000, link: 100_000_000, maximum: 8, canAdd: false)
        #expect(result.connections == 1)
        #expect(result.actions.isEmpty)
    }

    @Test func anOverloadedServerLowersTheMaximumForGood() {
        var ramp = ConnectionRamp(maximum: 8, window: .milliseconds(100))
        ramp.serverOverloaded(connections: 4)
        #expect(ramp.maximum == 3)
        #expect(ramp.isSettled)
        let result = Self.simulate(perConnection: 1_000_000, link: 100_000_000, maximum: 8, seconds: 5, ramp: ramp)
        #expect(result.actions.isEmpty)
    }

    @Test func aSettledRampTriesAgainLater() {
        // One connection fills the link, so the ramp settles on one; it tries a second one again after
        // `reprobeAfter` windows, and closes it again.
        let result = Self.simulate(perConnection: 10_000_000, link: 10_000_000, maximum: 8, seconds: 6)
        #expect(result.connections == 1)
        #expect(result.actions.filter { $0 == .add }.count >= 2)
        let dropped = result.actions.reduce(0) { total, action in
            if case .drop(let count) = action { return total + count }
            return total
        }
        #expect(result.actions.filter { $0 == .add }.count == dropped)
    }

    @Test func retriesSoonThenLessOften() {
        // One connection fills the link: every retry fails. The waits after a failure, from the drop to the next
        // addition (the settled wait plus one window of measuring), double from three windows up to twenty.
        let result = Self.simulate(perConnection: 10_000_000, link: 10_000_000, maximum: 8, seconds: 12)
        let drops = zip(result.actions, result.times).filter { $0.0 == .drop(1) }.map(\.1)
        let adds = zip(result.actions, result.times).filter { $0.0 == .add }.map(\.1)
        let waits = zip(drops, adds.dropFirst()).map { ($1 - $0) / .milliseconds(100) }
        #expect(waits.count >= 5)
        let expected: [Double] = [4, 7, 13, 21, 21]
        for (wait, windows) in zip(waits, expected) {
            #expect(abs(wait - windows) <= 0.11)
        }
    }

    @Test func aMisjudgedFirstAdditionIsRetriedSoon() {
        // Capped connections, but a burst lands just as the first window closes, so the first baseline is twice the
        // real rate and the second connection seems not to help. The ramp retries after three windows and reaches
        // the maximum within one and a half seconds; waiting twenty windows, it would still be on one connection.
        let burst: [Duration: Double] = [.milliseconds(110): 100_000]
        let result = Self.simulate(
            perConnection: 1_000_000, link: 100_000_000, maximum: 8, seconds: 1.5, extra: burst)
        #expect(result.actions.prefix(2) == [.add, .drop(1)])
        #expect(result.connections == 8)
        let patient = Self.simulate(
            perConnection: 1_000_000, link: 100_000_000, maximum: 8, seconds: 1.5,
            ramp: ConnectionRamp(maximum: 8, window: .milliseconds(100), firstReprobeAfter: 20), extra: burst)
        #expect(patient.actions == [.add, .drop(1)])
        #expect(patient.connections == 1)
    }

    @Test func waitsForTheNewConnectionToReceiveBytes() {
        var ramp = ConnectionRamp(maximum: 4, window: .milliseconds(100))
        var bytes: Int64 = 0
        var now = Duration.zero
        var action = ConnectionRamp.Action.hold
        while action != .add {
            now += .milliseconds(10)
            bytes += 10_000
            action = ramp.decide(now: now, bytes: bytes, connections: 1, flowing: 1, canAdd: true)
        }
        // The new connection is slow to answer: however long it takes, it is not judged yet.
        for _ in 0..<100 {
            now += .milliseconds(10)
            bytes += 10_000
            #expect(ramp.decide(now: now, bytes: bytes, connections: 2, flowing: 1, canAdd: true) == .hold)
        }
        #expect(!ramp.isSettled)
    }
}
