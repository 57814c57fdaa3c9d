import Foundation
import HaulCore
import HaulTesting
import Testing

@testable import Haul

/// `DownloadOptions` keeps its fields in one copy-on-write storage that equal options share.
@Suite("Download options: shared storage", .timeLimit(.minutes(1)), .teardowns)
struct OptionsStorageTests {
    @Test("a copy is independent: changing it leaves the original as it was")
    func copyOnWrite() {
        var first = DownloadOptions(headers: [RequestHeader(name: "X-A", value: "1")], maxConnectionsPerDownload: 8)
        var second = first
        #expect(second.sharesStorage(with: first))
        second.maxConnectionsPerDownload = 2
        second.headers.append(RequestHeader(name: "X-B", value: "2"))
        second.tls.insecure = true
        #expect(!second.sharesStorage(with: first))
        #expect(first.maxConnectionsPerDownload == 8 && first.headers.count == 1 && !first.tls.insecure)
        #expect(second.maxConnectionsPerDownload == 2 && second.headers.count == 2 && second.tls.insecure)
        first.userAgent = "a"
        #expect(first != second)
        #expect(first.userAgent == "a" && second.userAgent == nil)
    }

    @Test("equality is by value; sharingStorage(with:) shares only equal options")
    func sharing() {
        let one = DownloadOptions(idleTimeoutSeconds: 10)
        let equal = DownloadOptions(idleTimeoutSeconds: 10)
        let other = DownloadOptions(idleTimeoutSeconds: 11)
        #expect(one == equal && !one.sharesStorage(with: equal))
        #expect(equal.sharingStorage(with: one).sharesStorage(with: one))
        #expect(!other.sharingStorage(with: one).sharesStorage(with: one))
        #expect(other.sharingStorage(with: one) == other)
    }

    @Test("the JSON holds what differs from the defaults, and rows written with every field read back alike")
    func coding() throws {
        var options = DownloadOptions(
            headers: [RequestHeader(name: "X-A", value: "1")], userAgent: "ua", overwrite: true,
            maxConnectionsPerDownload: 3)
        options.tls.caCertificates = "/ca.pem"
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let text = String(decoding: try encoder.encode(options), as: UTF8.self)
        #expect(
            text == #"{"headers":[{"name":"X-A","value":"1"}],"maxConnectionsPerDownload":3,"overwrite":true,"#
                + #""tls":{"caCertificates":"\/ca.pem","insecure":false},"userAgent":"ua"}"#)
        #expect(try JSONDecoder().decode(DownloadOptions.self, from: Data(text.utf8)) == options)
        #expect(String(decoding: try encoder.encode(DownloadOptions()), as: UTF8.self) == "{}")
        // Every field that has a default, away from it, comes back.
        var changed = DownloadOptions(
            overwrite: true, continuePartial: true, idleTimeoutSeconds: 7, maximumAttemptsWithoutProgress: 2,
            computesSHA256: true, maxConnectionsPerDownload: 9, minimumSplitSize: 1 << 20)
        changed.network = NetworkOptions(usesNetrc: false)
        #expect(try JSONDecoder().decode(DownloadOptions.self, from: try encoder.encode(changed)) == changed)
        // A row written with every field, as earlier versions wrote them, reads back as the same options.
        let full = Data(
            (#"{"computesSHA256":false,"continuePartial":false,"headers":[],"idleTimeoutSeconds":30,"#
                + #""maxConnectionsPerDownload":4,"maximumAttemptsWithoutProgress":5,"minimumSplitSize":4194304,"#
                + #""network":{},"overwrite":false,"tls":{"insecure":false}}"#).utf8)
        #expect(try JSONDecoder().decode(DownloadOptions.self, from: full) == DownloadOptions())
        // A row written before `tls` and `network` existed still reads, with their defaults.
        let old = try JSONDecoder().decode(DownloadOptions.self, from: Data(#"{"overwrite":true}"#.utf8))
        #expect(old.overwrite && old.tls == TLSOptions() && old.maxConnectionsPerDownload == 4)
    }

    @Test("downloads added with equal options share one storage in the manager, and their events with it")
    func managerShares() async throws {
        let h = try await Harness.make()
        let manager = try h.manager()
        let requests = (0..<3).map { index in
            DownloadRequest(
                url: h.server.url("/f\(index)"), destination: .directory(h.folder),
                options: DownloadOptions(idleTimeoutSeconds: 12), isPaused: true)
        }
        let added = try await manager.add(requests)
        let snapshots = try await added.asyncMap { try await manager.snapshot($0.id) }
        #expect(snapshots.allSatisfy { $0.options.idleTimeoutSeconds == 12 })
        #expect(snapshots[1].options.sharesStorage(with: snapshots[0].options))
        #expect(snapshots[2].options.sharesStorage(with: snapshots[0].options))
        await manager.shutdown()
    }
}

extension Array {
    fileprivate func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}
