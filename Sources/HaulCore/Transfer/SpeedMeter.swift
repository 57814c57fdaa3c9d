/// Speed over a sliding window and the time left, from samples whose times the caller supplies.
public struct SpeedMeter: Sendable {
    private var samples: [(time: Duration, bytes: Int64)] = []
    /// How far back the average looks.
    public var window: Duration

    /// A meter averaging over `window`.
    public init(window: Duration = .seconds(5)) { self.window = window }

    /// Records that `bytes` had been received in total at `time`.
    public mutating func record(bytes: Int64, at time: Duration) {
        samples.append((time, bytes))
        while samples.count > 2, let first = samples.first, time - first.time > window { samples.removeFirst() }
    }

    /// Bytes per second over the window; 0 until two samples exist.
    public var bytesPerSecond: Double {
        guard let first = samples.first, let last = samples.last, last.time > first.time else { return 0 }
        let seconds =
            Double((last.time - first.time).components.seconds)
            + Double((last.time - first.time).components.attoseconds) / 1e18
        return Double(last.bytes - first.bytes) / seconds
    }

    /// Seconds until `total` at the current speed, nil when unknown.
    public func secondsRemaining(total: Int64?) -> Double? {
        guard let total, let last = samples.last, bytesPerSecond > 0 else { return nil }
        return Double(max(0, total - last.bytes)) / bytesPerSecond
    }
}
