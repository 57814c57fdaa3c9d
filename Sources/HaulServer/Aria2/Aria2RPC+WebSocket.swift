import Foundation
import Haul
import HaulCore
import HaulWire
import HummingbirdWebSocket

extension Aria2RPC {
    /// The largest call a WebSocket message may carry, as the HTTP body limit.
    static let messageLimit = 8 << 20

    /// One WebSocket connection at `GET /jsonrpc`: each text message is a call (or a batch) answered on the same
    /// socket, and aria2's notifications go out as downloads start, pause, stop, complete and fail, in the order the
    /// manager reports them. Notifications need no token, as in aria2: they carry gids only.
    func serve(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        let subscription = await manager.subscribe()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await self.notify(from: subscription, to: outbound) }
            defer {
                subscription.cancel()
                group.cancelAll()
            }
            for try await message in inbound.messages(maxSize: Self.messageLimit) {
                let body: Data
                switch message {
                case .text(let text): body = Data(text.utf8)
                case .binary(let buffer): body = Data(buffer.readableBytesView)
                }
                let answer = await respond(to: body)
                try await outbound.write(.text(String(decoding: answer.body, as: UTF8.self)))
            }
        }
    }

    /// Sends a notification for each change of a download's aria2 status; ends when the subscription does (the
    /// client stopped reading for long enough that the manager dropped it, or the daemon stops).
    private func notify(from subscription: EventSubscription, to outbound: WebSocketOutboundWriter) async throws {
        var states: [DownloadID: DownloadState] = [:]
        for await sequenced in subscription {
            switch sequenced.event {
            case .snapshot(let snapshot):
                for download in snapshot.downloads { states[download.id] = download.state }
            case .added(let download):
                states[download.id] = download.state
            case .changed(let download):
                let old = states.updateValue(download.state, forKey: download.id)
                guard let method = Aria2Status.notification(from: old, to: download.state) else { continue }
                register([download.id])
                let gid = Aria2Status.gid(of: download.id)
                let notification: JSONValue = [
                    "jsonrpc": "2.0", "method": .string(method), "params": [["gid": .string(gid)]],
                ]
                try await outbound.write(.text(String(decoding: Self.encode(notification), as: UTF8.self)))
            case .removed(let id):
                states[id] = nil
            default:
                continue
            }
        }
        try await outbound.close(.goingAway, reason: "the daemon stopped sending events")
    }
}
