import Foundation
import Haul
import HaulAPI
import ServiceLifecycle

/// A subscription written as Server-Sent Events: `id`, `event` and one JSON `data` line per event, a comment line
/// for each heartbeat. It ends when the subscription ends (the manager shut down, the reader fell too far behind)
/// or the daemon begins a graceful shutdown.
struct EventStreamBody: AsyncSequence, Sendable {
    typealias Element = ArraySlice<UInt8>

    let subscription: EventSubscription
    let configuration: DaemonConfiguration

    struct AsyncIterator: AsyncIteratorProtocol {
        var events: EventSubscription.AsyncIterator
        let subscription: EventSubscription
        let encoder: JSONEncoder
        let configuration: DaemonConfiguration
        var isStarted = false

        mutating func next() async throws -> ArraySlice<UInt8>? {
            if !isStarted {
                isStarted = true
                // Tell EventSource to reconnect after 1 s (its default is about 3 s).
                return ArraySlice("retry: 1000\n\n".utf8)
            }
            var events = self.events
            let subscription = self.subscription
            let delivery = await withGracefulShutdownHandler {
                await events.nextDelivery()
            } onGracefulShutdown: {
                subscription.cancel()
            }
            self.events = events
            switch delivery {
            case nil: return nil
            case .heartbeat: return ArraySlice(": keep-alive\n\n".utf8)
            case .event(let event): return ArraySlice(try frame(event))
            }
        }

        /// One event as its SSE lines.
        private func frame(_ sequenced: SequencedEvent) throws -> [UInt8] {
            let name: String
            let data: Data
            switch sequenced.event {
            case .snapshot(let snapshot):
                name = "snapshot"
                data = try encoder.encode(
                    Components.Schemas.EventSnapshot(
                        downloads: snapshot.downloads.map(Components.Schemas.Download.init),
                        stats: .init(snapshot.stats),
                        settings: .init(snapshot.settings, configuration: configuration)))
            case .added(let download):
                name = "added"
                data = try encoder.encode(Components.Schemas.Download(download))
            case .changed(let download):
                name = "changed"
                data = try encoder.encode(Components.Schemas.Download(download))
            case .progress(let progress):
                name = "progress"
                data = try encoder.encode(Components.Schemas.Progress(progress))
            case .retrying(let id, let error, let delay):
                name = "retrying"
                let seconds = Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18
                data = try encoder.encode(
                    Components.Schemas.Retrying(id: id.rawValue, error: .init(error), delaySeconds: seconds))
            case .removed(let id):
                name = "removed"
                data = try encoder.encode(Components.Schemas.Removed(id: id.rawValue))
            case .stats(let stats):
                name = "stats"
                data = try encoder.encode(Components.Schemas.Stats(stats))
            case .settings(let settings):
                name = "settings"
                data = try encoder.encode(Components.Schemas.Settings(settings, configuration: configuration))
            }
            // JSONEncoder writes no raw line breaks (they are escaped in strings), so the data is one line.
            var frame = Array("id: \(sequenced.id)\nevent: \(name)\ndata: ".utf8)
            frame.append(contentsOf: data)
            frame.append(contentsOf: "\n\n".utf8)
            return frame
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        return AsyncIterator(
            events: subscription.makeAsyncIterator(), subscription: subscription, encoder: encoder,
            configuration: configuration)
    }
}
