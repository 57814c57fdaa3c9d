import Foundation
import GRDB
import HaulCore
import Testing

@testable import Haul

@Suite("Store rows")
struct StoreRowTests {
    @Test("text is stored as given: empty text stays empty (not NULL), and non-ASCII characters are kept")
    func textAsGiven() throws {
        let store = try DownloadStore()
        var record = Self.queued(
            id: "text", url: "http://h/caf\u{E9}", finalURL: "", destination: "/tmp/\u{4E0B}\u{8F7D}", etag: "")
        try store.insert([record])
        let inserted = try #require(try store.record(id: "text"))
        #expect(inserted.url == "http://h/caf\u{E9}" && inserted.destination == "/tmp/\u{4E0B}\u{8F7D}")
        #expect(inserted.finalURL == "" && inserted.etag == "")
        // An update binds its values the same way.
        record.finalURL = "\u{1F600}"
        record.destination = ""
        try store.save(try .transfer(record))
        let updated = try #require(try store.record(id: "text"))
        #expect(updated.finalURL == "\u{1F600}" && updated.destination == "" && updated.etag == "")
    }

    @Test("a transfer update and a completion write every column they name, the state and the name with them")
    func updates() throws {
        let store = try DownloadStore()
        var record = Self.queued(id: "name", url: "http://h/f", finalURL: nil, destination: "/tmp/f", etag: nil)
        try store.insert([record])
        // A started download's first transfer write stores that it runs.
        try record.apply(.started)
        record.destination = "/tmp/other"
        record.durableOffset = 4096
        record.finalURL = "http://h/g"
        record.handOver = .fromName
        try store.save(try .transfer(record))
        var stored = try #require(try store.record(id: "name"))
        #expect(stored.destination == "/tmp/other" && stored.durableOffset == 4096 && stored.finalURL == "http://h/g")
        #expect(stored.state == .running && stored.handOver == .fromName)
        try record.apply(.finished)
        record.complete(at: "/tmp/last", bytes: 8192)
        try store.save(try .completion(record))
        stored = try #require(try store.record(id: "name"))
        #expect(stored.destination == "/tmp/last" && stored.state == .completed && stored.completedAt != nil)
        #expect(stored.totalLength == 8192 && stored.durableOffset == 8192)
        #expect(stored.handOver == nil, "complete, the file is the download's")
    }

    @Test(
        "the bytes held from a part file's start: one connection's mark; of several, the segments that follow on from the first byte"
    )
    func heldPrefix() {
        var record = Self.queued(id: "p", url: "http://h/f", finalURL: nil, destination: "/tmp/f", etag: nil)
        record.durableOffset = 5000
        #expect(record.heldPrefix == 5000)
        // Listed out of order, as splits append them: 0..<300 is whole, 300..<600 holds 300..<450, the rest is after
        // a gap.
        record.segments = [
            Segment(start: 600, end: 900, offset: 900), Segment(start: 0, end: 300, offset: 300),
            Segment(start: 300, end: 600, offset: 450),
        ]
        #expect(record.heldPrefix == 450)
        record.segments = [Segment(start: 0, end: 300, offset: 0), Segment(start: 300, end: 600, offset: 600)]
        #expect(record.heldPrefix == 0)
    }

    @Test("a store this process made starts empty until something is written through it; a manager reads the rest")
    func startedEmpty() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-empty-\(UUID())").path
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: false,
            attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let made = try DownloadStore(directory: directory)
        #expect(made.startedEmpty)
        // The manager on it has nothing to read back, and runs as usual.
        var configuration = DownloadManager.Configuration(stateDirectory: nil)
        configuration.store = made
        configuration.startsStoredDownloads = false
        let first = try DownloadManager(configuration: configuration)
        #expect(try await first.snapshots().isEmpty)
        #expect(!made.startedEmpty)
        await first.shutdown()
        // Written before a manager starts on it: the manager reads it back.
        let other = "\(directory)/other"
        try FileManager.default.createDirectory(
            atPath: other, withIntermediateDirectories: false,
            attributes: [.posixPermissions: 0o700])
        let written = try DownloadStore(directory: other)
        try written.insert([Self.queued(id: "kept", url: "http://h/k", finalURL: nil, destination: "/tmp/k", etag: nil)]
        )
        #expect(!written.startedEmpty)
        configuration.store = written
        let second = try DownloadManager(configuration: configuration)
        #expect(try await second.snapshots().map(\.id.rawValue) == ["kept"])
        await second.shutdown()
        // Opened again, the store was not made by this opening.
        #expect(!(try DownloadStore(directory: other)).startedEmpty)
    }

    @Test("each run is numbered and stamped with its start, stored as GRDB stores a date")
    func runs() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-runs-\(UUID())").path
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: false,
            attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let before = Date()
        let store = try DownloadStore(directory: directory)
        let first = try store.beginRun()
        #expect(try store.beginRun() == first + 1)
        let after = Date()
        let (texts, stamps) = try DatabaseQueue(path: "\(directory)/haul.sqlite").read { db in
            (
                try String.fetchAll(db, sql: "SELECT startedAt FROM run ORDER BY id"),
                try Date.fetchAll(db, sql: "SELECT startedAt FROM run ORDER BY id")
            )
        }
        #expect(stamps.count == 2)
        // Text as GRDB writes a date, to the millisecond; read as GRDB reads one (UTC), the time of the run.
        for text in texts {
            #expect(text.wholeMatch(of: /\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}/) != nil, "startedAt \(text)")
        }
        for stamp in stamps {
            #expect(stamp.timeIntervalSince(before) > -0.001 && after.timeIntervalSince(stamp) > -0.001)
        }
    }

    /// A queued download's record with the given text columns.
    static func queued(id: String, url: String, finalURL: String?, destination: String, etag: String?)
        -> DownloadRecord
    {
        DownloadRecord(
            id: id, url: url, finalURL: finalURL, directory: nil, destination: destination,
            state: .queued, totalLength: nil, durableOffset: 0, etag: etag, lastModified: nil,
            isLastModifiedStrong: false, isResumable: nil, isPartVerified: true, mayReplaceDestination: false,
            attempts: 0, lastError: nil,
            options: DownloadOptions(), priority: 0, queuePosition: 1, prerequisites: [], rateLimit: nil, segments: nil,
            activeConnections: 0, createdAt: Date(), updatedAt: Date(), errorCode: nil, errorStatus: nil,
            origin: .library, completedAt: nil)
    }
}
