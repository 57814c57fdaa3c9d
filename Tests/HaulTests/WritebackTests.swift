import Foundation
import HaulCore
import HaulTesting
import NIOCore
import Testing

@testable import Haul

/// The early writeback that keeps a checkpoint's sync short.
@Suite("Writeback")
struct WritebackTests {
    @Test("The starter asks for contiguous ranges of at least a chunk, from where the stream began")
    func chunks() {
        var ranges: [(offset: Int64, count: Int64)] = []
        var starter = WritebackStarter(from: 1000) { ranges.append(($0, $1)) }
        var position: Int64 = 1000
        // Writes of every size a socket hands over, from one byte to 3 MiB, in a fixed order.
        let sizes: [Int64] = [1, 4096, 65_536, 777_777, 1 << 20, 3 << 20]
        var step = 0
        while position < 100 << 20 {
            position += sizes[step % sizes.count]
            step += 1
            starter.wrote(upTo: position)
        }
        // At least 92 MiB are covered in ranges under 11 MiB each.
        #expect(ranges.count >= 9)
        #expect(ranges.first?.offset == 1000)
        for (range, next) in zip(ranges, ranges.dropFirst()) {
            #expect(range.offset + range.count == next.offset)
        }
        #expect(ranges.allSatisfy { $0.count >= WritebackStarter.chunk && $0.count < WritebackStarter.chunk + 3 << 20 })
        let covered = ranges.last.map { $0.offset + $0.count } ?? 0
        #expect(position - covered < WritebackStarter.chunk)
    }

    @Test("On Linux the kernel call is found, and a file written back early and synced keeps its bytes")
    func kernelCall() throws {
        #if os(Linux)
            #expect(PartFile.canStartWriteback)
        #endif
        let folder = DownloadFolder(try HeldFolder.open(FileManager.default.temporaryDirectory.path))
        let name = "haul-writeback-\(UUID()).part"
        let part = try #require(try folder.makePart(name))
        let path = part.path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let bytes = testBytes(10 << 20)
        var starter = WritebackStarter(part: part, from: 0)
        var offset = 0
        for piece in stride(from: 0, to: bytes.count, by: 256 << 10) {
            let end = min(bytes.count, piece + (256 << 10))
            try part.write(ByteBuffer(bytes: bytes[piece..<end]), at: Int64(piece))
            offset = end
            starter.wrote(upTo: Int64(offset))
        }
        #if os(Linux)
            #expect(part.startWriteback(from: 0, count: Int64(offset)))
        #endif
        try part.syncData()
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(bytes))
    }
}
