import Crypto
import Foundation
import HaulCore

/// Identifies one download.
public struct DownloadID: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The id as stored (a UUID string).
    public var rawValue: String

    /// Wraps a stored id.
    public init(_ rawValue: String) { self.rawValue = rawValue }

    public var description: String { rawValue }

    /// 16 hex digits of the id, the random ones (aria2's gid of the download). Haul's ids are UUIDs; a time-ordered
    /// one (version 7, as new downloads get) begins with its time, so its last 16 hex digits are taken, and an older
    /// random one (version 4) keeps its first 16. For an id with fewer hex digits, the first 16 of its SHA-256. The
    /// store of a fleet computes the same (`haul_brief_id`) to find a download by it.
    public var brief: String {
        let hex = rawValue.lowercased().filter { $0.isHexDigit && $0.isASCII }
        if hex.count == 32 {
            let version = hex[hex.index(hex.startIndex, offsetBy: 12)]
            return String(version == "7" ? hex.suffix(16) : hex.prefix(16))
        }
        if hex.count >= 16 { return String(hex.prefix(16)) }
        return String(SHA256.hash(data: Data(rawValue.utf8)).map { String(format: "%02x", $0) }.joined().prefix(16))
    }

    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// Where a download is, in numbers.
public struct DownloadProgress: Sendable, Equatable, Codable {
    /// The download.
    public var id: DownloadID
    /// Bytes received so far (including bytes held from earlier runs).
    public var receivedBytes: Int64
    /// The full length, when known.
    public var totalBytes: Int64?
    /// Current speed over the last few seconds.
    public var bytesPerSecond: Double
    /// Time left at the current speed, when the length is known.
    public var secondsRemaining: Double?
    /// Connections open for this download right now.
    public var connections: Int = 1
    /// Each server's state and speed, the download's own URL first, then its mirrors; nil without mirrors.
    public var mirrors: [MirrorStatus]?

    /// Makes progress.
    public init(
        id: DownloadID, receivedBytes: Int64, totalBytes: Int64?, bytesPerSecond: Double,
        secondsRemaining: Double? = nil,
        connections: Int = 1, mirrors: [MirrorStatus]? = nil
    ) {
        self.mirrors = mirrors
        self.id = id
        self.receivedBytes = receivedBytes
        self.totalBytes = totalBytes
        self.bytesPerSecond = bytesPerSecond
        self.secondsRemaining = secondsRemaining
        self.connections = connections
    }
}

/// What a finished download produced.
public struct DownloadResult: Sendable, Equatable, Codable {
    /// The download.
    public var id: DownloadID
    /// The URL asked for.
    public var url: String
    /// Where the file is.
    public var path: String
    /// Its length.
    public var bytes: Int64
    /// Its SHA-256, when computed (`computesSHA256` or a checksum was given).
    public var sha256: String?
    /// Seconds this run took.
    public var seconds: Double
    /// The offset this run started from (0 for a fresh download).
    public var resumedFrom: Int64
    /// Whether the file was already complete and nothing was fetched.
    public var wasAlreadyComplete: Bool

    /// Makes a result.
    public init(
        id: DownloadID, url: String, path: String, bytes: Int64, sha256: String?, seconds: Double, resumedFrom: Int64,
        wasAlreadyComplete: Bool
    ) {
        self.id = id
        self.url = url
        self.path = path
        self.bytes = bytes
        self.sha256 = sha256
        self.seconds = seconds
        self.resumedFrom = resumedFrom
        self.wasAlreadyComplete = wasAlreadyComplete
    }
}

/// Something that happened to the downloads of a manager, delivered to subscribers in the order it happened.
///
/// A state change, a new destination, an error, a move in the queue: each is one `changed` event carrying the whole
/// download as it is now, so a subscriber never has to combine events to know a download. Completion and failure are
/// `changed` events with the state `completed` or `failed`, reported once.
public enum DownloadEvent: Sendable, Equatable, Codable {
    /// Everything at once: the first event of a subscription that cannot be served by replaying what it missed.
    indirect case snapshot(ManagerSnapshot)
    /// A download was added.
    indirect case added(DownloadSnapshot)
    /// A download changed: state, priority, place in the queue, destination, error, options.
    indirect case changed(DownloadSnapshot)
    /// Throttled progress of a running download.
    case progress(DownloadProgress)
    /// A retryable error; the download (or one of its connections) waits `delay`, then resumes.
    case retrying(DownloadID, error: DownloadError, delay: Duration)
    /// The download starts again from 0, at once: the remote file changed, the server stopped honouring ranges or
    /// answered a segment wrongly, the bytes held differed from the server's, or the checksum of a resumed download
    /// did not match. Not a failure: no retry is spent.
    case restarted(DownloadID, reason: String)
    /// A download was forgotten.
    case removed(DownloadID)
    /// Totals: speed of all downloads and a count per state (about once a second while anything runs).
    case stats(DownloadStats)
    /// The manager's settings changed.
    case settings(ManagerSettings)

    /// The download the event is about, nil for events about the whole manager.
    public var downloadID: DownloadID? {
        switch self {
        case .added(let snapshot), .changed(let snapshot): snapshot.id
        case .progress(let progress): progress.id
        case .retrying(let id, _, _), .removed(let id), .restarted(let id, _): id
        case .snapshot, .stats, .settings: nil
        }
    }

    /// The new state when this event reports one (`changed` or `added`).
    public var state: DownloadState? {
        switch self {
        case .added(let snapshot), .changed(let snapshot): snapshot.state
        default: nil
        }
    }

    /// What the event is without its contents: its case, and the state an `added` or `changed` one reports.
    public var kind: Kind {
        switch self {
        case .snapshot: Kind(.snapshot)
        case .added(let snapshot): Kind(.added, state: snapshot.state)
        case .changed(let snapshot): Kind(.changed, state: snapshot.state)
        case .progress: Kind(.progress)
        case .retrying: Kind(.retrying)
        case .restarted: Kind(.restarted)
        case .removed: Kind(.removed)
        case .stats: Kind(.stats)
        case .settings: Kind(.settings)
        }
    }

    /// An event's case, and the state an `added` or `changed` one reports: what a subscription's filter
    /// (`DownloadManager.events(for:wanted:)`) decides on. It is known before the event is made, so a change no
    /// subscriber wants (and no replay keeps) is never made into a snapshot.
    public struct Kind: Sendable, Hashable {
        /// The cases of `DownloadEvent`.
        public enum Name: Sendable, Hashable {
            case snapshot, added, changed, progress, retrying, restarted, removed, stats, settings
        }

        public var name: Name
        /// The state of an `added` or `changed` event's download; nil for the others.
        public var state: DownloadState?

        /// A kind of event.
        public init(_ name: Name, state: DownloadState? = nil) {
            self.name = name
            self.state = state
        }
    }
}

/// A place in a manager's event stream: the run of the store it was emitted in, and its number within that run.
/// Runs are counted in the store, so ids never repeat across restarts.
public struct EventID: Hashable, Sendable, Comparable, Codable, LosslessStringConvertible {
    /// The store's run (one more each time a manager opens the store).
    public var run: Int64
    /// The event's number within the run, from 1; 0 before any event.
    public var sequence: UInt64

    /// Makes an id.
    public init(run: Int64, sequence: UInt64) {
        self.run = run
        self.sequence = sequence
    }

    /// Parses `RUN-SEQUENCE`, as `description` writes it (and a client sends back as `Last-Event-ID`).
    public init?(_ description: String) {
        let parts = description.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, let run = Int64(parts[0]), run >= 0, let sequence = UInt64(parts[1]) else {
            return nil
        }
        self.init(run: run, sequence: sequence)
    }

    public var description: String { "\(run)-\(sequence)" }

    public static func < (lhs: EventID, rhs: EventID) -> Bool {
        (lhs.run, lhs.sequence) < (rhs.run, rhs.sequence)
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let id = EventID(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "bad id \(text)"))
        }
        self = id
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// An event with its id.
public struct SequencedEvent: Sendable, Equatable {
    /// Its place in the stream; a subscriber that reconnects after it gets what followed.
    public var id: EventID
    /// What happened.
    public var event: DownloadEvent
}

/// New download ids: time-ordered (version 7) UUIDs in lower case: 48 bits of the Unix time in milliseconds, then 74
/// random bits (RFC 9562). Ordered by time, a new id lands at the end of the store's index of ids: with random
/// (version 4) ids every add of a group commit wrote a different page of that index to the WAL (33,900 writes for
/// 10,000 adds one at a time), and the ids still say nothing a client could guess beyond the moment of the add.
/// The random bits come from the kernel's random source read 256 ids at a time: Foundation's `UUID()` opens, reads
/// and closes /dev/urandom for every id on Linux, three system calls for each download of a list.
struct DownloadIDSource {
    private var pool: [UInt8] = []
    private var next = 0
    /// The time an id carries, in milliseconds since 1970 (the wall clock, read per id; an id is a name, not a
    /// measurement, so the engine's injected clock has no say).
    var now: () -> UInt64 = {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return UInt64(max(0, spec.tv_sec)) * 1000 + UInt64(max(0, spec.tv_nsec)) / 1_000_000
    }

    mutating func make() -> DownloadID {
        if next + 16 > pool.count { refill() }
        var bytes = Array(pool[next..<next + 16])
        next += 16
        let milliseconds = now()
        for index in 0..<6 { bytes[index] = UInt8(truncatingIfNeeded: milliseconds >> (40 - 8 * UInt64(index))) }
        bytes[6] = bytes[6] & 0x0F | 0x70  // version 7
        bytes[8] = bytes[8] & 0x3F | 0x80  // RFC 4122 variant
        let hex = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(36)
        for (index, byte) in bytes.enumerated() {
            if index == 4 || index == 6 || index == 8 || index == 10 { text.append(UInt8(ascii: "-")) }
            text.append(hex[Int(byte >> 4)])
            text.append(hex[Int(byte & 0x0F)])
        }
        return DownloadID(String(decoding: text, as: UTF8.self))
    }

    private mutating func refill() {
        // One read of the kernel's random source for 256 ids; the standard generator (the same source) when it
        // cannot be read.
        if let random = FileHandle(forReadingAtPath: "/dev/urandom") {
            pool = [UInt8]((try? random.read(upToCount: 4096)) ?? Data())
            try? random.close()
        }
        if pool.count < 4096 {
            var generator = SystemRandomNumberGenerator()
            pool = (0..<4096).map { _ in generator.next() }
        }
        next = 0
    }
}
