import Foundation
import HTTPTypes
import Haul
import HaulAPI
import HaulCore
import HaulWire
import NIOCore
import NIOFoundationCompat
import OpenAPIRuntime
import ServiceLifecycle

/// The API's operations, implemented on a `DownloadManager`. One handler per door: what a request may do depends on
/// whether it came over the network or through the local socket.
public struct APIHandler: APIProtocol {
    let manager: DownloadManager
    let configuration: DaemonConfiguration
    let door: Door
    let policy: FolderPolicy

    /// A handler for requests that came in through `door`.
    public init(manager: DownloadManager, configuration: DaemonConfiguration, door: Door) {
        self.manager = manager
        self.configuration = configuration
        self.door = door
        policy = FolderPolicy(configuration, allowed: manager.allowedFolders)
    }

    // MARK: Downloads

    /// The page of downloads a list asks for: the query checked, the downloads chosen. The operation's one
    /// implementation: `APIWire` writes the page in chunks as it fetches it, `listDownloads` as the generated type.
    func downloadsPage(states: [Components.Schemas.State]?, limit: Int?, cursor text: String?)
        async throws(APIError) -> (ids: [DownloadID], nextCursor: String?)
    {
        if let states, states.isEmpty {
            throw APIError.invalidField("state", "is empty; leave the parameter out for every state")
        }
        var cursor: DownloadManager.QueueCursor?
        if let text {
            guard let parsed = DownloadManager.QueueCursor(text: text) else {
                throw APIError.invalidField("cursor", "'\(text)' is not a cursor this API gave")
            }
            cursor = parsed
        }
        if let limit {
            try APIError.checking("limit") { () throws(DownloadRules.RuleViolation) in
                try DownloadRules.checkPageSize(limit)
            }
        }
        let page = await manager.page(in: states.map { Set($0.map(\.engine)) }, after: cursor, limit: limit)
        return (page.ids, page.next?.text)
    }

    /// `downloadsPage` as the generated type, every download of the page in memory (the daemon's router serves the
    /// operation through `APIWire`, which writes them as it fetches them).
    public func listDownloads(_ input: Operations.ListDownloads.Input) async throws -> Operations.ListDownloads.Output {
        let page = try await downloadsPage(
            states: input.query.state, limit: input.query.limit, cursor: input.query.cursor)
        let downloads = await manager.snapshots(ofExisting: page.ids).map(Components.Schemas.Download.init)
        return .ok(.init(body: .json(.init(downloads: downloads, nextCursor: page.nextCursor))))
    }

    /// What an add did.
    enum AddOutcome: Sendable {
        /// One download, new or found, as it is now.
        case one(DownloadManager.Added, DownloadSnapshot)
        /// A list's downloads, in its order.
        case list([DownloadID])
    }

    /// Adding one download or a list: every item checked, then all added in one transaction, and returned once the
    /// store has them (a 201 means stored). The operation's one implementation: `APIWire` and `addDownloads` write
    /// its outcome, each with its codec.
    /// `nulls` are the fields the body sent as `null`, which no field of an add may be.
    func add(_ payload: consuming Operations.AddDownloads.Input.Body.JsonPayload, nulls: [NullField] = [])
        async throws(APIError) -> AddOutcome
    {
        try Self.reject(nulls)
        let defaults = manager.settingsNow
        switch consume payload {
        case .AddDownload(let item):
            let request = try request(from: item, index: nil, defaults: defaults)
            let added: (added: DownloadManager.Added, download: DownloadSnapshot, commit: DownloadStore.Commit)
            do {
                added = try await manager.addOneDeferringCommit(request)
                try await manager.committed(added.commit, rollingBack: [added.added])
            } catch {
                throw APIError(error)
            }
            return .one(added.added, added.download)
        case .case2(var items):
            var requests: [DownloadRequest] = []
            requests.reserveCapacity(items.count)
            for (index, item) in items.enumerated() {
                var request = try request(from: item, index: index, defaults: defaults)
                // Items added alike share one copy of their options, as the manager's records do.
                if let previous = requests.last {
                    request.options = request.options.sharingStorage(with: previous.options)
                }
                requests.append(request)
            }
            // The parsed items are not needed any more: freed before the manager makes the records.
            items = []
            let added: [DownloadManager.Added]
            let commit: DownloadStore.Commit
            do { (added, commit) = try await manager.addDeferringCommit(requests) } catch {
                throw APIError(error.error, index: error.index)
            }
            do { try await manager.committed(commit, rollingBack: added) } catch { throw APIError(error) }
            return .list(added.map(\.id))
        }
    }

    /// Whether a `Prefer` header asks for the ids alone (RFC 7240 `return=minimal`, among other preferences).
    /// Each preference is `token [BWS "=" BWS word]` followed by parameters after `;`; the token and a token value
    /// compare without case, and the value may be quoted. Read on the header's bytes: every add of a client that
    /// adds one at a time carries it.
    static func prefersMinimal(_ prefer: String?) -> Bool {
        guard var prefer else { return false }
        return prefer.withUTF8 { bytes in
            bytes.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: true).contains { element in
                let preference = element.prefix { $0 != UInt8(ascii: ";") }
                guard let equals = preference.firstIndex(of: UInt8(ascii: "=")) else { return false }
                var value = preference[(equals + 1)...].trimmingHTTPSpace
                if value.count >= 2, value.first == UInt8(ascii: "\""), value.last == UInt8(ascii: "\"") {
                    value = value.dropFirst().dropLast()
                }
                return preference[..<equals].trimmingHTTPSpace.equalsIgnoringASCIICase("return".utf8)
                    && value.equalsIgnoringASCIICase("minimal".utf8)
            }
        }
    }

    /// `add` as the generated types (the daemon's router serves the operation through `APIWire`).
    public func addDownloads(_ input: Operations.AddDownloads.Input) async throws -> Operations.AddDownloads.Output {
        guard case .json(let payload) = input.body else {
            throw APIError(.unsupportedMediaType, "unsupportedMediaType", "send the body as application/json")
        }
        let minimal = Self.prefersMinimal(input.headers.prefer)
        let applied = minimal ? "return=minimal" : nil
        switch try await add(payload) {
        case .one(let added, let snapshot):
            if added.isNew {
                return .created(
                    .init(
                        headers: .init(location: "/api/v1/downloads/\(added.id)", preferenceApplied: applied),
                        body: .json(
                            minimal
                                ? .AddedID(.init(id: added.id.rawValue))
                                : .Download(Components.Schemas.Download(snapshot)))))
            }
            return .ok(
                .init(
                    headers: .init(preferenceApplied: applied),
                    body: .json(
                        minimal
                            ? .AddedID(.init(id: added.id.rawValue)) : .Download(Components.Schemas.Download(snapshot))
                    )))
        case .list(let ids):
            if minimal {
                return .ok(
                    .init(
                        headers: .init(preferenceApplied: applied),
                        body: .json(.AddedIDs(.init(ids: ids.map(\.rawValue))))))
            }
            let downloads = await manager.snapshots(ofExisting: ids).map(Components.Schemas.Download.init)
            return .ok(.init(body: .json(.DownloadList(.init(downloads: downloads)))))
        }
    }

    public func getDownload(_ input: Operations.GetDownload.Input) async throws -> Operations.GetDownload.Output {
        .ok(.init(body: .json(try await download(input.path.id))))
    }

    public func updateDownload(_ input: Operations.UpdateDownload.Input) async throws
        -> Operations.UpdateDownload.Output
    {
        guard case .json(let update) = input.body else {
            throw APIError(.unsupportedMediaType, "unsupportedMediaType", "send the body as application/json")
        }
        return .ok(.init(body: .json(try await self.update(input.path.id, update, nulls: []))))
    }

    /// Changing a download's priority, connections, rate limit or link: the operation's one implementation, served by
    /// `APIWire` (which sees the fields sent as `null`: `limitRate: null` removes the limit); `updateDownload` is
    /// its generated-type form.
    func update(_ idText: String, _ update: Components.Schemas.DownloadUpdate, nulls: [NullField])
        async throws(APIError) -> Components.Schemas.Download
    {
        try Self.reject(nulls, allowing: ["limitRate"])
        let id = DownloadID(idText)
        _ = try await download(id.rawValue)
        if let connections = update.connections {
            try APIError.checking("connections") { () throws(DownloadRules.RuleViolation) in
                try DownloadRules.checkConnections(connections)
            }
        }
        try APIError.checking("limitRate") { () throws(DownloadRules.RuleViolation) in
            try DownloadRules.checkRate(update.limitRate)
        }
        var link: URL?
        if let text = update.url {
            guard Self.isAcceptedURL(text), let url = URL(string: text), (try? DownloadRules.checkURL(url)) != nil
            else {
                throw .invalidField("url", Self.urlRefusal(text), index: nil)
            }
            link = url
        }
        do {
            // The link first: refused for a completed download, before anything else changed.
            if let link { try await manager.replaceURL(link, for: id) }
            if let priority = update.priority { try await manager.setPriority(priority.engine, for: id) }
            if let connections = update.connections { try await manager.setConnections(connections, for: id) }
            if let limit = update.limitRate {
                try await manager.setRateLimit(limit, for: id)
            } else if nulls.contains(NullField(name: "limitRate", index: nil)) {
                try await manager.setRateLimit(nil, for: id)
            }

        } catch {
            throw APIError(error)
        }
        return try await download(id.rawValue)
    }

    public func deleteDownload(_ input: Operations.DeleteDownload.Input) async throws
        -> Operations.DeleteDownload.Output
    {
        let id = DownloadID(input.path.id)
        do {
            let state = try await manager.snapshot(id).state
            if state.isActive { try await manager.cancel(id) }
            try await manager.remove(id, deletingFile: input.query.deleteFile ?? false)
        } catch {
            throw APIError(error)
        }
        return .noContent(.init())
    }

    public func pauseDownload(_ input: Operations.PauseDownload.Input) async throws -> Operations.PauseDownload.Output {
        let id = DownloadID(input.path.id)
        do { try await manager.pause(id) } catch { throw APIError(error) }
        return .ok(.init(body: .json(try await download(id.rawValue))))
    }

    public func resumeDownload(_ input: Operations.ResumeDownload.Input) async throws
        -> Operations.ResumeDownload.Output
    {
        let id = DownloadID(input.path.id)
        do { try await manager.resume(id) } catch { throw APIError(error) }
        return .ok(.init(body: .json(try await download(id.rawValue))))
    }

    public func cancelDownload(_ input: Operations.CancelDownload.Input) async throws
        -> Operations.CancelDownload.Output
    {
        let id = DownloadID(input.path.id)
        do { try await manager.cancel(id) } catch { throw APIError(error) }
        return .ok(.init(body: .json(try await download(id.rawValue))))
    }

    public func retryDownload(_ input: Operations.RetryDownload.Input) async throws -> Operations.RetryDownload.Output {
        let id = DownloadID(input.path.id)
        do { try await manager.retry(id) } catch { throw APIError(error) }
        return .ok(.init(body: .json(try await download(id.rawValue))))
    }

    public func moveDownload(_ input: Operations.MoveDownload.Input) async throws -> Operations.MoveDownload.Output {
        guard case .json(let move) = input.body else {
            throw APIError(.unsupportedMediaType, "unsupportedMediaType", "send the body as application/json")
        }
        return .ok(.init(body: .json(try await self.move(input.path.id, move, nulls: []))))
    }

    /// Moving a download in the queue: the operation's one implementation, served by `APIWire`; `moveDownload` is
    /// its generated-type form.
    func move(_ idText: String, _ move: Components.Schemas.Move, nulls: [NullField]) async throws(APIError)
        -> Components.Schemas.Download
    {
        try Self.reject(nulls)
        let id = DownloadID(idText)
        _ = try await download(id.rawValue)
        do {
            switch (move.before, move.to) {
            case (let before?, nil):
                _ = try await download(before)
                try await manager.move(id, before: DownloadID(before))
            case (nil, let end?):
                try await manager.move(id, to: end == .top ? .top : .bottom)
            default:
                throw APIError(
                    .badRequest, "invalidBody", "give exactly one of 'before' (an id) and 'to' (top, bottom)")
            }
        } catch let error as DownloadError {
            throw APIError(error)
        } catch {
            throw APIError.from(error, body: nil)
        }
        return try await download(id.rawValue)
    }

    public func pauseAll(_ input: Operations.PauseAll.Input) async throws -> Operations.PauseAll.Output {
        await manager.pauseAll()
        return .ok(.init(body: .json(.init(await manager.stats()))))
    }

    public func resumeAll(_ input: Operations.ResumeAll.Input) async throws -> Operations.ResumeAll.Output {
        await manager.resumeAll()
        return .ok(.init(body: .json(.init(await manager.stats()))))
    }

    public func clean(_ input: Operations.Clean.Input) async throws -> Operations.Clean.Output {
        let removed: Int
        do { removed = try await manager.clean() } catch { throw APIError(error) }
        return .ok(.init(body: .json(.init(removed: removed))))
    }

    /// The download with `id`, as the API shows it; 404 (or, for a field of the request, 400) when there is none.
    private func download(_ id: String, field: String? = nil) async throws(APIError) -> Components.Schemas.Download {
        do {
            return Components.Schemas.Download(try await manager.snapshot(DownloadID(id)))
        } catch {
            if let field, error.code == .notFound { throw .invalidField(field, "no download with id \(id)") }
            throw APIError(error)
        }
    }

    public func waitForDownloads(_ input: Operations.WaitForDownloads.Input) async throws
        -> Operations.WaitForDownloads.Output
    {
        let seconds = input.query.timeout ?? 30
        guard (0...60).contains(seconds) else { throw APIError.invalidField("timeout", "must be between 0 and 60") }
        let ids = input.query.download.flatMap { $0.isEmpty ? nil : $0.map(DownloadID.init) }
        if let ids {
            // Every name must be a download (404 otherwise), as for the event stream's `download`.
            do { _ = try await manager.snapshots(of: ids) } catch { throw APIError(error) }
        }
        let manager = self.manager
        if seconds > 0, !(await manager.haveStopped(ids)) {
            // Whichever comes first: the downloads stop, the time is up, or the daemon shuts down gracefully (which
            // must not wait out a client's long poll).
            await cancelWhenGracefulShutdown {
                await withTaskGroup(of: Void.self) { group in
                    group.addTask { await manager.waitUntilStopped(ids) }
                    group.addTask { try? await Task.sleep(for: .seconds(seconds)) }
                    await group.next()
                    group.cancelAll()
                }
            }
        }
        let done = await manager.haveStopped(ids)
        var downloads: [Components.Schemas.Download] = []
        if let ids { downloads = await manager.snapshots(ofExisting: ids).map(Components.Schemas.Download.init) }
        return .ok(.init(body: .json(.init(done: done, downloads: downloads))))
    }

    // MARK: The daemon

    public func getStats(_ input: Operations.GetStats.Input) async throws -> Operations.GetStats.Output {
        .ok(.init(body: .json(.init(await manager.stats()))))
    }

    public func listWorkers(_ input: Operations.ListWorkers.Input) async throws -> Operations.ListWorkers.Output {
        let workers: [WorkerStatus]
        do { workers = try await manager.workers() } catch { throw APIError(error) }
        return .ok(
            .init(
                body: .json(
                    .init(
                        workers: workers.map {
                            Components.Schemas.Worker(
                                name: $0.name, state: .init(rawValue: $0.state.rawValue) ?? .running,
                                heartbeatAt: $0.heartbeatAt, downloads: $0.downloads)
                        }))))
    }

    public func getSpeedSamples(_ input: Operations.GetSpeedSamples.Input) async throws
        -> Operations.GetSpeedSamples.Output
    {
        let samples = await manager.speedSamples(of: input.query.download.map(DownloadID.init))
        let downloads = samples.downloads.sorted { $0.key < $1.key }.map { id, track in
            Components.Schemas.SpeedTrack(id: id, offset: track.offset, samples: track.samples)
        }
        return .ok(
            .init(
                body: .json(
                    .init(intervalSeconds: 1, end: samples.end, total: samples.total, downloads: downloads))))
    }

    public func getSettings(_ input: Operations.GetSettings.Input) async throws -> Operations.GetSettings.Output {
        .ok(.init(body: .json(.init(await manager.currentSettings(), configuration: configuration))))
    }

    public func updateSettings(_ input: Operations.UpdateSettings.Input) async throws
        -> Operations.UpdateSettings.Output
    {
        guard case .json(let update) = input.body else {
            throw APIError(.unsupportedMediaType, "unsupportedMediaType", "send the body as application/json")
        }
        return .ok(.init(body: .json(try await updateSettings(update, nulls: []))))
    }

    /// Changing the daemon's settings: the operation's one implementation, served by `APIWire` (which sees
    /// `limitRate: null`, no limit); `updateSettings(_ input:)` is its generated-type form.
    func updateSettings(_ update: Components.Schemas.SettingsUpdate, nulls: [NullField]) async throws(APIError)
        -> Components.Schemas.Settings
    {
        try Self.reject(nulls, allowing: ["limitRate", "maxConnectionsPerHost", "maxDownloadsPerHost"])
        var settings = await manager.currentSettings()
        if let limit = update.maxConcurrentDownloads {
            try APIError.checking("maxConcurrentDownloads") { () throws(DownloadRules.RuleViolation) in
                try DownloadRules.checkConcurrentDownloads(limit)
            }
            settings.maxConcurrentDownloads = limit
        }
        if let connections = update.connections {
            try APIError.checking("connections") { () throws(DownloadRules.RuleViolation) in
                try DownloadRules.checkConnections(connections)
            }
            settings.connectionsPerDownload = connections
        }
        if let limit = update.limitRate {
            try APIError.checking("limitRate") { () throws(DownloadRules.RuleViolation) in
                try DownloadRules.checkRate(limit)
            }
            settings.rateLimit = limit
        } else if nulls.contains(NullField(name: "limitRate", index: nil)) {
            settings.rateLimit = nil
        }
        if let limit = update.maxConnectionsPerHost {
            try APIError.checking("maxConnectionsPerHost") { () throws(DownloadRules.RuleViolation) in
                try DownloadRules.checkConnectionsPerHost(limit)
            }
            settings.maxConnectionsPerHost = limit
        } else if nulls.contains(NullField(name: "maxConnectionsPerHost", index: nil)) {
            settings.maxConnectionsPerHost = nil
        }
        if let limit = update.maxDownloadsPerHost {
            try APIError.checking("maxDownloadsPerHost") { () throws(DownloadRules.RuleViolation) in
                try DownloadRules.checkDownloadsPerHost(limit)
            }
            settings.maxDownloadsPerHost = limit
        } else if nulls.contains(NullField(name: "maxDownloadsPerHost", index: nil)) {
            settings.maxDownloadsPerHost = nil
        }
        if let rules = update.schedule {
            do { _ = try Schedule(parsing: rules) } catch {
                throw APIError.invalidField("schedule", error.message, index: nil)
            }
            settings.schedule = rules
        }
        if let rules = update.sortRules {
            do { _ = try SortRules(parsing: rules) } catch {
                throw APIError.invalidField("sortRules", error.message, index: nil)
            }
            settings.sortRules = rules
        }
        do { try await manager.update(settings) } catch { throw APIError(error) }
        return .init(await manager.currentSettings(), configuration: configuration)
    }

    /// A 400 naming the first field sent as `null` that is not in `nullable`: the document allows no other null,
    /// and the generated types would read one as a missing value.
    static func reject(_ nulls: [NullField], allowing nullable: Set<String> = []) throws(APIError) {
        guard let field = nulls.first(where: { !nullable.contains($0.name) }) else { return }
        throw APIError.invalidField(field.name, "must not be null", index: field.index)
    }

    public func getOpenAPIDocument(_ input: Operations.GetOpenAPIDocument.Input) async throws
        -> Operations.GetOpenAPIDocument.Output
    {
        .ok(.init(body: .yaml(HTTPBody(APIDocument.yaml))))
    }

    public func streamEvents(_ input: Operations.StreamEvents.Input) async throws -> Operations.StreamEvents.Output {
        var filter: DownloadID?
        if let id = input.query.download {
            _ = try await download(id)
            filter = DownloadID(id)
        }
        // An id that cannot be parsed is treated like one that can no longer be replayed: a fresh snapshot.
        let after = (input.headers.lastEventID ?? input.query.lastEventId).flatMap(EventID.init)
        let states = input.query.state.map { Set($0.map(\.engine)) }
        let subscription = await manager.subscribe(to: filter, after: after, states: states)
        let body = EventStreamBody(subscription: subscription, configuration: configuration)
        return .ok(.init(body: .textEventStream(HTTPBody(body, length: .unknown, iterationBehavior: .single))))
    }
}
