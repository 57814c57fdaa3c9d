// The Swift floor of the small-files comparison (bench/run.sh): what the parts the brief prescribes cost by
// themselves. The URLs of a list are fetched with AsyncHTTPClient, `-j` at a time, on Swift concurrency, and each file
// is written with Haul's guarantees and nothing else: created exclusively as NAME.part, `pwrite`n chunk by chunk as
// the body arrives, `fsync`ed, moved to NAME without replacing anything, and its folder `fsync`ed, one folder sync
// covering every rename made before it started (as Haul's FolderSyncs); the sync, the move and the folder's sync in
// one trip to a thread pool of 16 (as Haul's file-system threads). No state database, no queue, no events, no
// retries, no resume: a file that fails stops the run.
//
// With `--no-sync` it syncs nothing (the part file is still created exclusively and moved without replacing): what
// AsyncHTTPClient costs for the network and the writes alone, to set against curl, which syncs nothing either.
//
// `bench/floor.c` is the same guarantees with no network; curl is the network with no guarantees. Between them and
// `haul get`, this says how much of Haul's cost is the stack (the HTTP client, NIO, Swift's runtime) and how much is
// Haul's own work (the store, the manager, the transfer machine).
//
//   haul-floor LIST DIR [PARALLEL] [--no-sync]
import AsyncHTTPClient
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
        guard arguments.count == 3 || arguments.count == 4, let list = try? readLines(arguments[1]),
            let parallel = arguments.count == 4 ? Int(arguments[3]) : 16, parallel > 0
        else {
            print("usage: haul-floor LIST DIR [PARALLEL] [--no-sync]")
            exit(2)
        }
        let folder = arguments[2]
        let folderSyncs = FolderSyncs(folder)
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow, decompression: .disabled)
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 64)
        configuration.httpVersion = .http1Only
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
                                list[index], into: folder, client: client, pool: pool,
                                folderSyncs: syncs ? folderSyncs : nil)
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
    }

    static func fetch(
        _ url: String, into folder: String, client: HTTPClient, pool: NIOThreadPool, folderSyncs: FolderSyncs?
    ) async throws {
        let response = try await client.execute(HTTPClientRequest(url: url), timeout: .seconds(30))
        guard response.status == .ok else { throw FloorError("\(url): \(response.status)") }
        let name = url.split(separator: "/").last.map(String.init) ?? "index"
        let final = folder + "/" + name
        let part = final + ".part"
        let file = open(part, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard file >= 0 else { throw FloorError("cannot create \(part)") }
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
