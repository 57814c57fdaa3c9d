/// Why a server's certificate was rejected, told from the certificate itself: the TLS library only says that
/// verification failed. Haul looks at the certificate the server showed (on a second connection that does not
/// verify and sends nothing) and names the first problem it finds, in this order: expired, not yet valid, issued
/// for other names, and otherwise not signed by a CA Haul trusts.
public enum CertificateProblem: Sendable, Equatable {
    /// Its validity ended (`notAfter`, seconds since 1970).
    case expired(notAfter: Int64)
    /// Its validity has not begun.
    case notYetValid(notBefore: Int64)
    /// It names other hosts.
    case otherNames([String])
    /// Nothing wrong with it as such: the CA that signed it is not trusted here.
    case untrusted

    /// Diagnoses a certificate for `host` at `now`. `dnsNames` and `addresses` are its subject alternative names
    /// (a certificate without any is not judged on its name: modern clients ignore the common name).
    public static func diagnose(
        host: String, dnsNames: [String], addresses: [[UInt8]], notBefore: Int64, notAfter: Int64, now: Int64
    ) -> CertificateProblem {
        if now > notAfter { return .expired(notAfter: notAfter) }
        if now < notBefore { return .notYetValid(notBefore: notBefore) }
        guard !dnsNames.isEmpty || !addresses.isEmpty else { return .untrusted }
        var name = host.lowercased()
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        if let address = IPAddress(name) {
            if addresses.contains(address.bytes) { return .untrusted }
        } else if dnsNames.contains(where: { matches(pattern: $0, host: name) }) {
            return .untrusted
        }
        let shown =
            dnsNames
            + addresses.compactMap { bytes in
                bytes.count == 4
                    ? bytes.map(String.init).joined(separator: ".") : bytes.count == 16 ? "an IPv6 address" : nil
            }
        return .otherNames(shown)
    }

    /// RFC 6125 matching: equal ignoring case (and a trailing dot), or a `*.` wildcard standing for exactly one
    /// left-most label.
    static func matches(pattern: String, host: String) -> Bool {
        var pattern = pattern.lowercased()
        var host = host
        if pattern.hasSuffix(".") { pattern.removeLast() }
        if host.hasSuffix(".") { host.removeLast() }
        if pattern == host { return true }
        guard pattern.hasPrefix("*."), let dot = host.firstIndex(of: ".") else { return false }
        return host[dot...] == pattern.dropFirst() && host[..<dot].count > 0
    }

    /// The words after "the TLS certificate of HOST".
    public func detail(now: Int64) -> String {
        switch self {
        case .expired(let notAfter):
            "expired \(Self.age(now - notAfter)) ago"
        case .notYetValid(let notBefore):
            "is not valid for another \(Self.age(notBefore - now)) (is this machine's clock right?)"
        case .otherNames(let names):
            "is for " + Self.list(names) + ", not this name"
        case .untrusted:
            "is not signed by a CA Haul trusts"
        }
    }

    private static func age(_ seconds: Int64) -> String {
        let days = seconds / 86_400
        if days >= 2 { return "\(days) days" }
        let hours = seconds / 3600
        if hours >= 2 { return "\(hours) hours" }
        let minutes = max(1, seconds / 60)
        return minutes == 1 ? "1 minute" : "\(minutes) minutes"
    }

    private static func list(_ names: [String]) -> String {
        let shown = names.prefix(3).map { "'\($0)'" }
        let more = names.count > 3 ? " and \(names.count - 3) more" : ""
        switch shown.count {
        case 0: return "other names"
        case 1: return shown[0] + more
        default: return shown.dropLast().joined(separator: ", ") + (more.isEmpty ? " and " : ", ") + shown.last! + more
        }
    }
}
