import HaulCore
import Testing

@Suite("A host and its port as a URL writes them")
struct HostAndPortTests {
    @Test(
        "an IPv6 address in brackets, once; a name or an IPv4 address as it is",
        arguments: [
            ("::1", 8080, "[::1]:8080"), ("[::1]", 8080, "[::1]:8080"), ("::1", nil, "[::1]"),
            ("example.com", 443, "example.com:443"), ("127.0.0.1", nil, "127.0.0.1"),
        ] as [(String, Int?, String)])
    func shown(_ host: String, _ port: Int?, _ written: String) {
        #expect(HostAndPort.shown(host, port: port) == written)
    }
}
