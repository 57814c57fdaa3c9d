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

    /// Parses `sha256=…`; the error names what is wrong.
    public init(parsing text: String) throws(DownloadError) {
        let parts = text.split(separator: "=", maxSplits: 1).map(String.init)
        guard parts.count == 2, let algorithm = Algorithm(rawValue: parts[0].lowercased()) else {
            let names = Algorithm.allCases.map(\.rawValue).joined(separator: ", ")
            throw DownloadError(.invalidArgument, "checksum '\(text)' is not ALGO=HEX with ALGO one of \(names)")
        }
        let hex = parts[1].lowercased()
        guard hex.count == algorithm.byteCount * 2, hex.allSatisfy({ $0.isHexDigit && $0.isASCII }) else {
            throw DownloadError(
                .invalidArgument,
                "checksum '\(text)': a \(algorithm.rawValue) digest is \(algorithm.byteCount * 2) hex digits"
            )
        }
        self.algorithm = algorithm
        self.hex = hex
    }

    /// The `ALGO=HEX` form.
    public var description: String { "\(algorithm.rawValue)=\(hex)" }
}
