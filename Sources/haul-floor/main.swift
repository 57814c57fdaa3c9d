// The Swift floor of the small-files comparison (bench/run.sh): what the parts the brief prescribes cost by
// themselves. The URLs of a list are fetched with AsyncHTTPClient, `-j` at a time, on Swift concurrency, and each file
// is written with Haul's guarantees and nothing else: created exclusively as NAME.part, `pwrite`n chunk by chunk as
// the body arrives, `fsync`ed, moved to NAME without replacing anything, and its folder `fsync`ed, one folder sync
// covering every rename made before it started (as Haul's FolderSyncs); the create in one trip to a thread pool of 16,
// and the sync, the move and the folder's sync in another (as Haul's file-system threads). No state database, no
// queue, no events, no retries, no resume: a file that fails stops the run.
//
// With `--no-sync` it syncs nothing (the part file is still created exclusively and moved without replacing): what
// AsyncHTTPClient costs for the network and the writes alone, to set against curl, which syncs nothing either.
//
// With `--store FILE` it also keeps the state a download manager must keep, in the order Haul's durability rules ask
// (docs/design.md), through the prescribed store (GRDB over SQLite in WAL mode) and nothing of Haul's: every URL's
// row is inserted and synced before the first request (an acknowledged add); each file's row holds its name, length
// and the part file's device and inode, synced, before the first byte is written (a part file is adopted only by a
// durable row that names it, and a finished file is recognised by it); each completed state is stored, not synced,
// after the move. The commits of concurrent files are grouped (a waiting file's commit takes every write queued
// with it, and one WAL sync covers them). So this is the floor of the parts with the store: what Haul would cost
// with no manager, no machine, no events and no retries.
//
// `bench/floor.c` is the same guarantees with no network; curl is the network with no guarantees. Between them and
// `haul get`, this says how much of Haul's cost is the stack (the HTTP client, NIO, Swift's runtime) and how much is
// Haul's own work (the store, the manager, the transfer machine).
//
//   haul-floor LIST DIR [PARALLEL] [--no-sync] [--store FILE]
import AsyncHTTPClient
import Foundation
import GRDB
import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

@main
struct Floor {
    static func main() async throws {
        var arguments = CommandLine.arguments
        let syncs = !arguments.contains("--no-sync")
        arguments.removeAll { $0 == "--no-sync" }
        var storePath: String?
        if let index = arguments.firstIndex(of: "--store"), index + 1 < arguments.count {
            storePath = arguments[index + 1]
            arguments.removeSubrange(index...index + 1)
        }
        guard arguments.count == 3 || arguments.count == 4, let list = try? readLines(arguments[1]),
            let parallel = arguments.count == 4 ? Int(arguments[3]) : 16, parallel > 0
        else {
            print("usage: haul-floor LIST DIR [PARALLEL] [--no-sync] [--store FILE]")
            exit(2)
        }
        let folder = arguments[2]
        let ledger: Ledger?
        do { ledger = try storePath.map { try Ledger(path: $0, urls: list) } } catch {
            print("haul-floor: cannot open the store: \(error)")
            exit(1)
        }
        let folderSyncs = FolderSyncs(folder)
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow, decompression: .disabled)
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 64)
        configuration.httpVersion = .http1Only
        // No spans: no tracer is bootstrapped, and the default no-op one still had each request build its attributes.
        configuration.tracing.tracer = nil
        let client = HTTPClient(
            eventLoopGroupProvider: .shared(MultiThreadedEventLoopGroup.singleton), configuration: configuration)
        let pool = NIOThreadPool(numberOfThreads: 16)
        pool.start()
        let next = Counter()
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<parallel {
                    group.addTask {
                        while true {
                            let index = next.value.add(1, ordering: .relaxed).oldValue
                            guard index < list.count else { return }
                            try await fetch(
                                list[index], number: index, into: folder, client: client, pool: pool,
                                folderSyncs: syncs ? folderSyncs : nil, ledger: ledger)
                        }
                    }
                }
                try await group.waitForAll()
            }
        } catch {
            print("haul-floor: \(error)")
            try await client.shutdown()
            exit(1)
        }
        try await client.shutdown()
        try await pool.shutdownGracefully()
        // The completed states no one waited for are committed before the exit.
        _ = await ledger?.commit(nil)
    }

    static func fetch(
        _ url: String, number: Int, into folder: String, client: HTTPClient, pool: NIOThreadPool,
        folderSyncs: FolderSyncs?, ledger: Ledger?
    ) async throws {
        let response = try await client.execute(HTTPClientRequest(url: url), timeout: .seconds(30))
        guard response.status == .ok else { throw FloorError("\(url): \(response.status)") }
        let name = url.split(separator: "/").last.map(String.init) ?? "index"
        let final = folder + "/" + name
        let part = final + ".part"
        // On the thread pool, as Haul makes its part files: a create waits for the folder's lock, which other
        // creates hold while they read the disk, and would stall a thread of the cooperative pool.
        let file = try await pool.runIfActive {
            let file = open(part, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            guard file >= 0 else { throw FloorError("cannot create \(part)") }
            return file
        }
        if let ledger {
            var status = stat()
            guard fstat(file, &status) == 0 else { throw FloorError("cannot look at \(part)") }
            let length = response.headers.first(name: "Content-Length").flatMap { Int64($0) }
            let row = Ledger.Write.identity(
                id: Int64(number), destination: final, length: length, device: Int64(status.st_dev),
                inode: Int64(status.st_ino))
            if let failure = await ledger.commit(row) { throw failure }
        }
        var offset: Int64 = 0
        for try await chunk in response.body {
            let written = chunk.withUnsafeReadableBytes { pwrite(file, $0.baseAddress, $0.count, off_t(offset)) }
            guard written == chunk.readableBytes else { throw FloorError("cannot write \(part)") }
            offset += Int64(written)
        }
        guard let folderSyncs else {
            close(file)
            try move(part, to: final)
            return
        }
        try await pool.runIfActive {
            guard fsync(file) == 0 else { throw FloorError("cannot sync \(part)") }
            close(file)
            try move(part, to: final)
            try folderSyncs.sync()
        }
        ledger?.submit(.completed(id: Int64(number)))
    }

    static func move(_ part: String, to final: String) throws {
        guard let renameat2, renameat2(AT_FDCWD, part, AT_FDCWD, final, 1) == 0 else {
            throw FloorError("cannot move \(part)")
        }
    }

    static func readLines(_ path: String) throws -> [String] {
        guard let stream = fopen(path, "r") else { throw FloorError("cannot read \(path)") }
        defer { fclose(stream) }
        var lines: [String] = []
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        while getline(&line, &capacity, stream) > 0, let line {
            let text = String(cString: line).trimmingSuffix()
            if !text.isEmpty { lines.append(text) }
        }
        free(line)
        return lines
    }
}

/// glibc's `renameat2`, looked up as Haul does (`PartFile`): Swift sees no declaration of it.
let renameat2: (@convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32)? = {
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "renameat2") else { return nil }
    return unsafeBitCast(
        symbol, to: (@convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32).self)
}()

/// One folder's syncs, shared as Haul's `FolderSyncs` shares them: a sync covers every rename made before it started,
/// and a caller whose rename came while one ran waits for the next.
final class FolderSyncs: @unchecked Sendable {
    private let folder: String
    // Allocated: a pthread mutex or condition must not move, and a Swift property's address is not fixed.
    private let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let changed = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var requested: UInt64 = 0
    private var synced: UInt64 = 0
    private var isSyncing = false

    init(_ folder: String) {
        self.folder = folder
        pthread_mutex_init(lock, nil)
        pthread_cond_init(changed, nil)
    }

    func sync() throws {
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        requested += 1
        let ticket = requested
        while synced < ticket {
            if isSyncing {
                pthread_cond_wait(changed, lock)
                continue
            }
            isSyncing = true
            let covered = requested
            pthread_mutex_unlock(lock)
            let directory = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            let failed = directory < 0 || fsync(directory) != 0
            if directory >= 0 { close(directory) }
            pthread_mutex_lock(lock)
            isSyncing = false
            pthread_cond_broadcast(changed)
            if failed { throw FloorError("cannot sync \(folder)") }
            synced = covered
        }
    }
}

/// The floor's store: one row a URL in a GRDB database pool (SQLite, WAL, `synchronous=NORMAL`), written by one thread
/// that commits every write queued since its last commit in one transaction, synced (`synchronous=FULL` for that
/// commit) when any of them is waited for.
final class Ledger: @unchecked Sendable {
    enum Write {
        case identity(id: Int64, destination: String, length: Int64?, device: Int64, inode: Int64)
        case completed(id: Int64)
    }

    private let pool: DatabasePool
    private let lock = NSCondition()
    private var pending: [(write: Write, waiter: CheckedContinuation<FloorError?, Never>?)] = []
    private var flushes: [CheckedContinuation<FloorError?, Never>] = []

    /// Opens a new database at `path` with a row for each of `urls`, synced.
    init(path: String, urls: [String]) throws {
        var configuration = Configuration()
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = NORMAL") }
        pool = try DatabasePool(path: path, configuration: configuration)
        try pool.writeWithoutTransaction { db in
            try db.execute(
                sql: """
                    CREATE TABLE download (id INTEGER PRIMARY KEY, url TEXT NOT NULL, destination TEXT,
                    state TEXT NOT NULL, totalLength INTEGER, partDevice INTEGER, partInode INTEGER, updatedAt REAL)
                    """)
            try Self.durably(db) {
                try Self.transaction(db) {
                    let insert = try db.makeStatement(
                        sql: "INSERT INTO download (id, url, state, updatedAt) VALUES (?, ?, 'queued', ?)")
                    let now = Date().timeIntervalSince1970
                    for (index, url) in urls.enumerated() {
                        try insert.execute(arguments: [index, url, now])
                    }
                }
            }
        }
        Thread { [self] in commitForever() }.start()
    }

    /// Queues `write` and returns once it is committed and synced; with nil, once everything queued before is
    /// committed.
    func commit(_ write: Write?) async -> FloorError? {
        await withCheckedContinuation { waiter in
            lock.lock()
            if let write { pending.append((write, waiter)) } else { flushes.append(waiter) }
            lock.signal()
            lock.unlock()
        }
    }

    /// Queues `write`, committed (not synced) with the next group.
    func submit(_ write: Write) {
        lock.lock()
        pending.append((write, nil))
        lock.signal()
        lock.unlock()
    }

    private func commitForever() {
        while true {
            lock.lock()
            while pending.isEmpty && flushes.isEmpty { lock.wait() }
            let group = pending
            let flushed = flushes
            pending = []
            flushes = []
            lock.unlock()
            var failure: FloorError?
            do {
                try pool.writeWithoutTransaction { db in
                    let body = { try Self.transaction(db) { try Self.apply(group.map(\.write), in: db) } }
                    if group.contains(where: { $0.waiter != nil }) { try Self.durably(db, body) } else { try body() }
                }
            } catch {
                failure = FloorError("cannot store: \(error)")
            }
            for entry in group { entry.waiter?.resume(returning: failure) }
            for waiter in flushed { waiter.resume(returning: failure) }
        }
    }

    private static func apply(_ writes: [Write], in db: Database) throws {
        let now = Date().timeIntervalSince1970
        for write in writes {
            switch write {
            case .identity(let id, let destination, let length, let device, let inode):
                try db.cachedStatement(
                    sql: """
                        UPDATE download SET state = 'running', destination = ?, totalLength = ?, partDevice = ?,
                        partInode = ?, updatedAt = ? WHERE id = ?
                        """
                ).execute(arguments: [destination, length, device, inode, now, id])
            case .completed(let id):
                try db.cachedStatement(sql: "UPDATE download SET state = 'completed', updatedAt = ? WHERE id = ?")
                    .execute(arguments: [now, id])
            }
        }
    }

    /// Runs `body` in one transaction through cached statements: GRDB's `inTransaction` prepares its `BEGIN` and
    /// `COMMIT` again each time, as `execute(sql:)` does every statement.
    private static func transaction(_ db: Database, _ body: () throws -> Void) throws {
        try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
        do {
            try body()
            try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
        } catch {
            if db.isInsideTransaction { try? db.cachedStatement(sql: "ROLLBACK TRANSACTION").execute() }
            throw error
        }
    }

    /// Runs `body` with this connection's commits synced (`synchronous=FULL`).
    private static func durably(_ db: Database, _ body: () throws -> Void) throws {
        try db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute()
        defer { try? db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute() }
        try body()
    }
}

final class Counter: Sendable {
    let value = Atomic<Int>(0)
}

struct FloorError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension String {
    fileprivate func trimmingSuffix() -> String {
        var text = Substring(self)
        while let last = text.last, last == "\n" || last == "\r" || last == " " { text = text.dropLast() }
        return String(text)
    }
}
