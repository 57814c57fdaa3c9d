import Testing

@testable import HaulCore

@Suite("Network failures in plain words")
struct NetworkFailureTests {
    @Test(
        "resolver codes: a name with no address fails at once, a resolver that cannot answer now is retried",
        arguments: [
            (-2, NetworkFailure.hostNotFound), (-5, .hostNotFound), (-4, .hostNotFound), (-9, .hostNotFound),
            (-3, .resolverUnavailable), (-11, .resolverUnavailable),
        ])
    func resolver(code: Int, expected: NetworkFailure) {
        #expect(NetworkFailure.resolver(code: code) == expected)
    }

    @Test(
        "socket errors",
        arguments: [
            (Int32(111), true, NetworkFailure.refused), (101, true, .unreachable), (113, true, .unreachable),
            (110, true, .connectTimedOut), (110, false, .reset), (104, false, .reset), (32, false, .reset),
        ])
    func socket(errno: Int32, connecting: Bool, expected: NetworkFailure) {
        #expect(NetworkFailure.socket(errno: errno, connecting: connecting) == expected)
    }

    @Test("each failure is one sentence naming the host, with the right code and whether a retry can help")
    func errors() {
        let table: [(NetworkFailure, String, DownloadError.Code, Bool)] = [
            (.hostNotFound, "could not resolve host h.example", .connectionFailed, false),
            (
                .resolverUnavailable, "could not resolve host h.example (temporary failure in name resolution)",
                .connectionFailed, true
            ),
            (.refused, "could not connect to h.example: connection refused", .connectionFailed, true),
            (
                .unreachable, "could not connect to h.example: no route to the host or its network", .connectionFailed,
                true
            ),
            (.connectTimedOut, "could not connect to h.example: timed out", .connectionFailed, true),
            (.reset, "the connection to h.example was reset", .connectionLost, true),
            (
                .certificateRejected(detail: "is for another name"),
                "the TLS certificate of h.example is for another name "
                    + "(--cacert FILE trusts the CA that signed it; --insecure skips the check)", .tls, false
            ),
            (
                .handshakeFailed(detail: "no shared cipher"),
                "the TLS handshake with h.example failed (no shared cipher)", .tls, false
            ),
        ]
        for (failure, message, code, retryable) in table {
            let error = failure.error(host: "h.example")
            #expect(error.message == message)
            #expect(error.code == code, "\(failure)")
            #expect(error.isRetryable == retryable, "\(failure)")
            #expect(!error.description.contains("Error"), "no type names: \(error.description)")
        }
    }
}
