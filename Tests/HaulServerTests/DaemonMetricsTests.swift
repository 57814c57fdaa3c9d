import Foundation
import Haul
import HaulCore
import Testing

@testable import HaulServer

@Suite("The daemon's metrics")
struct DaemonMetricsTests {
    @Test(
        "the metrics' stream carries the events they count: not a new download that waits, nor snapshots and stats",
        arguments: [
            (DownloadEvent.added(Aria2RPCTests.snapshot(.queued)), false),
            (.added(Aria2RPCTests.snapshot(.paused)), false),
            (.added(Aria2RPCTests.snapshot(.failed)), true),
            (.added(Aria2RPCTests.snapshot(.running)), true),
            (.changed(Aria2RPCTests.snapshot(.queued)), true),
            (.changed(Aria2RPCTests.snapshot(.paused)), true),
            (.removed(DownloadID("a")), true),
            (.stats(DownloadStats(bytesPerSecond: 0, counts: [:])), false),
            (.settings(ManagerSettings()), false),
        ])
    func counted(event: DownloadEvent, counts: Bool) {
        #expect(DaemonMetrics.counts(event.kind) == counts)
    }

    @Test("a run that pauses counts the bytes that came after its last progress")
    func pausedRun() throws {
        let metrics = DaemonMetrics()
        for event in [
            DownloadEvent.changed(Aria2RPCTests.snapshot(.running, received: 100)),
            .progress(
                DownloadProgress(
                    id: Aria2RPCTests.snapshot(.running).id, receivedBytes: 400, totalBytes: nil,
                    bytesPerSecond: 0)),
            .changed(Aria2RPCTests.snapshot(.paused, received: 700)),
        ] where DaemonMetrics.counts(event.kind) {
            metrics.record(event)
        }
        let text = metrics.exposition()
        #expect(text.contains("haul_received_bytes_total 600"), "\(text)")
    }
}
