import Foundation
import Haul
import HaulCore
import HaulWire
import Metrics
import Prometheus
import Synchronization

/// The daemon's Prometheus metrics: bytes received, downloads by state, open connections, retries and failures by
/// error code, restarts. Counters follow the engine's events (`observe`); the gauges are read from the manager when scraped.
public final class DaemonMetrics: Sendable {
    private let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    private let received: Metrics.Counter
    private let restarts: Metrics.Counter
    private let connections: Metrics.Gauge
    private let states: [DownloadState: Metrics.Gauge]
    /// The bytes each running download had at its last event, to count only what arrives after.
    private let lastBytes = Mutex<[DownloadID: Int64]>([:])
    private let byCode = Mutex<[String: Metrics.Counter]>([:])

    /// Makes the metrics with their own registry (nothing global is bootstrapped, so tests can make many).
    public init() {
        factory = PrometheusMetricsFactory(registry: registry)
        received = Metrics.Counter(label: "haul_received_bytes_total", factory: factory)
        restarts = Metrics.Counter(label: "haul_restarts_total", factory: factory)
        connections = Metrics.Gauge(label: "haul_connections_open", factory: factory)
        var states: [DownloadState: Metrics.Gauge] = [:]
        for state in DownloadState.allCases {
            states[state] = Metrics.Gauge(
                label: "haul_downloads", dimensions: [("state", state.rawValue)], factory: factory)
        }
        self.states = states
    }

    /// Counts what `events` report until they end.
    public func observe(_ events: DownloadEvents) async {
        for await event in events { record(event) }
    }

    /// Whether `record` counts anything for `event`: not for a new download that waits (its id has run nowhere
    /// yet), nor for snapshots, stats and settings. The stream that `observe` reads carries only these, so a batch
    /// of 10,000 adds does not queue 10,000 downloads for the metrics.
    public static func counts(_ kind: DownloadEvent.Kind) -> Bool {
        switch kind.name {
        case .added: kind.state != .queued && kind.state != .paused
        case .snapshot, .stats, .settings: false
        default: true
        }
    }

    func record(_ event: DownloadEvent) {
        switch event {
        case .progress(let progress):
            let delta = lastBytes.withLock { last -> Int64 in
                defer { last[progress.id] = progress.receivedBytes }
                guard let before = last[progress.id] else { return 0 }
                return max(0, progress.receivedBytes - before)
            }
            if delta > 0 { received.increment(by: delta) }
        case .changed(let download), .added(let download):
            let delta = lastBytes.withLock { last -> Int64 in
                if download.state == .running {
                    // A run starts from what is held: only bytes beyond it are received in this run.
                    if last[download.id] == nil { last[download.id] = download.receivedBytes }
                    return 0
                }
                // A run that ended: what arrived after its last progress event counts too.
                guard let before = last.removeValue(forKey: download.id) else { return 0 }
                return max(0, download.receivedBytes - before)
            }
            if delta > 0 { received.increment(by: delta) }
            if download.state == .failed {
                counter("haul_failures_total", code: download.error?.code.description ?? "unknown").increment()
            }
        case .retrying(_, let error, _):
            counter("haul_retries_total", code: error.code.description).increment()
        case .restarted:
            restarts.increment()
        case .removed(let id):
            _ = lastBytes.withLock { $0.removeValue(forKey: id) }
        case .snapshot, .stats, .settings:
            break
        }
    }

    private func counter(_ name: String, code: String) -> Metrics.Counter {
        byCode.withLock { counters in
            let key = name + "\u{0}" + code
            if let counter = counters[key] { return counter }
            let counter = Metrics.Counter(label: name, dimensions: [("code", code)], factory: factory)
            counters[key] = counter
            return counter
        }
    }

    /// The Prometheus text, with the gauges read from `manager` now.
    public func render(manager: DownloadManager) async -> String {
        let stats = await manager.stats()
        for (state, gauge) in states { gauge.record(stats.counts[state] ?? 0) }
        let running = await manager.snapshots(in: [.running, .waitingForNetwork], after: nil, limit: nil)
        connections.record(running.downloads.reduce(0) { $0 + $1.connections })
        return exposition()
    }

    /// The Prometheus text of what is recorded now.
    func exposition() -> String { registry.emitToString() }
}
