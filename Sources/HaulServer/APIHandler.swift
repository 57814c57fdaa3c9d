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
        if let limit, !(1...1_000_000).contains(limit) {
            throw APIError.invalidField("limit", "must be between 1 and 1000000")
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
    func add(_ payload: Operations.AddDownloads.Input.Body.JsonPayload) async throws(APIError) -> AddOutcome {
        try RawBody.rejectNulls()
        let defaults = manager.settingsNow
        switch payload {
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
                requests.append(try request(from: item, index: index, defaults: defaults))
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
    static func prefersMinimal(_ prefer: String?) -> Bool {
        guard let prefer else { return false }
        return prefer.split(separator: ",").contains { preference in
            preference.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
                == "return=minimal"
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

    /// The engine's request for one item of an add, every field checked; errors name the item and the field.
    func request(from item: Components.Schemas.AddDownload, index: Int?, defaults: ManagerSettings)
        throws(APIError) -> DownloadRequest
    {
        guard Self.isAcceptedURL(item.url), let url = URL(string: item.url), url.host?.isEmpty == false else {
            throw .invalidField(
                "url", "'\(item.url)' is not an http, https or ftp URL (ASCII host; percent-encode the rest)",
                index: index)
        }
        let connections = item.connections ?? defaults.connectionsPerDownload
        guard (1...DownloadOptions.connectionLimit).contains(connections) else {
            throw .invalidField(
                "connections", "must be between 1 and \(DownloadOptions.connectionLimit), not \(connections)",
                index: index)
        }
        let minSplitSize = item.minSplitSize ?? DownloadOptions.defaultMinimumSplitSize
        guard minSplitSize >= 1 << 20 else {
            throw .invalidField("minSplitSize", "must be at least 1048576 (1 MiB), not \(minSplitSize)", index: index)
        }
        if let limit = item.limitRate, limit < 1 {
            throw .invalidField("limitRate", "must be a positive number of bytes a second", index: index)
        }
        if let timeout = item.timeoutSeconds, !(timeout > 0 && timeout.isFinite) {
            throw .invalidField("timeoutSeconds", "must be a positive number of seconds", index: index)
        }
        if let timeout = item.timeoutSeconds, timeout > 604_800 {
            throw .invalidField("timeoutSeconds", "must be at most 604800 (a week)", index: index)
        }
        if let retries = item.retries, !(0...1_000_000).contains(retries) {
            throw .invalidField("retries", "must be between 0 and 1000000", index: index)
        }
        if let userAgent = item.userAgent, !DownloadOptions.Header.isValidValue(userAgent) {
            throw .invalidField("userAgent", "has a line break or another control character", index: index)
        }
        for (field, value) in [("directory", item.directory), ("filename", item.filename)] {
            if let value, value.utf8.count > 4096 {
                throw .invalidField(field, "is longer than 4096 bytes", index: index)
            }
        }
        var checksum: Checksum?
        if let text = item.checksum {
            do { checksum = try Checksum(parsing: text) } catch {
                throw .invalidField("checksum", error.message, index: index)
            }
        }
        var headers: [DownloadOptions.Header] = []
        for (name, value) in (item.headers?.additionalProperties ?? [:]).sorted(by: { $0.key < $1.key }) {
            do { headers.append(try DownloadOptions.Header(parsing: "\(name): \(value)")) } catch {
                throw .invalidField("headers", error.message, index: index)
            }
        }
        if let filename = item.filename, filename.isEmpty {
            throw .invalidField("filename", "must not be empty", index: index)
        }
        let destination = try policy.destination(
            directory: item.directory, filename: item.filename, door: door, index: index)
        var options = DownloadOptions(
            headers: headers,
            userAgent: item.userAgent,
            checksum: checksum,
            overwrite: item.overwrite ?? false,
            // Only a named file can be adopted; for a name the server chooses there is nothing to continue.
            continuePartial: item.filename != nil && item.continuePartial == true,
            idleTimeoutSeconds: item.timeoutSeconds ?? 30,
            maximumAttemptsWithoutProgress: item.retries ?? 5,
            computesSHA256: item.computeSha256 ?? false,
            maxConnectionsPerDownload: connections,
            minimumSplitSize: minSplitSize
        )
        options.tls = try Self.tls(item.tls, index: index)
        options.network = try Self.network(item, index: index)
        return DownloadRequest(
            url: url, destination: destination, options: options, priority: item.priority?.engine ?? .normal,
            after: (item.after ?? []).map(DownloadID.init), rateLimit: item.limitRate, isPaused: item.paused ?? false,
            origin: door.origin)
    }

    /// The TLS options of an add: every path absolute and readable by the daemon, checked now rather than when the
    /// download first connects.
    static func tls(_ given: Components.Schemas.TLSOptions?, index: Int?) throws(APIError) -> TLSOptions {
        guard let given else { return TLSOptions() }
        let paths = [
            ("tls.caCertificates", given.caCertificates), ("tls.caDirectory", given.caDirectory),
            ("tls.clientCertificate", given.clientCertificate), ("tls.clientKey", given.clientKey),
        ]
        for case (let field, let path?) in paths {
            try readable(field, path, index: index, folder: field == "tls.caDirectory")
        }
        if given.clientKey != nil, given.clientCertificate == nil {
            throw .invalidField("tls.clientKey", "needs tls.clientCertificate", index: index)
        }
        return TLSOptions(
            caCertificates: given.caCertificates, caDirectory: given.caDirectory, insecure: given.insecure ?? false,
            clientCertificate: given.clientCertificate, clientKey: given.clientKey)
    }

    /// The proxy, credentials, `.netrc` and cookie options of an add, each checked: a proxy URL Haul can use, cookie
    /// pairs, files the daemon can read. The credentials stay in memory (`NetworkOptions` never stores them).
    static func network(_ item: Components.Schemas.AddDownload, index: Int?) throws(APIError) -> NetworkOptions {
        var network = NetworkOptions(
            proxy: ProxyRules(proxy: item.proxy, noProxy: item.noProxy), netrcFile: item.netrcFile,
            usesNetrc: item.useNetrc ?? true, cookieFile: item.cookieFile)
        if let proxy = item.proxy, !proxy.trimmingCharacters(in: .whitespaces).isEmpty {
            do { _ = try ProxyEndpoint(parsing: proxy) } catch {
                throw .invalidField("proxy", error.message, index: index)
            }
        }
        if let cookies = item.cookies {
            do { network.cookies = try CookieFile.pairs(cookies) } catch {
                throw .invalidField("cookies", error.message, index: index)
            }
        }
        for case (let field, let path?) in [("netrcFile", item.netrcFile), ("cookieFile", item.cookieFile)] {
            try readable(field, path, index: index, folder: false)
        }
        if let credentials = item.credentials {
            guard !credentials.user.isEmpty else {
                throw .invalidField("credentials.user", "must not be empty", index: index)
            }
            network.credentials = HaulCore.Credentials(user: credentials.user, password: credentials.password)
        }
        return network
    }

    private static func readable(_ field: String, _ path: String, index: Int?, folder: Bool) throws(APIError) {
        guard path.hasPrefix("/") else {
            throw .invalidField(field, "must be an absolute path on the daemon's machine", index: index)
        }
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder), isFolder.boolValue == folder,
            folder || FileManager.default.isReadableFile(atPath: path)
        else {
            // The request is well formed; the daemon's disk does not hold what it names (as a folder in the way of
            // a destination, a 409).
            throw APIError(
                .conflict, "unreadableFile",
                "\(index.map { "item \($0): " } ?? "")\(field): \(path) is not a \(folder ? "folder" : "file") the daemon can read",
                index: index, field: field)
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
        try RawBody.rejectNulls(allowing: ["limitRate"])
        let id = DownloadID(input.path.id)
        _ = try await download(id.rawValue)
        if let connections = update.connections, !(1...DownloadOptions.connectionLimit).contains(connections) {
            throw APIError.invalidField(
                "connections", "must be between 1 and \(DownloadOptions.connectionLimit), not \(connections)")
        }
        if let limit = update.limitRate, limit < 1 {
            throw APIError.invalidField("limitRate", "must be a positive number of bytes a second, or null")
        }
        do {
            if let priority = update.priority { try await manager.setPriority(priority.engine, for: id) }
            if let connections = update.connections { try await manager.setConnections(connections, for: id) }
            if let limit = update.limitRate {
                try await manager.setRateLimit(limit, for: id)
            } else if RawBody.setsNull("limitRate") {
                try await manager.setRateLimit(nil, for: id)
            }
        } catch {
            throw APIError(error)
        }
        return .ok(.init(body: .json(try await download(id.rawValue))))
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
        try RawBody.rejectNulls()
        let id = DownloadID(input.path.id)
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
        }
        return .ok(.init(body: .json(try await download(id.rawValue))))
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
        try RawBody.rejectNulls(allowing: ["limitRate"])
        var settings = await manager.currentSettings()
        if let limit = update.maxConcurrentDownloads {
            guard (1...1000).contains(limit) else {
                throw APIError.invalidField("maxConcurrentDownloads", "must be between 1 and 1000, not \(limit)")
            }
            settings.maxConcurrentDownloads = limit
        }
        if let connections = update.connections {
            guard (1...DownloadOptions.connectionLimit).contains(connections) else {
                throw APIError.invalidField(
                    "connections", "must be between 1 and \(DownloadOptions.connectionLimit), not \(connections)")
            }
            settings.connectionsPerDownload = connections
        }
        if let limit = update.limitRate {
            guard limit >= 1 else {
                throw APIError.invalidField("limitRate", "must be a positive number of bytes a second, or null")
            }
            settings.rateLimit = limit
        } else if RawBody.setsNull("limitRate") {
            settings.rateLimit = nil
        }
        do { try await manager.update(settings) } catch { throw APIError(error) }
        return .ok(.init(body: .json(.init(await manager.currentSettings(), configuration: configuration))))
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
        let subscription = await manager.subscribe(to: filter, after: after)
        let body = EventStreamBody(subscription: subscription, configuration: configuration)
        return .ok(.init(body: .textEventStream(HTTPBody(body, length: .unknown, iterationBehavior: .single))))
    }
}

extension APIHandler {
    /// The URLs the API takes, as the document's pattern for `url` says (a test checks the document has it).
    static let urlPattern =
        #"^(https?|ftps?|ftpes)://[A-Za-z0-9.-]+(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?(/([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*)?$"#

    /// Per byte: bit 0 a byte a path may hold as it is, bit 1 a hex digit, bit 2 a byte of a host name.
    private static let byteClasses: [UInt8] = {
        var table = [UInt8](repeating: 0, count: 256)
        for byte in UInt8(ascii: "0")...UInt8(ascii: "9") { table[Int(byte)] |= 0b111 }
        for byte in UInt8(ascii: "A")...UInt8(ascii: "Z") { table[Int(byte)] |= 0b101 }
        for byte in UInt8(ascii: "a")...UInt8(ascii: "z") { table[Int(byte)] |= 0b101 }
        for byte in "abcdefABCDEF".utf8 { table[Int(byte)] |= 0b010 }
        for byte in "._~!$&'()*+,;=:@/?-".utf8 { table[Int(byte)] |= 0b001 }
        for byte in ".-".utf8 { table[Int(byte)] |= 0b100 }
        return table
    }()
    private static let schemes = ["https://", "http://", "ftps://", "ftpes://", "ftp://"].map { Array($0.utf8) }

    /// Whether `text` matches `urlPattern`, checked by hand: the `Regex` took 7 % of the time of adding a list, and
    /// a check with sets of bytes 3 % of a batch. (A test checks the two agree on thousands of strings.)
    static func isAcceptedURL(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { isAcceptedURL(bytes: $0) }
    }

    private static func isAcceptedURL(bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let classes = byteClasses
        let count = bytes.count
        guard let scheme = schemes.first(where: { count >= $0.count && bytes.starts(with: $0) }) else { return false }
        var index = scheme.count
        let hostStart = index
        while index < count, classes[Int(bytes[index])] & 0b100 != 0 { index += 1 }
        guard index > hostStart else { return false }
        if index < count, bytes[index] == UInt8(ascii: ":") {
            // One to four digits of any value, or five from 10000 to 65535 (the pattern's alternatives).
            let digitsStart = index + 1
            var end = digitsStart
            var port = 0
            while end < count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[end]), end - digitsStart < 6 {
                port = port * 10 + Int(bytes[end] - UInt8(ascii: "0"))
                end += 1
            }
            switch end - digitsStart {
            case 1...4: break
            case 5: guard bytes[digitsStart] != UInt8(ascii: "0"), port <= 65535 else { return false }
            default: return false
            }
            index = end
        }
        guard index < count else { return true }
        guard bytes[index] == UInt8(ascii: "/") else { return false }
        while index < count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < count, classes[Int(bytes[index + 1])] & 0b010 != 0,
                    classes[Int(bytes[index + 2])] & 0b010 != 0
                else { return false }
                index += 3
            } else if classes[Int(byte)] & 0b001 != 0 {
                index += 1
            } else {
                return false
            }
        }
        return true
    }
}

/// The body of the request being handled, as the body middleware read it: how a handler tells a field sent as
/// `null` (remove the limit) from a field left out (keep it), which the generated types cannot.
enum RawBody {
    @TaskLocal static var bytes: ByteBuffer?

    /// Throws a 400 naming the first field sent as `null` that is not in `nullable` (the generated types read a
    /// null as a missing value, which the document does not allow).
    static func rejectNulls(allowing nullable: Set<String> = []) throws(APIError) {
        // Most bodies hold no null at all: a scan of the bytes says so without parsing (parsing a list of ten
        // thousand downloads into Foundation objects took 15 MiB).
        guard let bytes, containsNull(bytes),
            let value = try? JSONSerialization.jsonObject(with: Data(buffer: bytes))
        else { return }
        func check(_ object: [String: Any], index: Int?) throws(APIError) {
            for (key, field) in object.sorted(by: { $0.key < $1.key }) {
                if field is NSNull, !nullable.contains(key) {
                    throw APIError.invalidField(key, "must not be null", index: index)
                }
                if let nested = field as? [String: Any] {
                    for (name, inner) in nested where inner is NSNull {
                        throw APIError.invalidField("\(key).\(name)", "must not be null", index: index)
                    }
                }
            }
        }
        if let object = value as? [String: Any] { try check(object, index: nil) }
        if let list = value as? [Any] {
            for (index, item) in list.enumerated() {
                if let object = item as? [String: Any] { try check(object, index: index) }
            }
        }
    }

    /// Whether `bytes` holds the literal `null` outside a string.
    static func containsNull(_ buffer: ByteBuffer) -> Bool {
        buffer.withUnsafeReadableBytes { containsNull($0) }
    }

    static func containsNull(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var inString = false
        var escaped = false
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
            } else if byte == UInt8(ascii: "\"") {
                inString = true
            } else if byte == UInt8(ascii: "n"), index + 3 < bytes.count, bytes[index + 1] == UInt8(ascii: "u"),
                bytes[index + 2] == UInt8(ascii: "l"), bytes[index + 3] == UInt8(ascii: "l")
            {
                return true
            }
            index += 1
        }
        return false
    }

    /// Whether the body is a JSON object with `field` set to null.
    static func setsNull(_ field: String) -> Bool {
        guard let bytes, containsNull(bytes),
            let object = try? JSONSerialization.jsonObject(with: Data(buffer: bytes)) as? [String: Any]
        else {
            return false
        }
        return object[field] is NSNull
    }
}
