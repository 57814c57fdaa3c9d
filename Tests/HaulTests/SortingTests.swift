import Foundation
import Haul
import HaulCore
import HaulTesting
import Testing

/// Sort rules through the manager: a folder download takes its subfolder when its first answer arrives.
@Suite("Sorting downloads into folders", .teardowns)
struct SortingTests {
    let body = testBytes(200_000, seed: 41)

    func manager(_ h: Harness, rules: [String]) throws -> DownloadManager {
        var configuration = DownloadManager.Configuration(stateDirectory: h.stateDirectory)
        configuration.clock = h.clock
        configuration.startsStoredDownloads = false
        configuration.sortRules = rules
        return try DownloadManager(configuration: configuration)
    }

    @Test("by name, by the answer's MIME type and by URL, into folders made beneath the download folder")
    func sorts() async throws {
        let h = try await Harness.make()
        h.server.serve("/pub/debian.iso", .init(body: body))
        var clip = FaultServer.Resource(body: body)
        clip.contentType = "video/mp4"
        h.server.serve("/watch", clip)
        h.server.serve("/cdn/blob", .init(body: body))
        h.server.serve("/notes.txt", .init(body: body))
        let manager = try manager(h, rules: ["*.iso=ISO", "video/*=Media/Videos", "*://*/cdn/*=CDN"])
        var ids: [DownloadID] = []
        for path in ["/pub/debian.iso", "/watch", "/cdn/blob", "/notes.txt"] {
            ids.append(try await manager.add(h.server.url(path), to: .directory(h.folder)))
        }
        for id in ids { _ = try await manager.result(of: id) }
        #expect(h.holds("ISO/debian.iso", body))
        #expect(h.holds("Media/Videos/watch", body))
        #expect(h.holds("CDN/blob", body))
        #expect(h.holds("notes.txt", body))
        #expect(try await manager.snapshot(ids[0]).path == h.path("ISO/debian.iso"))
        // The same URL to the same folder finds the sorted download, complete.
        #expect(try await manager.add(h.server.url("/pub/debian.iso"), to: .directory(h.folder)) == ids[0])
        await manager.shutdown()
    }

    @Test("a link planted where a rule's folder goes, leading out: refused, and nothing is written through it")
    func plantedLink() async throws {
        let h = try await Harness.make()
        h.server.serve("/debian.iso", .init(body: body))
        let outside = h.folder + "/../outside"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: h.path("ISO"), withDestinationPath: outside)
        let manager = try manager(h, rules: ["*.iso=ISO"])
        let id = try await manager.add(h.server.url("/debian.iso"), to: .directory(h.folder))
        await #expect(throws: DownloadError.self) { _ = try await manager.result(of: id) }
        #expect(try await manager.snapshot(id).error?.code == .untrustedFile)
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty)
        await manager.shutdown()
    }
}
