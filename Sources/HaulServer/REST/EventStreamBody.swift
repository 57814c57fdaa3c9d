import Foundation
import Haul
import HaulAPI
import HaulWire
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
        /// The most events in one write, after the first.
        static let cap = 255
        /// How long a write waits for more events (see `next()`).
        static let gathering = Duration.milliseconds(20)

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
            switch delivery {
            case nil:
                self.events = events
                return nil
            case .heartbeat:
                self.events = events
                return ArraySlice(": keep-alive\n\n".utf8)
            case .event(let event):
                // The events queued behind it go in the same write, at most 256 in all (so a write stays under about
                // 200 KB). When fewer are queued, the write waits `gathering` for more: while many downloads run,
                // events come every few hundred microseconds, and each write is a wake-up of the reader. 20 ms is
                // nothing to someone watching (a progress bar redraws every 100 ms). When no download is queued or
                // running any more, nothing more is
                // coming: the event (the last download's completion, which `watch --until-done` waits for) goes at
                // once.
                var chunk = try frame(event)
                var more = events.queued(upTo: Self.cap)
                if more.count < Self.cap, subscription.isBusy {
                    try? await Task.sleep(for: Self.gathering)
                    more += events.queued(upTo: Self.cap - more.count)
                }
                for event in more { chunk.append(contentsOf: try frame(event)) }
                self.events = events
                return ArraySlice(chunk)
            }
        }

        /// One event as its SSE lines.
        private func frame(_ sequenced: SequencedEvent) throws -> [UInt8] {
            var frame = Array("id: \(sequenced.id)\nevent: ".utf8)
            func named(_ name: String) {
                frame.append(contentsOf: name.utf8)
                frame.append(contentsOf: "\ndata: ".utf8)
            }
            // JSON holds no raw line breaks (they are escaped in strings), so the data is one line.
            switch sequenced.event {
            case .snapshot(let snapshot):
                named("snapshot")
                frame.append(contentsOf: "{\"downloads\":[".utf8)
                for (index, download) in snapshot.downloads.enumerated() {
                    if index > 0 { frame.append(UInt8(ascii: ",")) }
                    DownloadJSON.append(Components.Schemas.Download(download), to: &frame)
                }
                frame.append(contentsOf: "],\"stats\":".utf8)
                frame.append(contentsOf: try encoder.encode(Components.Schemas.Stats(snapshot.stats)))
                frame.append(contentsOf: ",\"settings\":".utf8)
                frame.append(
                    contentsOf: try encoder.encode(
                        Components.Schemas.Settings(snapshot.settings, configuration: configuration)))
                frame.append(UInt8(ascii: "}"))
            case .added(let download):
                named("added")
                DownloadJSON.append(Components.Schemas.Download(download), to: &frame)
            case .changed(let download):
                named("changed")
                DownloadJSON.append(Components.Schemas.Download(download), to: &frame)
            case .progress(let progress):
                named("progress")
                DownloadJSON.append(Components.Schemas.Progress(progress), to: &frame)
            case .retrying(let id, let error, let delay):
                named("retrying")
                let seconds = Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18
                frame.append(
                    contentsOf: try encoder.encode(
                        Components.Schemas.Retrying(id: id.rawValue, error: .init(error), delaySeconds: seconds)))
            case .restarted(let id, let reason):
                named("restarted")
                frame.append(
                    contentsOf: try encoder.encode(Components.Schemas.Restarted(id: id.rawValue, reason: reason)))
            case .removed(let id):
                named("removed")
                frame.append(contentsOf: try encoder.encode(Components.Schemas.Removed(id: id.rawValue)))
            case .stats(let stats):
                named("stats")
                frame.append(contentsOf: try encoder.encode(Components.Schemas.Stats(stats)))
            case .settings(let settings):
                named("settings")
                frame.append(
                    contentsOf: try encoder.encode(Components.Schemas.Settings(settings, configuration: configuration)))
            }
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
