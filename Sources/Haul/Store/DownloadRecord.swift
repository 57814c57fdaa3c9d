import Foundation
import GRDB
import HaulCore
import Synchronization

/// One download as the store keeps it.
public struct DownloadRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "download"

    /// The fields, in one storage shared by every copy until one of them changes (copy-on-write, as
    /// `DownloadOptions`): the manager, its catalog, the runner, the store's writes and the snapshots each hold a
    /// download's record, and a copy of the fields themselves retains each string and array among them.
    fileprivate struct Fields: Codable, Equatable {
        var id: String
        var url: String
        var finalURL: String?
        var directory: String?
        var destination: String?
        var state: DownloadState
        var totalLength: Int64?
        var durableOffset: Int64
        var etag: String?
        var lastModified: String?
        var isLastModifiedStrong: Bool
        var isResumable: Bool?
        var isPartVerified: Bool
        var mayReplaceDestination: Bool
        var attempts: Int
        var lastError: String?
        var options: DownloadOptions
        var priority: Int
        var queuePosition: Double
        var prerequisites: [String]
        var rateLimit: Int64?
        var segments: [Segment]?
        var activeConnections: Int
        var createdAt: Date
        var updatedAt: Date
        var errorCode: String?
        var errorStatus: Int?
        var origin: DownloadOrigin
        var completedAt: Date?
        var folderDevice: Int64?
        var folderInode: Int64?
        var partDevice: Int64?
        var partInode: Int64?
        var handOver: PartHandOver?
        var worker: String?
        var notice: PendingNotice?
    }

    /// Written only while uniquely referenced (`change`), so sharing it between threads is safe.
    private final class Storage: @unchecked Sendable {
        var fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private var storage: Storage

    private mutating func change(_ body: (inout Fields) -> Void) {
        if !isKnownUniquelyReferenced(&storage) { storage = Storage(storage.fields) }
        body(&storage.fields)
    }

    /// A record with these fields (every optional one nil unless given).
    init(
        id: String,
        url: String,
        finalURL: String? = nil,
        directory: String? = nil,
        destination: String? = nil,
        state: DownloadState,
        totalLength: Int64? = nil,
        durableOffset: Int64,
        etag: String? = nil,
        lastModified: String? = nil,
        isLastModifiedStrong: Bool,
        isResumable: Bool? = nil,
        isPartVerified: Bool,
        mayReplaceDestination: Bool,
        attempts: Int,
        lastError: String? = nil,
        options: DownloadOptions,
        priority: Int,
        queuePosition: Double,
        prerequisites: [String],
        rateLimit: Int64? = nil,
        segments: [Segment]? = nil,
        activeConnections: Int,
        createdAt: Date,
        updatedAt: Date,
        errorCode: String? = nil,
        errorStatus: Int? = nil,
        origin: DownloadOrigin,
        completedAt: Date? = nil,
        folderDevice: Int64? = nil,
        folderInode: Int64? = nil,
        partDevice: Int64? = nil,
        partInode: Int64? = nil,
        handOver: PartHandOver? = nil,
        worker: String? = nil,
        notice: PendingNotice? = nil
    ) {
        storage = Storage(
            Fields(
                id: id, url: url, finalURL: finalURL, directory: directory, destination: destination, state: state,
                totalLength: totalLength, durableOffset: durableOffset, etag: etag, lastModified: lastModified,
                isLastModifiedStrong: isLastModifiedStrong, isResumable: isResumable, isPartVerified: isPartVerified,
                mayReplaceDestination: mayReplaceDestination, attempts: attempts, lastError: lastError,
                options: options, priority: priority, queuePosition: queuePosition, prerequisites: prerequisites,
                rateLimit: rateLimit, segments: segments, activeConnections: activeConnections, createdAt: createdAt,
                updatedAt: updatedAt, errorCode: errorCode, errorStatus: errorStatus, origin: origin,
                completedAt: completedAt, folderDevice: folderDevice, folderInode: folderInode, partDevice: partDevice,
                partInode: partInode, handOver: handOver, worker: worker, notice: notice))
    }

    public init(from decoder: any Decoder) throws {
        storage = Storage(try Fields(from: decoder))
    }

    public func encode(to encoder: any Encoder) throws {
        try storage.fields.encode(to: encoder)
    }

    public static func == (left: DownloadRecord, right: DownloadRecord) -> Bool {
        left.storage === right.storage || left.storage.fields == right.storage.fields
    }

    /// The download's id (a UUID string).
    public var id: String {
        get { storage.fields.id }
        set { change { $0.id = newValue } }
    }
    /// The URL the user asked for.
    public var url: String {
        get { storage.fields.url }
        set { change { $0.url = newValue } }
    }
    /// The URL that answered last, after redirects (for information; requests always start from `url`).
    public var finalURL: String? {
        get { storage.fields.finalURL }
        set { change { $0.finalURL = newValue } }
    }
    /// For downloads into a folder under a server-chosen name: the folder.
    public var directory: String? {
        get { storage.fields.directory }
        set { change { $0.directory = newValue } }
    }
    /// The destination path; nil until a folder download has its name.
    public var destination: String? {
        get { storage.fields.destination }
        set { change { $0.destination = newValue } }
    }
    /// The state; it changes only through `apply(_:)`, by the state machine's table.
    public private(set) var state: DownloadState {
        get { storage.fields.state }
        set { change { $0.state = newValue } }
    }
    /// The remote length, when known.
    public var totalLength: Int64? {
        get { storage.fields.totalLength }
        set { change { $0.totalLength = newValue } }
    }
    /// Bytes of the part file known to be on disk (fsynced before this was written).
    public var durableOffset: Int64 {
        get { storage.fields.durableOffset }
        set { change { $0.durableOffset = newValue } }
    }
    /// The ETag of the version being fetched.
    public var etag: String? {
        get { storage.fields.etag }
        set { change { $0.etag = newValue } }
    }
    /// The Last-Modified of the version being fetched.
    public var lastModified: String? {
        get { storage.fields.lastModified }
        set { change { $0.lastModified = newValue } }
    }
    /// Whether Last-Modified is strong.
    public var isLastModifiedStrong: Bool {
        get { storage.fields.isLastModifiedStrong }
        set { change { $0.isLastModifiedStrong = newValue } }
    }
    /// Whether the server honours ranges; nil before the first answer.
    public var isResumable: Bool? {
        get { storage.fields.isResumable }
        set { change { $0.isResumable = newValue } }
    }
    /// Whether the part file's bytes were written by Haul for this record (false for an adopted file, whose bytes
    /// are compared with the server before anything is appended).
    public var isPartVerified: Bool {
        get { storage.fields.isPartVerified }
        set { change { $0.isPartVerified = newValue } }
    }
    /// Whether Haul may replace the destination file (it created it, or `--overwrite` was given).
    public var mayReplaceDestination: Bool {
        get { storage.fields.mayReplaceDestination }
        set { change { $0.mayReplaceDestination = newValue } }
    }
    /// Failed attempts in a row without progress.
    public var attempts: Int {
        get { storage.fields.attempts }
        set { change { $0.attempts = newValue } }
    }
    /// The last error's message.
    public var lastError: String? {
        get { storage.fields.lastError }
        set { change { $0.lastError = newValue } }
    }
    /// The options the download was added with (JSON).
    public var options: DownloadOptions {
        get { storage.fields.options }
        set { change { $0.options = newValue } }
    }
    /// Queue order: higher priority first (`DownloadPriority` raw values).
    public var priority: Int {
        get { storage.fields.priority }
        set { change { $0.priority = newValue } }
    }
    /// Queue order within a priority: lower first. New downloads go last; `move(_:before:)` places one between two.
    public var queuePosition: Double {
        get { storage.fields.queuePosition }
        set { change { $0.queuePosition = newValue } }
    }
    /// Downloads that must complete before this one starts.
    public var prerequisites: [String] {
        get { storage.fields.prerequisites }
        set { change { $0.prerequisites = newValue } }
    }
    /// This download's own rate limit in bytes a second, nil for none.
    public var rateLimit: Int64? {
        get { storage.fields.rateLimit }
        set { change { $0.rateLimit = newValue } }
    }
    /// For a download fetched over several connections: its segments, each with its durable offset (fsynced before
    /// this was written). Nil for one connection, where `durableOffset` alone says what is held.
    public var segments: [Segment]? {
        get { storage.fields.segments }
        set { change { $0.segments = newValue } }
    }
    /// Connections open right now (0 when not running), for `haul ls`.
    public var activeConnections: Int {
        get { storage.fields.activeConnections }
        set { change { $0.activeConnections = newValue } }
    }
    /// When it was added.
    public var createdAt: Date {
        get { storage.fields.createdAt }
        set { change { $0.createdAt = newValue } }
    }
    /// When it last changed.
    public var updatedAt: Date {
        get { storage.fields.updatedAt }
        set { change { $0.updatedAt = newValue } }
    }
    /// The last error's code (`DownloadError.Code`'s name), beside `lastError`.
    public var errorCode: String? {
        get { storage.fields.errorCode }
        set { change { $0.errorCode = newValue } }
    }
    /// The HTTP status of the last error, when it was about one.
    public var errorStatus: Int? {
        get { storage.fields.errorStatus }
        set { change { $0.errorStatus = newValue } }
    }
    /// Who added it.
    public var origin: DownloadOrigin {
        get { storage.fields.origin }
        set { change { $0.origin = newValue } }
    }
    /// When it completed.
    public var completedAt: Date? {
        get { storage.fields.completedAt }
        set { change { $0.completedAt = newValue } }
    }
    /// The device of the download's folder when it was added (`folderIdentity`): at every start the folder opened
    /// must be this one.
    public var folderDevice: Int64? {
        get { storage.fields.folderDevice }
        set { change { $0.folderDevice = newValue } }
    }
    /// The inode of the download's folder when it was added (`folderIdentity`).
    public var folderInode: Int64? {
        get { storage.fields.folderInode }
        set { change { $0.folderInode = newValue } }
    }
    /// The device of the part file Haul made (`partIdentity`), which the finished file keeps: only this file is
    /// written to, recognised as finished, or deleted.
    public var partDevice: Int64? {
        get { storage.fields.partDevice }
        set { change { $0.partDevice = newValue } }
    }
    /// The inode of the part file Haul made (`partIdentity`).
    public var partInode: Int64? {
        get { storage.fields.partInode }
        set { change { $0.partInode = newValue } }
    }
    /// Whether the part file is the user's, handed over with `-c` (`DownloadFolder.handOver`), and from which name;
    /// nil for a part file Haul made. It holds the user's bytes: a cancel or a remove gives it back instead of
    /// deleting it (`DownloadFolder.deleteFiles`).
    public var handOver: PartHandOver? {
        get { storage.fields.handOver }
        set { change { $0.handOver = newValue } }
    }
    /// The worker of a fleet that holds a live lease of it, as the shared store read it (not a column of its own:
    /// never written, and nil in a store of one machine).
    public var worker: String? {
        get { storage.fields.worker }
        set { change { $0.worker = newValue } }
    }
    /// The notice of the download's end that some hook or webhook has yet to hear (`Notices`), nil when none.
    public var notice: PendingNotice? {
        get { storage.fields.notice }
        set { change { $0.notice = newValue } }
    }

    /// Column names for queries.
    public enum Columns {
        static let id = Column("id")
        static let url = Column("url")
        static let directory = Column("directory")
        static let destination = Column("destination")
        static let state = Column("state")
        static let durableOffset = Column("durableOffset")
        static let priority = Column("priority")
        static let queuePosition = Column("queuePosition")
        static let createdAt = Column("createdAt")
    }

    /// What the store knows of the remote file, nil before any answer.
    public var remoteFacts: RemoteFacts? {
        get {
            guard let isResumable else { return nil }
            return RemoteFacts(
                totalLength: totalLength,
                validators: Validators(
                    etag: etag.flatMap(EntityTag.init),
                    lastModified: lastModified,
                    isLastModifiedStrong: isLastModifiedStrong
                ),
                isResumable: isResumable
            )
        }
        set {
            totalLength = newValue?.totalLength
            etag = newValue?.validators.etag?.description
            lastModified = newValue?.validators.lastModified
            isLastModifiedStrong = newValue?.validators.isLastModifiedStrong ?? false
            isResumable = newValue?.isResumable
        }
    }

    /// The last error as the store keeps it (code, message, status); setting it sets all three.
    public var error: DownloadError? {
        get {
            guard let lastError else { return nil }
            return DownloadError(
                errorCode.flatMap(DownloadError.Code.init(named:)) ?? .retriesExhausted, lastError, status: errorStatus)
        }
        set {
            lastError = newValue?.message
            errorCode = newValue?.code.description
            errorStatus = newValue?.status
        }
    }

    /// The bytes from the part file's start that the store counts as held, with no gap before them: the whole mark of
    /// one connection, and the segments that follow on from the first byte of several.
    public var heldPrefix: Int64 {
        guard let segments else { return durableOffset }
        var end: Int64 = 0
        for segment in segments.sorted(by: { $0.start < $1.start }) {
            guard segment.start <= end else { break }
            end = max(end, segment.offset)
        }
        return end
    }

    /// The part file's path, when the destination is known.
    public var partPath: String? { destination.map { $0 + ".part" } }

    /// The download's folder: `directory`, or the folder of `destination`.
    /// The folder of the download's file: its destination's once it has one (a sort rule may have put it in a folder
    /// beneath `directory`), else `directory`.
    public var folderPath: String? { destination.map(PathName.folder(of:)) ?? directory }

    /// The identity of the download's folder, recorded when it was added; nil in a row written before Haul recorded
    /// it.
    public var folderIdentity: FileIdentity? {
        get { FileIdentity(stored: folderDevice, folderInode) }
        set {
            folderDevice = newValue?.stored.device
            folderInode = newValue?.stored.inode
        }
    }

    /// The identity of the part file Haul made (and of the finished file, which keeps it); nil before it made one.
    public var partIdentity: FileIdentity? {
        get { FileIdentity(stored: partDevice, partInode) }
        set {
            partDevice = newValue?.stored.device
            partInode = newValue?.stored.inode
        }
    }

    /// Whether a part file or final name that is not Haul's sends the download to the next free name (`name (1).ext`)
    /// instead of stopping it: downloads into a folder under the server's name, and every download of the daemon's
    /// network door. A file the user named (`-o`) stops with an error instead.
    var takesFreeName: Bool { directory != nil || origin.isConfined }
}

/// How the part file of a `-c` download came from the user (`DownloadRecord.handOver`).
public enum PartHandOver: Int, Codable, Sendable, DatabaseValueConvertible {
    /// It was the part file's name already (another program's `NAME.part`): given back, it stays there.
    case atPartName = 1
    /// It was the download's own name, moved to the part file's when the download started: given back, it goes back.
    case fromName = 2
}

extension DownloadState: DatabaseValueConvertible {}
extension DownloadOrigin: DatabaseValueConvertible {}
extension DownloadOptions: DatabaseValueConvertible {
    public var databaseValue: DatabaseValue {
        (try? String(decoding: JSONEncoder().encode(self), as: UTF8.self))?.databaseValue ?? .null
    }

    public static func fromDatabaseValue(_ value: DatabaseValue) -> DownloadOptions? {
        guard let text = String.fromDatabaseValue(value) else { return nil }
        return try? JSONDecoder().decode(DownloadOptions.self, from: Data(text.utf8))
    }
}

extension DownloadRecord {
    /// The table's columns, in the order of `columnValues()`.
    package static let columnNames = [
        "id", "url", "finalURL", "directory", "destination", "state", "totalLength", "durableOffset", "etag",
        "lastModified", "isLastModifiedStrong", "isResumable", "isPartVerified", "mayReplaceDestination", "attempts",
        "lastError", "options", "priority", "queuePosition", "prerequisites", "rateLimit", "segments",
        "activeConnections", "createdAt", "updatedAt", "errorCode", "errorStatus", "origin", "completedAt",
        "folderDevice", "folderInode", "partDevice", "partInode", "notice", "handOver",
    ]

    /// Every column's value, in the order of `columnNames`. Arrays are stored as JSON text, as the `Codable`
    /// decoding expects; dates as seconds since 1970 (GRDB reads both; formatting them as text goes through ICU).
    package func columnValues() throws -> [DatabaseValue] {
        // A literal: the array is made once at its size, with no call for each value (every add builds one a download).
        let values: [DatabaseValue] = try [
            id.databaseValue,
            url.databaseValue,
            finalURL.databaseValue,
            directory.databaseValue,
            destination.databaseValue,
            state.databaseValue,
            totalLength.databaseValue,
            durableOffset.databaseValue,
            etag.databaseValue,
            lastModified.databaseValue,
            isLastModifiedStrong.databaseValue,
            isResumable.databaseValue,
            isPartVerified.databaseValue,
            mayReplaceDestination.databaseValue,
            attempts.databaseValue,
            lastError.databaseValue,
            OptionsColumn.value(of: options),
            priority.databaseValue,
            queuePosition.databaseValue,
            (prerequisites.isEmpty ? "[]" : String(decoding: JSONEncoder().encode(prerequisites), as: UTF8.self))
                .databaseValue,
            rateLimit.databaseValue,
            DownloadStore.json(segments).databaseValue,
            activeConnections.databaseValue,
            createdAt.timeIntervalSince1970.databaseValue,
            updatedAt.timeIntervalSince1970.databaseValue,
            errorCode.databaseValue,
            errorStatus.databaseValue,
            origin.rawValue.databaseValue,
            completedAt?.timeIntervalSince1970.databaseValue ?? .null,
            folderDevice.databaseValue,
            folderInode.databaseValue,
            partDevice.databaseValue,
            partInode.databaseValue,
            PendingNotice.column(notice),
            handOver?.rawValue.databaseValue ?? .null,
        ]
        return values
    }

    /// Writes the columns directly (GRDB's `Codable` path is several times slower, and a batch of a thousand small
    /// files saves records thousands of times).
    public func encode(to container: inout PersistenceContainer) throws {
        for (name, value) in zip(Self.columnNames, try columnValues()) { container[name] = value }
    }
}

/// The `options` column: JSON text, encoded once for a run of downloads added with the same options (a list of
/// ten thousand encodes one).
enum OptionsColumn {
    private static let last = Mutex<(DownloadOptions, DatabaseValue)?>(nil)

    static func value(of options: DownloadOptions) -> DatabaseValue {
        if let cached = last.withLock({ $0 }), cached.0 == options { return cached.1 }
        let value = options.databaseValue
        last.withLock { $0 = (options, value) }
        return value
    }
}

extension DownloadRecord {
    /// Moves the download to the state `event` leads to by `DownloadStateMachine`, or throws `illegalTransition`
    /// naming the state and the event and leaves it as it is.
    public mutating func apply(_ event: DownloadStateMachine.Event) throws(DownloadError) {
        var machine = DownloadStateMachine(state: state)
        state = try machine.apply(event)
    }
}

extension DownloadRecord {
    /// Takes in what a runner reports of the transfer: the names and identities, the remote file's facts, whether
    /// the part file's bytes are trusted, and the mark when the report has one. The manager's own fields (its state,
    /// which the runner never changes; priority, place, limit, options, prerequisites) stay.
    mutating func adopt(_ report: TransferReport) {
        destination = report.destination
        finalURL = report.finalURL ?? finalURL
        partIdentity = report.partIdentity
        handOver = report.handOver
        folderIdentity = report.folderIdentity ?? folderIdentity
        remoteFacts = report.facts
        isPartVerified = report.isPartVerified
        if let mark = report.mark { store(mark) }
    }

    /// Records that the part file durably holds the bytes `mark` counts.
    mutating func store(_ mark: TransferMachine.Checkpoint) {
        switch mark {
        case .offset(let offset):
            durableOffset = offset
            segments = nil
        case .segments(let held, let bytes):
            segments = held
            durableOffset = bytes
        }
    }

    /// Records a finished download: the file at `path`, all `bytes` of it held.
    mutating func complete(at path: String, bytes: Int64) {
        destination = path
        completedAt = completedAt ?? Date()
        durableOffset = bytes
        totalLength = bytes
        segments = nil
        attempts = 0
        error = nil
        mayReplaceDestination = true
        // Complete, the file is the download's, whoever began it.
        handOver = nil
    }
}
