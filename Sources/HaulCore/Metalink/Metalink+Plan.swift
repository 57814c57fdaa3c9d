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
        /// The folders the Metalink puts it in, beneath the download's folder (`docs/read me.txt` is in `docs`),
        /// each name made safe; empty for none.
        public var folders: [String] = []

        /// `folders` and `name` as one relative path (`docs/read me.txt`).
        public var path: String { (folders + [name]).joined(separator: "/") }
    }

    /// A Metalink file name as RFC 5854 §4.1.2.1 has it: a relative path, whose folders are beneath the download's
    /// folder. A name that would lead out of it (`..`, or an absolute path) is refused, not mended: the document is
    /// broken, and a file it describes has no right place. Each folder and the name are made safe as a server's
    /// name is (`FileNameSanitizer`); empty and `.` components are skipped.
    static func folders(of name: String) throws(DownloadError) -> (folders: [String], name: String) {
        let parts = name.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        if name.hasPrefix("/") || parts.contains("..") {
            throw DownloadError(
                .invalidResponse, "the Metalink's file name '\(name)' leads out of its folder (RFC 5854 forbids it)")
        }
        let kept = parts.filter { $0 != "." }
        guard let last = kept.last else { return ([], FileNameSanitizer.sanitize(name)) }
        return (kept.dropLast().map(FileNameSanitizer.sanitize), FileNameSanitizer.sanitize(last))
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
        let place = try Self.folders(of: name)
        return Plan(
            url: url, mirrors: Array(mirrors), checksum: given ?? strongest, pieces: pieces, name: place.name,
            size: size, folders: place.folders)
    }
}
