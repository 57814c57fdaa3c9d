import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP port of 127.0.0.1 that is free now, for a server process a test starts on it.
///
/// Asking the kernel for one (bind to port 0, close) is not enough when tests run in parallel: the port is free
/// again at once, so another test's request, or an outgoing connection, can be given the same port before the
/// server binds it, and the test then talks to the wrong server. So ports come from below the kernel's ephemeral
/// range, which it never hands out by itself, each at most once a process, from a random start so that two test
/// processes rarely meet; a port something already holds is passed over.
public func freePort() -> Int {
    PortPool.shared.next()
}

/// Ports handed out in turn from a range, each once, passing over those something holds.
final class PortPool: Sendable {
    /// The process's pool: from 20000 (above the ports local services commonly listen on) up to the kernel's
    /// ephemeral range, from a random start.
    static let shared: PortPool = {
        let range = 20000..<max(ephemeralStart, 20001)
        return PortPool(range, from: Int.random(in: range))
    }()

    /// The kernel's setting of its ephemeral port range, only read (to keep out of that range); nothing here writes it.
    static let portRangeSetting = "/proc/sys/net/ipv4/ip_local_port_range"  // read only: reported, never changed

    /// The first port of the kernel's ephemeral range (Linux's default when it cannot be read).
    static let ephemeralStart =
        (try? String(contentsOfFile: portRangeSetting, encoding: .utf8))
        .flatMap { $0.split(whereSeparator: \.isWhitespace).first }.flatMap { Int($0) } ?? 32768

    let range: Range<Int>
    /// The next port to try.
    let cursor: Mutex<Int>

    init(_ range: Range<Int>, from start: Int) {
        self.range = range
        cursor = Mutex(start)
    }

    func next() -> Int {
        for _ in 0..<range.count {
            let port = cursor.withLock { next in
                defer { next = next + 1 == range.upperBound ? range.lowerBound : next + 1 }
                return next
            }
            if Self.isFree(port) { return port }
        }
        preconditionFailure("no free port in \(range) of 127.0.0.1")
    }

    /// Whether a listener could bind `port` now (bound without SO_REUSEADDR, so a port in TIME_WAIT counts as taken).
    static func isFree(_ port: Int) -> Bool {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        return withLoopbackAddress(port: port) { bind(socket, $0, $1) } == 0
    }
}

/// Calls `body` with the address 127.0.0.1:`port` as the socket calls take it, and its length.
public func withLoopbackAddress<Result>(port: Int, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
}
