/// An expected checksum given as `ALGO=HEX`.
public struct Checksum: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The supported digest algorithms.
    public enum Algorithm: String, Sendable, Codable, CaseIterable {
        case sha256, sha512, sha1, md5

        /// Digest length in bytes.
        public var byteCount: Int {
            switch self {
            case .sha256: 32
            case .sha512: 64
            case .sha1: 20
            case .md5: 16
            }
        }
    }

    /// The algorithm.
    public var algorithm: Algorithm
    /// The expected digest, lowercase hex.
    public var hex: String

    /// Parses `sha256=…`; the error names what is wrong ("checksum 'sha256=ab': a sha256 digest is 64 hex digits").
    public init(parsing text: String) throws(DownloadError) {
        switch Self.parse(text) {
        case .success(let checksum): self = checksum
        case .failure(let problem): throw DownloadError(.invalidArgument, "checksum '\(text)'\(problem.reason)")
        }
    }

    /// What is wrong with a checksum's text: told after the text, as each door quotes it (the API's field, aria2's
    /// option and its own spelling of the algorithm).
    public enum Problem: Error, Equatable {
        /// Not `ALGO=HEX`, or an algorithm Haul does not know.
        case notAlgorithmAndDigest
        /// A digest that is not `algorithm`'s number of hex digits.
        case digestLength(Algorithm)

        /// The words that follow the quoted text: " is not ALGO=HEX …" or ": a sha256 digest is 64 hex digits".
        public var reason: String {
            switch self {
            case .notAlgorithmAndDigest:
                " is not ALGO=HEX with ALGO one of " + Algorithm.allCases.map(\.rawValue).joined(separator: ", ")
            case .digestLength(let algorithm):
                // "an md5", as it is read aloud ("em-dee-five").
                ": \(algorithm == .md5 ? "an" : "a") \(algorithm.rawValue) digest is \(algorithm.byteCount * 2) hex digits"
            }
        }
    }

    private init(algorithm: Algorithm, hex: String) {
        self.algorithm = algorithm
        self.hex = hex
    }

    /// Parses `sha256=…`, or says what is wrong.
    public static func parse(_ text: String) -> Result<Checksum, Problem> {
        let parts = text.split(separator: "=", maxSplits: 1).map(String.init)
        guard parts.count == 2, let algorithm = Algorithm(rawValue: parts[0].lowercased()) else {
            return .failure(.notAlgorithmAndDigest)
        }
        let hex = parts[1].lowercased()
        guard hex.count == algorithm.byteCount * 2, hex.allSatisfy({ $0.isHexDigit && $0.isASCII }) else {
            return .failure(.digestLength(algorithm))
        }
        return .success(Checksum(algorithm: algorithm, hex: hex))
    }

    /// The `ALGO=HEX` form.
    public var description: String { "\(algorithm.rawValue)=\(hex)" }
}
