import Foundation
import Haul
import HaulAPI
import HaulCore

/// Between the engine's values and the API's generated types.
extension Components.Schemas.Download {
    /// The header names whose values the API never shows.
    package static let credentialHeaders: Set<String> = ["authorization", "cookie", "proxy-authorization"]

    package init(_ download: DownloadSnapshot) {
        let options = download.options
        var headers: [String: String] = [:]
        for header in options.headers {
            headers[header.name] = Self.credentialHeaders.contains(header.name.lowercased()) ? "***" : header.value
        }
        self.init(
            id: download.id.rawValue,
            url: download.url,
            path: download.path,
            directory: download.directory,
            state: .init(download.state),
            priority: .init(download.priority),
            position: download.position,
            receivedBytes: download.receivedBytes,
            totalBytes: download.totalBytes,
            bytesPerSecond: download.bytesPerSecond.isFinite ? download.bytesPerSecond : 0,
            etaSeconds: download.secondsRemaining.flatMap { $0.isFinite ? $0 : nil },
            connections: download.connections,
            segments: download.segments?.map { .init(start: $0.start, end: $0.end, offset: $0.offset) },
            mirrors: download.mirrors.map { Self.mirrors($0, of: download) },
            after: download.after.map(\.rawValue),
            error: download.error.map(Components.Schemas.DownloadError.init),
            resumable: download.isResumable,
            limitRate: download.rateLimit,
            createdAt: download.createdAt,
            completedAt: download.completedAt,
            origin: Components.Schemas.Origin(rawValue: download.origin.rawValue) ?? .library,
            options: .init(
                connections: options.maxConnectionsPerDownload,
                minSplitSize: options.minimumSplitSize,
                checksum: options.checksum.map { "\($0.algorithm.rawValue)=\($0.hex)" },
                headers: .init(additionalProperties: headers),
                userAgent: options.userAgent,
                timeoutSeconds: options.idleTimeoutSeconds,
                retries: options.maximumAttemptsWithoutProgress,
                overwrite: options.overwrite,
                continuePartial: options.continuePartial,
                mirrors: options.mirrors.isEmpty ? nil : options.mirrors
            ),
            sha256: download.sha256,
            worker: download.worker
        )
    }

    /// Each server's status with its URL: the download's own, then its mirrors in order.
    package static func mirrors(_ statuses: [MirrorStatus], of download: DownloadSnapshot) -> [Components.Schemas
        .Mirror]
    {
        zip([download.url] + download.options.mirrors, statuses).map { url, status in
            Components.Schemas.Mirror(status, url: url)
        }
    }
}

extension Components.Schemas.DownloadError {
    package init(_ error: DownloadError) {
        self.init(code: error.code.description, message: error.message, httpStatus: error.status)
    }
}

extension Components.Schemas.State {
    package init(_ state: DownloadState) {
        self = Self(rawValue: state.rawValue) ?? .failed
    }

    package var engine: DownloadState { DownloadState(rawValue: rawValue) ?? .failed }
}

extension Components.Schemas.Priority {
    package init(_ priority: DownloadPriority) {
        switch priority {
        case .high: self = .high
        case .normal: self = .normal
        case .low: self = .low
        }
    }

    package var engine: DownloadPriority {
        switch self {
        case .high: .high
        case .normal: .normal
        case .low: .low
        }
    }
}

extension Components.Schemas.Stats {
    package init(_ stats: DownloadStats) {
        let counts = stats.counts
        self.init(
            bytesPerSecond: stats.bytesPerSecond.isFinite ? stats.bytesPerSecond : 0,
            counts: .init(
                queued: counts[.queued] ?? 0, running: counts[.running] ?? 0, paused: counts[.paused] ?? 0,
                waitingForNetwork: counts[.waitingForNetwork] ?? 0, completed: counts[.completed] ?? 0,
                failed: counts[.failed] ?? 0, cancelled: counts[.cancelled] ?? 0)
        )
    }
}

extension Components.Schemas.Progress {
    package init(_ progress: DownloadProgress) {
        self.init(
            id: progress.id.rawValue, receivedBytes: progress.receivedBytes, totalBytes: progress.totalBytes,
            bytesPerSecond: progress.bytesPerSecond.isFinite ? progress.bytesPerSecond : 0,
            etaSeconds: progress.secondsRemaining.flatMap { $0.isFinite ? $0 : nil },
            connections: progress.connections,
            mirrors: progress.mirrors?.map { Components.Schemas.Mirror($0, url: nil) })
    }
}

extension DownloadSnapshot {
    /// The engine's view of a download the daemon described (the mirror of `Components.Schemas.Download(_:)`), for
    /// the command line's output shared with `haul get`.
    package init(_ download: Components.Schemas.Download) {
        let options = download.options
        self.init(
            id: DownloadID(download.id), url: download.url, path: download.path, directory: download.directory,
            state: DownloadState(rawValue: download.state.rawValue) ?? .failed,
            priority: download.priority == .high ? .high : download.priority == .low ? .low : .normal,
            position: download.position, receivedBytes: download.receivedBytes, totalBytes: download.totalBytes,
            bytesPerSecond: download.bytesPerSecond, secondsRemaining: download.etaSeconds,
            connections: download.connections,
            segments: download.segments?.map { Segment(start: $0.start, end: $0.end, offset: $0.offset) },
            after: download.after.map(DownloadID.init),
            error: download.error.map {
                DownloadError(
                    DownloadError.Code(named: $0.code) ?? .invalidResponse, $0.message, status: $0.httpStatus)
            },
            isResumable: download.resumable, createdAt: download.createdAt, completedAt: download.completedAt,
            options: DownloadOptions(
                headers: options.headers.additionalProperties.map {
                    DownloadOptions.Header(name: $0.key, value: $0.value)
                },
                userAgent: options.userAgent,
                overwrite: options.overwrite, continuePartial: options.continuePartial,
                idleTimeoutSeconds: options.timeoutSeconds, maximumAttemptsWithoutProgress: options.retries,
                maxConnectionsPerDownload: options.connections, minimumSplitSize: options.minSplitSize
            ),
            rateLimit: download.limitRate,
            origin: DownloadOrigin(rawValue: download.origin.rawValue) ?? .api,
            sha256: download.sha256, worker: download.worker)
        self.options.mirrors = options.mirrors ?? []
        mirrors = download.mirrors?.map { mirror in
            MirrorStatus(
                state: MirrorStatus.State(rawValue: mirror.state.rawValue) ?? .waiting, reason: mirror.reason,
                connections: mirror.connections, receivedBytes: mirror.receivedBytes,
                bytesPerSecond: mirror.bytesPerSecond)
        }
    }
}

extension Components.Schemas.PieceHashes {
    /// The API's form of piece hashes.
    package init(_ pieces: Metalink.Pieces) {
        switch pieces.algorithm {
        case .sha256: self = .case1(.init(length: pieces.length, algorithm: .sha256, hashes: pieces.hashes))
        case .sha512: self = .case2(.init(length: pieces.length, algorithm: .sha512, hashes: pieces.hashes))
        case .sha1: self = .case3(.init(length: pieces.length, algorithm: .sha1, hashes: pieces.hashes))
        case .md5: self = .case4(.init(length: pieces.length, algorithm: .md5, hashes: pieces.hashes))
        }
    }

    /// The engine's form, hashes in lowercase.
    package var engine: Metalink.Pieces {
        let (length, algorithm, hashes): (Int64, Checksum.Algorithm, [String]) =
            switch self {
            case .case1(let given): (given.length, .sha256, given.hashes)
            case .case2(let given): (given.length, .sha512, given.hashes)
            case .case3(let given): (given.length, .sha1, given.hashes)
            case .case4(let given): (given.length, .md5, given.hashes)
            }
        return Metalink.Pieces(length: length, algorithm: algorithm, hashes: hashes.map { $0.lowercased() })
    }
}

extension Components.Schemas.Mirror {
    /// One server's status; `url` nil in a progress event.
    package init(_ status: MirrorStatus, url: String?) {
        self.init(
            url: url, state: .init(rawValue: status.state.rawValue) ?? .waiting, reason: status.reason,
            connections: status.connections, receivedBytes: status.receivedBytes,
            bytesPerSecond: status.bytesPerSecond.isFinite ? status.bytesPerSecond : 0)
    }
}
