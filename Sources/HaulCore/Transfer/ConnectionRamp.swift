/// Decides how many connections one download uses, from the throughput it measures: begin with one, add one at a time
/// while each addition makes the download faster, stop (and close the last one) when it does not, and drop one when
/// the server says it is overloaded (429 or 503).
///
/// Throughput is the total rate over a sliding `window`. After a connection is added and receives bytes, the ramp
/// waits for that rate to beat the rate before the addition by `gain` of one connection's average share (half by
/// default); as soon as it does, the next connection is added, and judged against the rate the connections before it
/// should reach with every one of them at its average share. When it has not after two windows, the addition did
/// not help: the ramp settles and closes one connection. A settled ramp measures again later, since conditions change
/// and one unlucky measurement must not pin a download to one connection: a window caught at the wrong moment of a
/// server's bursts (nginx's `limit_rate` paces each connection in bursts, and a new connection's first burst comes at
/// once) can show twice the real rate, and the next connection then seems not to help. So the first retry comes after
/// `firstReprobeAfter` windows, and each failed retry in a row doubles the wait, up to `reprobeAfter` windows; an
/// addition that helps starts the count again. After a 429 or 503 it never adds again. Connections that each have
/// their own speed cap raise the rate within about half a window each, so the ramp reaches its maximum quickly; a
/// link that one connection already fills never shows the rise.
public struct ConnectionRamp: Hashable, Sendable {
    /// What to do now.
    public enum Action: Hashable, Sendable {
        /// Open one more connection.
        case add
        /// Keep the connections as they are.
        case hold
        /// Close this many connections; the ramp has settled.
        case drop(Int)
    }

    private enum Phase: Hashable, Sendable {
        /// Begun (`begin`): the first window starts at `measuringFrom`.
        case starting(measuringFrom: Duration)
        /// Measuring the connections there are, all receiving bytes since `since`.
        case measuring(since: Duration)
        /// A connection was added; waiting until `connections` receive bytes.
        case waitingForNewConnection(baseline: Double, connections: Int)
        /// Waiting for the rate to rise after an addition.
        case judging(baseline: Double, connections: Int, since: Duration)
        /// Done adding for now; after `windows` windows the ramp measures again (never after 429 or 503).
        case settled(since: Duration, windows: Int)
        /// Done adding for good (the server said it is overloaded).
        case stopped
    }

    private struct Sample: Hashable, Sendable {
        var time: Duration
        var bytes: Int64
    }

    /// The most connections to use.
    public private(set) var maximum: Int
    /// The length of the sliding measurement window.
    public let window: Duration
    /// The share of one connection's average rate an addition must add.
    public let gain: Double
    /// The most windows a settled ramp waits before it tries one more connection again.
    public let reprobeAfter: Int
    /// The windows a settled ramp waits before its first retry; doubled after each failed retry in a row.
    public let firstReprobeAfter: Int
    /// Failed additions in a row.
    private var failures = 0
    private var phase: Phase?
    private var samples: [Sample] = []

    /// A ramp up to `maximum` connections measuring over `window`.
    public init(maximum: Int, window: Duration, gain: Double = 0.5, firstReprobeAfter: Int = 3, reprobeAfter: Int = 20)
    {
        self.maximum = max(1, maximum)
        self.window = window
        self.gain = gain
        self.reprobeAfter = max(1, reprobeAfter)
        self.firstReprobeAfter = min(max(1, firstReprobeAfter), self.reprobeAfter)
    }

    /// Whether the ramp is measuring a window or judging an added connection: the time to look often, since it acts
    /// as soon as the window is full or the new connection shows its share. A ramp never begun (`begin`) says false
    /// until its first decision, whose time starts its first window.
    public var isMeasuring: Bool {
        switch phase {
        case .starting, .measuring, .waitingForNewConnection, .judging: maximum > 1
        default: false
        }
    }

    /// Whether the ramp has stopped adding.
    public var isSettled: Bool {
        switch phase {
        case .settled, .stopped: true
        default: maximum <= 1
        }
    }

    /// The first connection's body starts at `now`: the ramp asks to be looked at often from now on, and its first
    /// window starts half a window later. A server sends a new connection's first burst at once (nginx's `limit_rate`
    /// paces in bursts, the first one unpaced), and a window that began with the body would count it and show up to
    /// twice the real rate; half a window later, it has passed. The first look at the normal pace (the manager's
    /// tick) may come a whole window after the first bytes, and the second connection a window and a half.
    public mutating func begin(now: Duration) {
        guard phase == nil, maximum > 1 else { return }
        phase = .starting(measuringFrom: now + window / 2)
    }

    /// The decision at time `now`, with `bytes` fetched so far by all connections, `connections` open, `flowing` of
    /// them receiving bytes, and whether the segment map has work for another connection.
    public mutating func decide(now: Duration, bytes: Int64, connections: Int, flowing: Int, canAdd: Bool) -> Action {
        record(now: now, bytes: bytes)
        guard let current = phase else {
            phase = .measuring(since: now)
            return .hold
        }
        switch current {
        case .starting(let measuringFrom):
            if now >= measuringFrom { phase = .measuring(since: now) }
            return .hold
        case .stopped:
            return .hold
        case .settled(let since, let windows):
            if now - since >= window * windows, connections < maximum, canAdd {
                phase = .measuring(since: now)
            }
            return .hold
        case .measuring(let since):
            if flowing < connections {
                // The baseline counts only while every connection receives bytes.
                phase = .measuring(since: now)
                return .hold
            }
            guard now - since >= window, let rate = rate(at: now, over: window) else { return .hold }
            return addIfPossible(baseline: rate, connections: connections, canAdd: canAdd, now: now)
        case .waitingForNewConnection(let baseline, let expected):
            if connections < expected {
                // The new connection is gone already (its segment ended or it failed): measure afresh.
                phase = .measuring(since: now)
                return .hold
            }
            guard flowing >= expected else { return .hold }
            // Judged at once: a connection that arrives with a burst of bytes shows its share right away.
            phase = .judging(baseline: baseline, connections: expected, since: now)
            return judge(
                baseline: baseline, expected: expected, since: now, now: now, connections: connections, canAdd: canAdd)
        case .judging(let baseline, let expected, let since):
            return judge(
                baseline: baseline, expected: expected, since: since, now: now, connections: connections, canAdd: canAdd
            )
        }
    }

    private mutating func judge(
        baseline: Double, expected: Int, since: Duration, now: Duration, connections: Int, canAdd: Bool
    ) -> Action {
        let before = Double(max(1, expected - 1))
        if let rate = rate(at: now, over: window), rate >= baseline * (1 + gain / before) {
            // The sliding window lags behind the new connection's full share; assume it will add as much as the
            // others (or what the window shows, if more), so that the next addition is judged against it.
            let next = max(rate, baseline * Double(expected) / before)
            failures = 0
            return addIfPossible(baseline: next, connections: connections, canAdd: canAdd, now: now)
        }
        guard now - since >= window * 2 else { return .hold }
        failures += 1
        settle(now: now)
        return connections > 1 ? .drop(1) : .hold
    }

    /// The server answered 429 or 503 on one connection: settle, and allow one connection fewer than `connections`.
    public mutating func serverOverloaded(connections: Int) {
        phase = .stopped
        maximum = max(1, min(maximum, connections - 1))
    }

    private mutating func addIfPossible(baseline: Double, connections: Int, canAdd: Bool, now: Duration) -> Action {
        guard connections < maximum else {
            settle(now: now)
            return .hold
        }
        guard canAdd else {
            // Nothing to split now; look again after another window.
            phase = .measuring(since: now)
            return .hold
        }
        phase = .waitingForNewConnection(baseline: baseline, connections: connections + 1)
        return .add
    }

    /// Stops adding until the wait for the failures so far has passed.
    private mutating func settle(now: Duration) {
        let doublings = max(0, failures - 1)
        let windows = doublings >= 8 ? reprobeAfter : min(reprobeAfter, firstReprobeAfter << doublings)
        phase = .settled(since: now, windows: windows)
    }

    private mutating func record(now: Duration, bytes: Int64) {
        samples.append(Sample(time: now, bytes: bytes))
        // Keep one sample at or before the window's start, and nothing older.
        while samples.count > 2, now - samples[1].time >= window { samples.removeFirst() }
    }

    /// The rate over the `length` ending at `now`, nil before that much time has samples.
    private func rate(at now: Duration, over length: Duration) -> Double? {
        guard let last = samples.last, let first = samples.last(where: { now - $0.time >= length }) else { return nil }
        let elapsed = last.time - first.time
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return seconds > 0 ? Double(last.bytes - first.bytes) / seconds : nil
    }
}
