import Foundation
import HaulAPI
import HaulServer
import HaulTesting
import Hummingbird
import HummingbirdTesting
import Testing

@testable import HaulWire

@Suite("Folders a request may write to", .timeLimit(.minutes(1)), .teardowns)
struct FolderPolicyTests {
    /// `path` with symbolic links resolved.
    static func real(_ path: String) -> String {
        guard let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    @Test("escaping the download folder through .., an absolute path or a symbolic link: 403 naming the folders")
    func escapes() async throws {
        let h = try await ServerHarness.make()
        let outside = h.root + "/outside"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: h.downloads + "/link", withDestinationPath: outside)
        try await h.application().test(.router) { client in
            for directory in ["../outside", "sub/../../outside", outside, "/etc", "link", "link/deeper", h.root] {
                let response = try await client.post(
                    "/api/v1/downloads", #"{"url": "http://h/a", "directory": "\#(directory)"}"#)
                #expect(response.status == .forbidden, "\(directory)")
                let error = try apiError(response)
                #expect(error.code == "forbiddenFolder" && error.field == "directory")
                #expect(error.message.contains(Self.real(h.downloads)))
            }
            #expect(!FileManager.default.fileExists(atPath: outside + "/deeper"), "nothing created outside")
            #expect(
                try body(Components.Schemas.DownloadList.self, try await client.get("/api/v1/downloads"))
                    .downloads.isEmpty)
        }
    }

    @Test(
        "a relative folder is created under the download folder; an allowed folder is accepted; names sanitised, and a path or a folder's name given as a file name refused"
    )
    func allowed() async throws {
        let extra = NSTemporaryDirectory() + "haul-allowed-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: extra, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: extra) }
        let h = try await ServerHarness.make(allowed: [extra])
        try await h.application().test(.router) { client in
            let nested = try await client.post(
                "/api/v1/downloads", #"{"url": "http://h/a", "directory": "music/2024", "paused": true}"#)
            #expect(nested.status == .created)
            #expect(
                try body(Components.Schemas.Download.self, nested).directory == Self.real(h.downloads) + "/music/2024")
            #expect(FileManager.default.fileExists(atPath: h.downloads + "/music/2024"))
            let inAllowed = try await client.post(
                "/api/v1/downloads", #"{"url": "http://h/b", "directory": "\#(extra)/sub", "paused": true}"#)
            #expect(inAllowed.status == .created)
            let named = try await client.post(
                "/api/v1/downloads", #"{"url": "http://h/c", "filename": ".bashrc", "paused": true}"#)
            #expect(named.status == .created)
            #expect(try body(Components.Schemas.Download.self, named).path == Self.real(h.downloads) + "/bashrc")
            let refusals = [
                "../../.bashrc":
                    "filename: '../../.bashrc' holds '/': give the file's name, and its folder as the directory",
                ".": "filename: '.' names a folder, not a file", "..": "filename: '..' names a folder, not a file",
            ]
            for (filename, message) in refusals {
                let refused = try await client.post(
                    "/api/v1/downloads", #"{"url": "http://h/d", "filename": "\#(filename)", "paused": true}"#)
                #expect(refused.status == .badRequest, "\(filename)")
                let error = try apiError(refused)
                #expect(error.field == "filename" && error.message == message, "\(error.message)")
            }
        }
    }
}
