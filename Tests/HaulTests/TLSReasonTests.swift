import Testing

@testable import Haul

/// The words a failed TLS handshake is told with, from BoringSSL's error texts as NIOSSL describes them.
@Suite("The reason of a failed TLS handshake")
struct TLSReasonTests {
    static func text(_ code: String) -> String {
        "handshakeFailed(NIOSSL.BoringSSLError.sslError([Error: 268435703 error:100000f7:SSL routines:"
            + "OPENSSL_internal:\(code) at /src/CNIOBoringSSL/ssl/tls_record.cc:127]))"
    }

    @Test("the code is the reason, not the library's name nor the path")
    func code() {
        #expect(LiveTransport.reason(Self.text("NO_SHARED_CIPHER")) == "no shared cipher")
        #expect(LiveTransport.reason(Self.text("TLSV1_ALERT_UNKNOWN_CA")) == "tlsv1 alert unknown ca")
        #expect(LiveTransport.reason("handshakeFailed(NIOSSL.BoringSSLError.unknownError([]))") == nil)
    }

    @Test("a server that does not speak TLS there is said to, with the likely fix")
    func plainServer() {
        let reason = LiveTransport.reason(Self.text("WRONG_VERSION_NUMBER"))
        #expect(reason?.hasPrefix("wrong version number: the server does not speak TLS there") == true)
        #expect(reason?.contains("http://") == true)
        let closed = "handshakeFailed(NIOSSL.BoringSSLError.sslError([Error:  EOF during handshake]))"
        #expect(LiveTransport.reason(closed) == "the server closed the connection during it")
    }
}
