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

    static func make() async throws -> Harness {
        let root = NSTemporaryDirectory() + "haul-tests-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: root + "/files", withIntermediateDirectories: true)
        return Harness(server: try await FaultServer.start(), folder: root + "/files", stateDirectory: root + "/state")
    }

    func path(_ name: String) -> String { folder + "/" + name }

    func manager() throws -> DownloadManager {
        var configuration = DownloadManager.Configuration(stateDirectory: stateDirectory)
        configuration.clock = clock
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
