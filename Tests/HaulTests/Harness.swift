import Crypto
import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

/// A fault server, a temporary folder and a state directory for one test.
struct Harness {
    let server: FaultServer
    let folder: String
    let stateDirectory: String
    let clock = RecordingClock()
    /// The engine's own time: when an answer of the server goes quiet, and its bytes are in the download's file,
    /// it jumps past the idle timeout, so no test waits one out.
    let idleClock = JumpClock()

    /// With `jumpsPastStalls` false the idle clock runs with real time only (a test where other connections flow
    /// beside the quiet one: a jump would make them look quiet too).
    static func make(jumpsPastStalls: Bool = true) async throws -> Harness {
        let root = NSTemporaryDirectory() + "haul-tests-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: root + "/files", withIntermediateDirectories: true)
        let harness = Harness(
            server: try await FaultServer.start(), folder: root + "/files", stateDirectory: root + "/state")
        let (folder, idleClock) = (harness.folder, harness.idleClock)
        Teardowns.add { await harness.stop() }
        guard jumpsPastStalls else { return harness }
        harness.server.onStall { stall in
            Task {
                await Self.waitUntilLanded(stall, in: folder)
                await idleClock.jump(by: Self.idleJump, afterTicks: 3)
            }
        }
        return harness
    }

    /// Longer than the default idle timeout (30 s), which the tests keep.
    static let idleJump: Duration = .seconds(31)

    /// Waits until the last bytes a stalled answer sent are in a file of `folder` (the engine has taken all it was
    /// sent), at most 10 s.
    static func waitUntilLanded(_ stall: FaultServer.Stall, in folder: String) async {
        guard let end = stall.end, !stall.tail.isEmpty else { return }
        let start = UInt64(end - stall.tail.count)
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
            for name in names {
                guard let handle = FileHandle(forReadingAtPath: folder + "/" + name) else { continue }
                defer { try? handle.close() }
                guard (try? handle.seek(toOffset: start)) != nil,
                    let bytes = try? handle.read(upToCount: stall.tail.count)
                else { continue }
                if [UInt8](bytes) == stall.tail { return }
            }
            try? await Task.sleep(for: .milliseconds(1))
        }
    }

    func path(_ name: String) -> String { folder + "/" + name }

    func manager() throws -> DownloadManager {
        var configuration = DownloadManager.Configuration(stateDirectory: stateDirectory)
        configuration.clock = clock
        configuration.idleClock = idleClock
        configuration.startsStoredDownloads = false
        configuration.engine.jitter = { 1 }
        return try DownloadManager(configuration: configuration)
    }

    /// Downloads `path` of the server to `name` in the folder with a fresh manager on the shared store.
    func fetch(
        _ path: String, to name: String = "file.bin", options: DownloadOptions = DownloadOptions(),
        configure: (inout DownloadManager.Configuration) -> Void = { _ in }
    ) async throws -> DownloadResult {
        var configuration = DownloadManager.Configuration(stateDirectory: stateDirectory)
        configuration.clock = clock
        configuration.idleClock = idleClock
        configuration.engine.jitter = { 1 }
        configure(&configuration)
        return try await DownloadManager.download(
            server.url(path), to: self.path(name), options: options, configuration: configuration)
    }

    /// Like `fetch`, expecting failure; returns the error.
    func fetchError(
        _ path: String, to name: String = "file.bin", options: DownloadOptions = DownloadOptions(),
        configure: (inout DownloadManager.Configuration) -> Void = { _ in }
    ) async -> DownloadError? {
        do {
            _ = try await fetch(path, to: name, options: options, configure: configure)
            return nil
        } catch {
            return error as? DownloadError
        }
    }

    func contents(_ name: String) -> [UInt8]? {
        FileManager.default.contents(atPath: path(name)).map { [UInt8]($0) }
    }

    /// Whether the file `name` holds exactly `bytes` (a Bool, so a failure does not print megabytes).
    func holds(_ name: String, _ bytes: [UInt8]) -> Bool {
        contents(name) == bytes
    }

    func exists(_ name: String) -> Bool { FileManager.default.fileExists(atPath: path(name)) }

    func stop() async {
        await server.stop()
        try? FileManager.default.removeItem(atPath: (folder as NSString).deletingLastPathComponent)
    }
}

/// Lowercase hex SHA-256.
func sha256Hex(_ bytes: [UInt8]) -> String {
    SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
}
