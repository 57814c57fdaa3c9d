import Foundation
import Haul
import HaulAPI
import HaulCore
import HaulWire

extension Aria2RPC {
    /// aria2's methods, with its parameter and result shapes (numbers as strings).
    func perform(_ method: String, _ params: Parameters) async throws(Fault) -> JSONValue {
        switch method {
        case "aria2.addUri": return try await addURI(params)
        case "aria2.addTorrent", "aria2.addMetalink", "aria2.getPeers":
            throw Fault("\(method) is not supported: Haul downloads over HTTP(S) and FTP, not BitTorrent or Metalink")
        case "aria2.changeUri":
            return try await changeURI(
                params.string(0), file: params.integer(1), deleting: params.strings(2), adding: params.strings(3),
                at: params.optionalInteger(4))
        case "aria2.remove", "aria2.forceRemove": return try await remove(params.string(0))
        case "aria2.pause", "aria2.forcePause": return try await pause(params.string(0))
        case "aria2.pauseAll", "aria2.forcePauseAll":
            await manager.pauseAll()
            return "OK"
        case "aria2.unpause": return try await unpause(params.string(0))
        case "aria2.unpauseAll":
            await manager.resumeAll()
            return "OK"
        case "aria2.tellStatus":
            return Aria2Status.status(of: try await snapshot(params.string(0)), keys: try params.strings(1))
        case "aria2.getUris": return Aria2Status.uris(of: try await snapshot(params.string(0)))
        case "aria2.getFiles": return [Aria2Status.file(of: try await snapshot(params.string(0)))]
        case "aria2.getServers": return try await servers(params.string(0))
        case "aria2.tellActive":
            return try await list([.running, .waitingForNetwork], offset: 0, count: .max, keys: params.strings(0))
        case "aria2.tellWaiting":
            return try await list(
                [.queued, .paused], offset: params.integer(0), count: params.integer(1), keys: params.strings(2))
        case "aria2.tellStopped":
            return try await list(
                [.completed, .failed, .cancelled], offset: params.integer(0), count: params.integer(1),
                keys: params.strings(2))
        case "aria2.changePosition":
            return .integer(Int64(try await changePosition(params.string(0), params.integer(1), params.string(2))))
        case "aria2.changeOption": return try await changeOption(params.string(0), params.object(1))
        case "aria2.getOption": return Aria2Status.options(of: try await snapshot(params.string(0)))
        case "aria2.changeGlobalOption": return try await changeGlobalOption(params.object(0))
        case "aria2.getGlobalOption": return await globalOptions()
        case "aria2.getGlobalStat": return await globalStat()
        case "aria2.purgeDownloadResult":
            do { _ = try await manager.clean() } catch { throw Fault(error.message) }
            return "OK"
        case "aria2.removeDownloadResult": return try await removeResult(params.string(0))
        case "aria2.getVersion":
            // The aria2 version whose protocol this is, so clients that check it enable what Haul answers.
            return [
                "version": "1.37.0", "haulVersion": .string(HaulVersion.current),
                "enabledFeatures": ["HTTPS", "FTP", "Message Digest", "Async DNS"],
            ]
        case "aria2.getSessionInfo": return ["sessionId": .string(sessionID)]
        case "aria2.saveSession":
            // Haul's store is written at every change: there is nothing left to save.
            return "OK"
        case "aria2.shutdown", "aria2.forceShutdown":
            await stopDaemon()
            return "OK"
        default: throw Fault("No such method: \(method)")
        }
    }

    private func addURI(_ params: Parameters) async throws(Fault) -> JSONValue {
        let uris = try params.strings(0)
        guard let uri = uris.first else { throw Fault("URI is not provided.") }
        let options = try params.object(1)
        var item: Components.Schemas.AddDownload
        do { item = try Aria2Options.addDownload(uri: uri, options: options) } catch { throw Fault(error.message) }
        // As in aria2, the URIs are one file's: the first is its URL, the others its mirrors (a URI repeated adds
        // nothing: each server's connections are its own `max-connection-per-server`).
        let mirrors = DownloadRules.distinctMirrors(Array(uris.dropFirst()), of: uri)
        if !mirrors.isEmpty { item.mirrors = mirrors }
        let position = try params.optionalInteger(2)
        let defaults = await manager.currentSettings()
        let request: DownloadRequest
        do { request = try handler.request(from: item, index: nil, defaults: defaults) } catch {
            throw Fault(Self.optionMessage(error))
        }
        let added: DownloadManager.Added
        do { added = try await manager.add([request])[0] } catch { throw Fault(error.error.message) }
        register([added.id])
        let gid = Aria2Status.gid(of: added.id)
        if let position { _ = try await changePosition(gid, position, "POS_SET") }
        return .string(gid)
    }

    /// The error of the request checks (`APIHandler.request(from:)`, which applies `DownloadRules`), with aria2's
    /// option name for the field it names.
    static func optionMessage(_ error: APIError) -> String {
        let names = [
            "directory": "dir", "filename": "out", "connections": "split", "minSplitSize": "min-split-size",
            "limitRate": "max-download-limit", "timeoutSeconds": "timeout", "userAgent": "user-agent",
            "headers": "header", "proxy": "all-proxy", "cookieFile": "load-cookies", "netrcFile": "netrc-path",
            "tls.caCertificates": "ca-certificate", "tls.clientCertificate": "certificate",
            "tls.clientKey": "private-key", "credentials.user": "http-user",
        ]
        guard let field = error.field, let problem = error.problem, let option = names[field] else {
            return error.message
        }
        return "option '\(option)': \(problem)"
    }

    private func remove(_ gid: String) async throws(Fault) -> JSONValue {
        let snapshot = try await snapshot(gid)
        guard !snapshot.state.isTerminal else { throw Fault("Active Download not found for GID#\(gid)") }
        do { try await manager.cancel(snapshot.id) } catch { throw Fault(error.message) }
        return .string(gid)
    }

    /// `aria2.changeUri`: the download's URIs are its URL and then its mirrors. The deletions come first (each URI
    /// of `deleting` removes one equal URI), then `adding` goes in at `at` (the end when absent). The first URI
    /// left is the download's URL: when it changed, the link is replaced and the bytes held are kept if it serves
    /// the same file (`DownloadManager.replaceURL`). Answers the counts deleted and added, as aria2 does.
    private func changeURI(_ gid: String, file: Int, deleting: [String], adding: [String], at position: Int?)
        async throws(Fault) -> JSONValue
    {
        let snapshot = try await snapshot(gid)
        guard file == 1 else { throw Fault("fileIndex is out of range: a Haul download has one file, index 1") }
        guard snapshot.state != .completed else { throw Fault("GID#\(gid) is complete: it has nothing left to fetch") }
        var uris = [snapshot.url] + snapshot.options.mirrors
        var deleted = 0
        for uri in deleting {
            guard let index = uris.firstIndex(of: uri) else { continue }
            uris.remove(at: index)
            deleted += 1
        }
        for uri in adding where (try? DownloadRules.checkURL(uri)) == nil {
            throw Fault("'\(uri)' is not an http, https or ftp URI")
        }
        let place = min(max(position ?? uris.count, 0), uris.count)
        uris.insert(contentsOf: adding, at: place)
        guard let first = uris.first, let url = URL(string: first) else {
            throw Fault("GID#\(gid) would have no URI left")
        }
        do {
            if first != snapshot.url {
                try await manager.replaceURL(url, mirrors: Array(uris.dropFirst()), for: snapshot.id)
            } else if Array(uris.dropFirst()) != snapshot.options.mirrors {
                try await manager.setMirrors(Array(uris.dropFirst()), for: snapshot.id)
            }
        } catch {
            throw Fault(error.message)
        }
        return [.integer(Int64(deleted)), .integer(Int64(adding.count))]
    }

    private func pause(_ gid: String) async throws(Fault) -> JSONValue {
        let snapshot = try await snapshot(gid)
        guard snapshot.state == .queued || snapshot.state.isActive else {
            throw Fault("GID#\(gid) cannot be paused now")
        }
        do { try await manager.pause(snapshot.id) } catch { throw Fault(error.message) }
        return .string(gid)
    }

    private func unpause(_ gid: String) async throws(Fault) -> JSONValue {
        let snapshot = try await snapshot(gid)
        guard snapshot.state == .paused else { throw Fault("GID#\(gid) cannot be unpaused now") }
        do { try await manager.resume(snapshot.id) } catch { throw Fault(error.message) }
        return .string(gid)
    }

    private func removeResult(_ gid: String) async throws(Fault) -> JSONValue {
        let snapshot = try await snapshot(gid)
        guard snapshot.state.isTerminal else { throw Fault("Could not remove download result of GID#\(gid)") }
        do { try await manager.remove(snapshot.id) } catch { throw Fault(error.message) }
        return "OK"
    }

    /// The connections of a running download, one entry each, the speed shared among them.
    private func servers(_ gid: String) async throws(Fault) -> JSONValue {
        let snapshot = try await snapshot(gid)
        guard snapshot.state == .running else { throw Fault("No active download for GID#\(gid)") }
        // One entry a connection, as aria2 lists them, each with its server's speed shared among its connections.
        var entries: [JSONValue] = []
        if let mirrors = snapshot.mirrors {
            for (url, mirror) in zip([snapshot.url] + snapshot.options.mirrors, mirrors) where mirror.connections > 0 {
                let speed = Int64(mirror.bytesPerSecond.rounded()) / Int64(mirror.connections)
                let server: JSONValue = [
                    "uri": .string(url), "currentUri": .string(url), "downloadSpeed": .string(String(speed)),
                ]
                entries += Array(repeating: server, count: mirror.connections)
            }
        }
        if entries.isEmpty {
            let count = max(1, snapshot.connections)
            let speed = Int64(snapshot.bytesPerSecond.rounded()) / Int64(count)
            let server: JSONValue = [
                "uri": .string(snapshot.url), "currentUri": .string(snapshot.url),
                "downloadSpeed": .string(String(speed)),
            ]
            entries = Array(repeating: server, count: count)
        }
        return [["index": "1", "servers": .array(entries)]]
    }

    /// The downloads in `states`, in queue order (stopped ones in the order they stopped), cut as aria2 cuts them.
    private func list(_ states: Set<DownloadState>, offset: Int, count: Int, keys: [String]) async throws(Fault)
        -> JSONValue
    {
        // From the start of the queue order, the first offset + count are all it needs (a worker of a fleet reads no
        // more than that); from the end, or in the order they stopped, all of them.
        let isPrefix = offset >= 0 && !states.contains(.completed)
        let (sum, overflow) = offset.addingReportingOverflow(count)
        let limit = isPrefix && !overflow ? max(0, sum) : nil
        var downloads = await manager.snapshots(in: states, after: nil, limit: limit).downloads
        if states.contains(.completed) {
            downloads.sort { ($0.completedAt ?? $0.createdAt) < ($1.completedAt ?? $1.createdAt) }
        }
        register(downloads.map(\.id))
        return .array(
            Self.window(downloads, offset: offset, count: count).map { Aria2Status.status(of: $0, keys: keys) })
    }

    /// aria2's `offset`/`num`: from `offset` on, at most `count`; a negative offset counts from the end and the
    /// answer runs backwards (-1 is the last one).
    static func window<Element>(_ items: [Element], offset: Int, count: Int) -> [Element] {
        guard count > 0, !items.isEmpty else { return [] }
        if offset >= 0 {
            guard offset < items.count else { return [] }
            return Array(items[offset..<offset + min(items.count - offset, count)])
        }
        let start = items.count + offset
        guard start >= 0 else { return [] }
        let end = max(0, start - min(count, items.count) + 1)
        return Array(items[end...start].reversed())
    }

    /// Where `aria2.changePosition` puts a download among `count` waiting ones: `POS_SET` from the start, `POS_CUR`
    /// from where it is, `POS_END` from the end; beyond either end, at that end.
    static func destination(current: Int, count: Int, position: Int, how: String) throws(Fault) -> Int {
        let target: Int
        switch how {
        case "POS_SET": target = position
        case "POS_CUR": target = current + position
        case "POS_END": target = count - 1 + position
        default: throw Fault("Illegal argument.")
        }
        return min(max(target, 0), count - 1)
    }

    private func changePosition(_ gid: String, _ position: Int, _ how: String) async throws(Fault) -> Int {
        let id = try await id(of: gid)
        let waiting = await manager.page(in: [.queued, .paused], after: nil, limit: nil).ids
        guard let current = waiting.firstIndex(of: id) else {
            throw Fault("GID#\(gid) not found in the waiting queue.")
        }
        let target = try Self.destination(current: current, count: waiting.count, position: position, how: how)
        guard target != current else { return target }
        var order = waiting
        order.remove(at: current)
        do {
            if target < order.count {
                try await manager.move(id, before: order[target])
            } else {
                let last = try await manager.snapshot(order[order.count - 1])
                try await manager.setPriority(last.priority, for: id)
                try await manager.move(id, to: .bottom)
            }
        } catch {
            throw Fault(error.message)
        }
        return target
    }

    private func changeOption(_ gid: String, _ options: [String: JSONValue]) async throws(Fault) -> JSONValue {
        let id = try await id(of: gid)
        let change: Aria2Options.Change
        do { change = try Aria2Options.change(options) } catch { throw Fault(error.message) }
        do {
            if let limit = change.rateLimit { try await manager.setRateLimit(limit, for: id) }
            if let connections = change.connections { try await manager.setConnections(connections, for: id) }
        } catch {
            throw Fault(error.message)
        }
        return "OK"
    }

    private func changeGlobalOption(_ options: [String: JSONValue]) async throws(Fault) -> JSONValue {
        let change: Aria2Options.GlobalChange
        do { change = try Aria2Options.globalChange(options) } catch { throw Fault(error.message) }
        var settings = await manager.currentSettings()
        if let jobs = change.maxConcurrentDownloads { settings.maxConcurrentDownloads = jobs }
        if let limit = change.rateLimit { settings.rateLimit = limit }
        if let connections = change.connections { settings.connectionsPerDownload = connections }
        do { try await manager.update(settings) } catch { throw Fault(error.message) }
        return "OK"
    }

    private func globalOptions() async -> JSONValue {
        let settings = await manager.currentSettings()
        let connections = JSONValue.string(String(settings.connectionsPerDownload))
        return [
            "dir": .string(configuration.downloadDirectory),
            "max-concurrent-downloads": .string(String(settings.maxConcurrentDownloads)),
            "max-overall-download-limit": .string(String(settings.rateLimit ?? 0)),
            "split": connections, "max-connection-per-server": connections,
            "min-split-size": .string(String(DownloadOptions.defaultMinimumSplitSize)),
            "max-download-limit": "0", "allow-overwrite": "false", "auto-file-renaming": "true", "continue": "true",
            "timeout": "30", "max-tries": "5", "check-certificate": "true",
        ]
    }

    private func globalStat() async -> JSONValue {
        let stats = await manager.stats()
        func count(_ states: DownloadState...) -> JSONValue {
            .string(String(states.reduce(0) { $0 + (stats.counts[$1] ?? 0) }))
        }
        let stopped = count(.completed, .failed, .cancelled)
        return [
            "downloadSpeed": .string(String(Int64(stats.bytesPerSecond.rounded()))), "uploadSpeed": "0",
            "numActive": count(.running, .waitingForNetwork), "numWaiting": count(.queued, .paused),
            "numStopped": stopped, "numStoppedTotal": stopped,
        ]
    }
}
