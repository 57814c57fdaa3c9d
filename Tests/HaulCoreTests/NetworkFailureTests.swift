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

@Suite("Why a certificate was rejected")
struct CertificateProblemTests {
    @Test(
        "expired, not yet valid, other names (wildcards, addresses), or untrusted",
        arguments: [
            ("localhost", ["localhost"], [[127, 0, 0, 1]], 0, 100, 200, CertificateProblem.expired(notAfter: 100)),
            ("localhost", ["localhost"], [], 300, 900, 200, .notYetValid(notBefore: 300)),
            ("localhost", ["localhost"], [], 0, 900, 200, .untrusted),
            ("LOCALHOST.", ["localhost"], [], 0, 900, 200, .untrusted),
            ("a.example.com", ["*.example.com"], [], 0, 900, 200, .untrusted),
            ("a.b.example.com", ["*.example.com"], [], 0, 900, 200, .otherNames(["*.example.com"])),
            ("example.com", ["*.example.com"], [], 0, 900, 200, .otherNames(["*.example.com"])),
            ("127.0.0.1", ["localhost"], [[127, 0, 0, 1]], 0, 900, 200, .untrusted),
            ("127.0.0.2", ["localhost"], [[127, 0, 0, 1]], 0, 900, 200, .otherNames(["localhost", "127.0.0.1"])),
            ("host", [], [], 0, 900, 200, .untrusted),
        ] as [(String, [String], [[UInt8]], Int64, Int64, Int64, CertificateProblem)])
    func diagnose(
        host: String, names: [String], addresses: [[UInt8]], notBefore: Int64, notAfter: Int64, now: Int64,
        expected: CertificateProblem
    ) {
        #expect(
            CertificateProblem.diagnose(
                host: host, dnsNames: names, addresses: addresses, notBefore: notBefore, notAfter: notAfter, now: now)
                == expected)
    }

    @Test("each problem is one plain sentence with the option that helps")
    func messages() {
        let now: Int64 = 1_000_000
        let table: [(CertificateProblem, String)] = [
            (
                .expired(notAfter: now - 3 * 86_400),
                "the TLS certificate of h:443 expired 3 days ago (--insecure skips the check)"
            ),
            (
                .notYetValid(notBefore: now + 7200),
                "the TLS certificate of h:443 is not valid for another 2 hours (is this machine's clock right?) "
                    + "(--insecure skips the check)"
            ),
            (
                .otherNames(["a.test", "b.test", "c.test", "d.test"]),
                "the TLS certificate of h:443 is for 'a.test', 'b.test', 'c.test' and 1 more, not this name "
                    + "(--insecure skips the check)"
            ),
            (
                .untrusted,
                "the TLS certificate of h:443 is not signed by a CA Haul trusts "
                    + "(--cacert FILE trusts the CA that signed it; --insecure skips the check)"
            ),
        ]
        for (problem, message) in table {
            let error = NetworkFailure.certificateInvalid(problem, now: now).error(host: "h:443")
            #expect(error.message == message)
            #expect(error.code == .tls && !error.isRetryable)
        }
    }
}
