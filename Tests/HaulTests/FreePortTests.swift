import Glibc
import Testing

@testable import HaulTesting

@Suite("freePort: ports for the servers tests start")
struct FreePortTests {
    @Test("distinct, below the kernel's ephemeral range, and free to listen on")
    func distinct() throws {
        // The kernel's ephemeral range as the pool reads it (only read; the test changes no setting).
        let ephemeralStart = PortPool.ephemeralStart
        #expect(ephemeralStart > 20000 && ephemeralStart <= 65536)
        let ports = (0..<64).map { _ in freePort() }
        #expect(Set(ports).count == ports.count)
        #expect(ports.allSatisfy { $0 >= 20000 && $0 < ephemeralStart })
        #expect(ports.allSatisfy(PortPool.isFree))
    }

    @Test("a port something listens on is passed over; the range wraps around")
    func passesOverTaken() throws {
        // Two neighbouring ports of the process's pool: no other test is given either of them.
        var (start, next) = (freePort(), freePort())
        while next != start + 1 { (start, next) = (next, freePort()) }
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        try #require(withLoopbackAddress(port: start) { bind(listener, $0, $1) } == 0)
        try #require(listen(listener, 1) == 0)
        #expect(!PortPool.isFree(start))
        let pool = PortPool(start..<start + 2, from: start + 1)
        // The cursor's port, then the range's start (taken, so passed over), then its port again.
        #expect(pool.next() == start + 1)
        #expect(pool.next() == start + 1)
    }
}
