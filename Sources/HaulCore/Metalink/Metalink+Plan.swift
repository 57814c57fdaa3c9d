/// How one file of a Metalink is downloaded: the rules that turn its URLs, hashes and pieces into a download.
extension Metalink.File {
    /// What a download of the file uses.
    public struct Plan: Sendable, Equatable {
        /// The best URL: the download's own.
        public var url: String
        /// The other URLs, best first (at most `DownloadRules.mirrors`).
        public var mirrors: [String]
        /// The checksum the finished file must match.
        public var checksum: Checksum?
        /// The piece hashes.
        public var pieces: Metalink.Pieces?
        /// The file's name, made safe for one folder.
        public var name: String
        /// Its length, when the Metalink gives it.
        public var size: Int64?
    }

    /// The plan for this file, with the checksum the user gave (`--checksum`), if any. One rule for both: a hash of
    /// the Metalink with the user's algorithm must be the user's, or nothing is fetched; the user's checksum is
    /// checked, else the Metalink's strongest. URLs Haul cannot fetch (BitTorrent, say) are left out.
    public func plan(checksum given: Checksum?) throws(DownloadError) -> Plan {
        if let given, let own = hashes.first(where: { $0.algorithm == given.algorithm }),
            own.hex.lowercased() != given.hex.lowercased()
        {
            throw DownloadError(
                .invalidArgument,
                "the checksum given (\(given)) disagrees with the Metalink's \(given.algorithm.rawValue) for \(name) "
                    + "(\(own.hex)); nothing was fetched")
        }
        let strength: [Checksum.Algorithm] = [.sha512, .sha256, .sha1, .md5]
        let strongest = strength.lazy.compactMap { algorithm in hashes.first { $0.algorithm == algorithm } }.first
        let usable = urls.map(\.url).filter(URLList.isDownloadable)
        guard let url = usable.first else {
            throw DownloadError(.invalidArgument, "the Metalink gives no http, https or ftp URL for \(name)")
        }
        let mirrors = DownloadRules.distinctMirrors(Array(usable.dropFirst()), of: url).prefix(DownloadRules.mirrors)
        return Plan(
            url: url, mirrors: Array(mirrors), checksum: given ?? strongest, pieces: pieces,
            name: FileNameSanitizer.sanitize(name), size: size)
    }
}
