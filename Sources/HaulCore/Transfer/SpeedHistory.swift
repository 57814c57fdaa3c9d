/// The last `capacity` seconds of speed, one sample a second: in total, and for each download that ran in that time
/// (from its first running second to its last; seconds between when it did not run count 0). Kept by the daemon so
/// that the web page's graphs survive a reload. A value: the manager records one sample a second and copies it out.
public struct SpeedHistory: Sendable, Equatable {
    /// One download's samples: `samples[0]` is the second at `offset` in `total`.
    public struct Track: Sendable, Equatable {
        public var offset: Int
        public var samples: [Double]

        public init(offset: Int, samples: [Double]) {
            self.offset = offset
            self.samples = samples
        }
    }

    /// How many seconds are kept.
    public let capacity: Int
    /// Bytes a second in total, oldest first; the last is the newest second.
    public private(set) var total: [Double] = []
    /// The downloads that ran within the window, by id.
    public private(set) var tracks: [String: Track] = [:]

    public init(capacity: Int) {
        precondition(capacity > 0)
        self.capacity = capacity
    }

    /// Records one second: the total speed and the speed of each running download.
    public mutating func record(total speed: Double, running: [String: Double]) {
        total.append(speed)
        let now = total.count - 1
        for (id, value) in running {
            if var track = tracks[id] {
                // Seconds since its last sample when it did not run.
                let next = track.offset + track.samples.count
                if next < now { track.samples.append(contentsOf: repeatElement(0, count: now - next)) }
                track.samples.append(value)
                tracks[id] = track
            } else {
                tracks[id] = Track(offset: now, samples: [value])
            }
        }
        if total.count > capacity { dropOldest(total.count - capacity) }
    }

    /// The track of `id`, or every track.
    public func tracks(of id: String?) -> [String: Track] {
        guard let id else { return tracks }
        return tracks[id].map { [id: $0] } ?? [:]
    }

    private mutating func dropOldest(_ count: Int) {
        total.removeFirst(count)
        for (id, var track) in tracks {
            track.offset -= count
            if track.offset < 0 {
                let gone = min(-track.offset, track.samples.count)
                track.samples.removeFirst(gone)
                track.offset = 0
            }
            tracks[id] = track.samples.isEmpty ? nil : track
        }
    }
}
