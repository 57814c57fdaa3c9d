import HaulCore
import Testing

@Suite("Speed history")
struct SpeedHistoryTests {
    @Test("samples line up with the total: a download's track starts at its first second, gaps count 0")
    func alignment() {
        var history = SpeedHistory(capacity: 10)
        history.record(total: 0, running: [:])
        history.record(total: 5, running: ["a": 5])
        history.record(total: 9, running: ["a": 4, "b": 5])
        history.record(total: 5, running: ["b": 5])
        history.record(total: 7, running: ["a": 2, "b": 5])
        #expect(history.total == [0, 5, 9, 5, 7])
        #expect(history.tracks["a"] == SpeedHistory.Track(offset: 1, samples: [5, 4, 0, 2]))
        #expect(history.tracks["b"] == SpeedHistory.Track(offset: 2, samples: [5, 5, 5]))
        #expect(history.tracks(of: "b").keys.sorted() == ["b"])
        #expect(history.tracks(of: "c").isEmpty)
    }

    @Test("only the last `capacity` seconds stay; tracks are cut with them and vanish when wholly older")
    func window() {
        var history = SpeedHistory(capacity: 3)
        history.record(total: 1, running: ["old": 1])
        history.record(total: 2, running: ["old": 2, "long": 2])
        for second in 3...5 { history.record(total: Double(second), running: ["long": Double(second)]) }
        #expect(history.total == [3, 4, 5])
        #expect(history.tracks["old"] == nil, "its last second is older than the window")
        #expect(history.tracks["long"] == SpeedHistory.Track(offset: 0, samples: [3, 4, 5]))
        history.record(total: 0, running: ["new": 0])
        #expect(history.total == [4, 5, 0])
        #expect(history.tracks["new"] == SpeedHistory.Track(offset: 2, samples: [0]))
        #expect(history.tracks["long"] == SpeedHistory.Track(offset: 0, samples: [4, 5]))
    }

    @Test("ten minutes of a thousand short downloads stay bounded by the window")
    func bounded() {
        var history = SpeedHistory(capacity: 600)
        for second in 0..<1_800 { history.record(total: 1, running: ["d\(second)": 1]) }
        #expect(history.total.count == 600)
        #expect(history.tracks.count == 600)
        #expect(history.tracks.values.allSatisfy { $0.samples.count == 1 && $0.offset < 600 })
    }
}
