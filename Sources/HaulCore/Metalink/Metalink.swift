import Foundation

/// A Metalink document: RFC 5854 (Metalink 4, `application/metalink4+xml`, `.meta4`) or Metalink 3
/// (`application/metalink+xml`, `.metalink`): the files it describes, each with its size, whole-file hashes, piece
/// hashes and the URLs it can be fetched from.
///
/// What is kept is what a download needs, checked as it is read: names are kept as written (the consumer makes them
/// safe), sizes are whole numbers from 0 to 2^53, a hash is hex of its algorithm's length (other algorithms are left
/// out), URLs are http, https or ftp ones. Metalink 3's `preference` (100 best) becomes a priority as Metalink 4 counts
/// it (1 best): `101 - preference`.
public struct Metalink: Sendable, Equatable {
    public var files: [File]

    public struct File: Sendable, Equatable {
        /// The name as the document writes it (it may hold folders: `dir/name`).
        public var name: String
        public var size: Int64?
        /// Whole-file hashes, by algorithm, lowercase hex.
        public var hashes: [Checksum]
        public var pieces: Pieces?
        /// Where it can be fetched, best first (by priority, then as listed).
        public var urls: [Source]
    }

    /// Hashes of consecutive pieces of one length (the last may be shorter).
    public struct Pieces: Sendable, Hashable, Codable {
        public var length: Int64
        public var algorithm: Checksum.Algorithm
        /// Lowercase hex, one a piece, in order.
        public var hashes: [String]

        /// Makes a list of piece hashes.
        public init(length: Int64, algorithm: Checksum.Algorithm, hashes: [String]) {
            self.length = length
            self.algorithm = algorithm
            self.hashes = hashes
        }
    }

    public struct Source: Sendable, Equatable {
        public var url: String
        /// 1 is best; nil when the document does not say.
        public var priority: Int?
        /// An ISO 3166-1 country code, lowercase, when given.
        public var location: String?

        public init(url: String, priority: Int?, location: String?) {
            self.url = url
            self.priority = priority
            self.location = location
        }
    }

    /// The largest size taken: the largest integer a JSON number carries exactly.
    static let largestSize: Int64 = 1 << 53

    /// Parses a Metalink 4 or Metalink 3 document.
    public static func parse(_ text: String) throws(DownloadError) -> Metalink {
        let root = try XMLElement.parse(text)
        guard root.name == "metalink" else {
            throw DownloadError(.invalidResponse, "the document is not a Metalink: its root is <\(root.name)>")
        }
        let elements = root.first("files")?.all("file") ?? root.all("file")
        var files: [File] = []
        for element in elements {
            files.append(try file(element, version3: root.first("files") != nil))
        }
        guard !files.isEmpty else { throw DownloadError(.invalidResponse, "the Metalink describes no file") }
        return Metalink(files: files)
    }

    static func file(_ element: XMLElement, version3: Bool) throws(DownloadError) -> File {
        guard let name = element.attributes["name"], !name.isEmpty else {
            throw DownloadError(.invalidResponse, "a file of the Metalink has no name")
        }
        var file = File(name: name, size: nil, hashes: [], pieces: nil, urls: [])
        if let text = element.first("size")?.text.trimmed {
            guard let size = Int64(text), (0...largestSize).contains(size) else {
                throw DownloadError(.invalidResponse, "the Metalink's size of \(name) is not a size: '\(text)'")
            }
            file.size = size
        }
        let verification = version3 ? element.first("verification") : element
        for hash in verification?.all("hash") ?? [] {
            guard let checksum = checksum(hash.attributes["type"], hash.text) else { continue }
            file.hashes.append(checksum)
        }
        if let pieces = verification?.first("pieces") {
            file.pieces = try self.pieces(pieces, of: name)
        }
        let resources = version3 ? element.first("resources")?.all("url") ?? [] : element.all("url")
        var sources: [(Source, Int)] = []
        for (order, url) in resources.enumerated() {
            let address = url.text.trimmed
            // The scheme is what comes before the first colon (`split` would skip an empty one: ":http://…").
            let scheme = address.prefix { $0 != ":" }.lowercased()
            guard ["http", "https", "ftp"].contains(scheme), address.contains("://") else { continue }
            var priority: Int?
            if version3 {
                priority = url.attributes["preference"].flatMap { Int($0) }.map { 101 - min(100, max(0, $0)) }
            } else {
                priority = url.attributes["priority"].flatMap { Int($0) }.map { min(999_999, max(1, $0)) }
            }
            let location = url.attributes["location"].map { $0.lowercased() }.flatMap {
                $0.count == 2 && $0.allSatisfy(\.isLetter) ? $0 : nil
            }
            sources.append((Source(url: address, priority: priority, location: location), order))
        }
        sources.sort { ($0.0.priority ?? 999_999, $0.1) < ($1.0.priority ?? 999_999, $1.1) }
        file.urls = sources.map(\.0)
        return file
    }

    static func pieces(_ element: XMLElement, of name: String) throws(DownloadError) -> Pieces? {
        guard let text = element.attributes["length"], let length = Int64(text), (1...largestSize).contains(length)
        else {
            throw DownloadError(.invalidResponse, "the Metalink's pieces of \(name) have no length")
        }
        guard let algorithm = algorithm(element.attributes["type"]) else { return nil }
        var hashes: [String] = []
        for hash in element.all("hash") {
            guard let checksum = checksum(element.attributes["type"], hash.text) else {
                throw DownloadError(.invalidResponse, "a piece hash of \(name) is not \(algorithm.rawValue) hex")
            }
            hashes.append(checksum.hex)
        }
        guard !hashes.isEmpty else { return nil }
        return Pieces(length: length, algorithm: algorithm, hashes: hashes)
    }

    /// The algorithm a Metalink names (`sha-256`, `sha256`, `md5`, …), nil for one Haul does not check.
    static func algorithm(_ type: String?) -> Checksum.Algorithm? {
        guard let type else { return nil }
        return Checksum.Algorithm(rawValue: type.lowercased().replacingOccurrences(of: "-", with: ""))
    }

    static func checksum(_ type: String?, _ text: String) -> Checksum? {
        guard let algorithm = algorithm(type) else { return nil }
        return try? Checksum(parsing: "\(algorithm.rawValue)=\(text.trimmed.lowercased())")
    }
}

extension String {
    fileprivate var trimmed: String {
        var slice = Substring(self)
        while let first = slice.first, first.isWhitespace { slice.removeFirst() }
        while let last = slice.last, last.isWhitespace { slice.removeLast() }
        return String(slice)
    }
}
