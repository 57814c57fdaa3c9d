/// Decides how many connections one download uses, from the throughput it measures: begin with one, add one at a time
/// while each addition makes the download faster, stop (and give back the last one) when it does not, and drop one
/// when the server says it is overloaded (429 or 503).
///
/// An addition counts as making the download faster when, over a window that starts once the new connection is
/// receiving bytes, the total rate beats the rate before the addition by at least half of one connection's average
/// share (`1 + gain / connections`). A window that falls short is measured once more, twice as long, before the
/// ramp settles, so one unlucky window does not stop it.
public struct ConnectionRamp: Hashable, Sendable {
    /// What to do now.
    public enum Action: Hashable, Sendable {
        /// Open one more connection.
        case add
        /// Keep the connections as they are.
        case hold
        /// Close the newest connection; the ramp has settled.
        case drop
    }

    private enum Phase: Hashable, Sendable {
        /// Measuring the connections there are, since `since` when `bytes` were fetched.
        case measuring(since: Duration, bytes: Int64)
        /// A connection was added; waiting until `connections` receive bytes to start its window.
        case waitingForNewConnection(baseline: Double, connections: Int)
        /// Measuring the window after an addition.
        case judging(baseline: Double, connections: Int, since: Duration, bytes: Int64, isSecondTry: Bool)
        /// Done adding.
        case settled
    }

    /// The most connections to use.
    public private(set) var maximum: Int
    /// The length of one measurement.
    public let window: Duration
    /// The share of one connection's average rate an addition must add.
    public let gain: Double
    private var phase: Phase?

    /// A ramp up to `maximum` connections measuring over `window`.
    public init(maximum: Int, window: Duration, gain: Double = 0.5) {
        self.maximum = max(1, maximum)
        self.window = window
        self.gain = gain
    }

    /// Whether the ramp has stopped adding.
    public var isSettled: Bool { phase == .settled || maximum <= 1 }

    /// The decision at time `now`, with `bytes` fetched so far by all connections, `connections` open, `flowing` of
    /// them receiving bytes, and whether the segment map has work for another connection.
    public mutating func decide(now: Duration, bytes: Int64, connections: Int, flowing: Int, canAdd: Bool) -> Action {
        guard let current = phase else {
            phase = .measuring(since: now, bytes: bytes)
            return .hold
        }
        switch current {
        case .settled:
            return .hold
        case .measuring(let since, let start):
            if flowing < connections {
                // A window counts only while every connection receives bytes.
                phase = .measuring(since: now, bytes: bytes)
                return .hold
            }
            guard now - since >= window else { return .hold }
            let rate = Self.rate(bytes - start, over: now - since)
            return addIfPossible(baseline: rate, connections: connections, canAdd: canAdd, now: now, bytes: bytes)
        case .waitingForNewConnection(let baseline, let expected):
            if connections < expected {
                // The new connection is gone already (its segment ended or it failed): measure afresh.
                phase = .measuring(since: now, bytes: bytes)
                return .hold
            }
            guard flowing >= expected else { return .hold }
            phase = .judging(baseline: baseline, connections: expected, since: now, bytes: bytes, isSecondTry: false)
            return .hold
        case .judging(let baseline, let expected, let since, let start, let isSecondTry):
            let length = isSecondTry ? window * 2 : window
            guard now - since >= length else { return .hold }
            let rate = Self.rate(bytes - start, over: now - since)
            let before = Double(max(1, expected - 1))
            if rate >= baseline * (1 + gain / before) {
                return addIfPossible(baseline: rate, connections: connections, canAdd: canAdd, now: now, bytes: bytes)
            }
            if !isSecondTry {
                phase = .judging(baseline: baseline, connections: expected, since: now, bytes: bytes, isSecondTry: true)
                return .hold
            }
            phase = .settled
            return connections > 1 ? .drop : .hold
        }
    }

    /// The server answered 429 or 503 on one connection: settle, and allow one connection fewer than `connections`.
    public mutating func serverOverloaded(connections: Int) {
        phase = .settled
        maximum = max(1, min(maximum, connections - 1))
    }

    private mutating func addIfPossible(baseline: Double, connections: Int, canAdd: Bool, now: Duration, bytes: Int64)
        -> Action
    {
        guard connections < maximum else {
            phase = .settled
            return .hold
        }
        guard canAdd else {
            // Nothing to split now; look again after another window.
            phase = .measuring(since: now, bytes: bytes)
            return .hold
        }
        phase = .waitingForNewConnection(baseline: baseline, connections: connections + 1)
        return .add
    }

    private static func rate(_ bytes: Int64, over duration: Duration) -> Double {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        return seconds > 0 ? Double(bytes) / seconds : 0
    }
}
