import Foundation
import HaulCore

extension DownloadManager {
    /// The downloads of the other files of a Metalink that `id`'s URL answered (empty when it answered none, or one
    /// of one file), once they are added.
    public func filesFollowed(from id: DownloadID) async -> [DownloadID] {
        await followUps[id.rawValue]?.value ?? []
    }

    /// The download's URL answered `metalink`: the download becomes its first file, fetched from the Metalink's URLs
    /// with its hashes and pieces (under its name, for a download into a folder), and each other file becomes a
    /// download of its own beside it. Returns those; throws when the Metalink gives nothing Haul can fetch, or a hash
    /// that disagrees with the download's checksum.
    func follow(_ metalink: Metalink, record: inout DownloadRecord) throws(DownloadError) -> [DownloadRequest] {
        let given = record.options.checksum
        let plans = try metalink.files.map { file throws(DownloadError) in try file.plan(checksum: given) }
        guard let first = plans.first else {
            throw DownloadError(.invalidResponse, "\(record.url) answered a Metalink of no file")
        }
        var options = record.options
        options.followedMetalink = true
        func planned(_ plan: Metalink.File.Plan) -> DownloadOptions {
            var own = options
            own.mirrors = plan.mirrors
            own.checksum = plan.checksum
            own.pieces = plan.pieces
            own.preferredName = plan.path
            own.expectedLength = plan.size
            return own
        }
        let reason =
            "\(record.url) answered a Metalink"
            + (plans.count > 1 ? " of \(plans.count) files" : "") + "; fetching \(first.name) from "
            + "\(first.mirrors.count + 1) server\(first.mirrors.isEmpty ? "" : "s")"
        record.url = first.url
        record.options = planned(first)
        if record.directory == nil { record.options.preferredName = nil }
        record.finalURL = nil
        record.remoteFacts = nil
        record.durableOffset = 0
        record.segments = nil
        record.isPartVerified = true
        record.error = nil
        hub.emit(.restarted(DownloadID(record.id), reason: reason))
        configuration.logger.notice("\(reason)")
        let folder = record.directory ?? record.destination.map(PathName.folder(of:))
        guard let folder else { return [] }
        return plans.dropFirst().compactMap { plan in
            URL(string: plan.url).map { url in
                DownloadRequest(
                    url: url, destination: .directory(folder), options: planned(plan),
                    priority: DownloadPriority(rawValue: record.priority) ?? .normal, rateLimit: record.rateLimit,
                    origin: record.origin)
            }
        }
    }
}
