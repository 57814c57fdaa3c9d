#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A proxy as a URL names it: `[scheme://][user[:password]@]host[:port]`.
///
/// The schemes are curl's: `http` (the default when none is given; plain requests for `http://` URLs, a `CONNECT`
/// tunnel for `https://` ones), `socks5` and `socks5h`. The port defaults to 1080, as in curl. An `https://` proxy
/// (TLS to the proxy itself) and SOCKS4 are refused with a message saying so.
public struct ProxyEndpoint: Sendable, Hashable {
    /// The protocol spoken to the proxy.
    public enum Kind: String, Sendable, Hashable {
        /// An HTTP proxy.
        case http
        /// SOCKS5. Haul's SOCKS client sends the host name to the proxy, which resolves it, in both forms.
        case socks5
        /// SOCKS5 with the name resolved by the proxy.
        case socks5h
    }

    /// The protocol.
    public var kind: Kind
    /// The proxy's host name or address (without brackets).
    public var host: String
    /// Its port.
    public var port: Int
    /// The proxy user, percent-decoded (never stored or shown).
    public var user: String?
    /// The proxy password, percent-decoded (never stored or shown).
    public var password: String?

    /// Makes an endpoint.
    public init(kind: Kind, host: String, port: Int, user: String? = nil, password: String? = nil) {
        self.kind = kind
        self.host = host
        self.port = port
        self.user = user
        self.password = password
    }

    /// Parses a proxy URL. The error names the proxy without its credentials.
    public init(parsing text: String) throws(DownloadError) {
        var rest = Substring(text.trimmingSpaces)
        let shown = Self.redacted(text)
        var kind = Kind.http
        if let range = rest.firstRange(of: "://") {
            let scheme = rest[..<range.lowerBound].lowercased()
            switch scheme {
            case "http": kind = .http
            case "socks5": kind = .socks5
            case "socks5h": kind = .socks5h
            case "https":
                throw DownloadError(
                    .invalidArgument,
                    "the proxy \(shown) is an HTTPS proxy, which Haul does not support; an http:// proxy still "
                        + "tunnels HTTPS downloads encrypted end to end")
            case "socks4", "socks4a":
                throw DownloadError(
                    .invalidArgument, "the proxy \(shown) is SOCKS4, which Haul does not support; use socks5://")
            default:
                let isToken = scheme.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "+-.".contains($0)) }
                throw DownloadError(
                    .invalidArgument,
                    "the proxy \(shown) has \(isToken ? "the scheme '\(scheme)'" : "no valid scheme"); "
                        + "use http://, socks5:// or socks5h://")
            }
            rest = rest[range.upperBound...]
        }
        if let slash = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) { rest = rest[..<slash] }
        if let at = rest.lastIndex(of: "@") {
            let userInfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            if let colon = userInfo.firstIndex(of: ":") {
                user = String(userInfo[..<colon]).percentDecoded
                password = String(userInfo[userInfo.index(after: colon)...]).percentDecoded
            } else {
                user = String(userInfo).percentDecoded
            }
        }
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else {
                throw DownloadError(.invalidArgument, "the proxy \(shown) has an unclosed '[' in its address")
            }
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") {
                portText = after.dropFirst()
            } else if !after.isEmpty {
                throw DownloadError(.invalidArgument, "the proxy \(shown) has text after its address")
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = String(rest[..<colon])
            portText = rest[rest.index(after: colon)...]
        } else {
            host = String(rest)
        }
        guard !host.isEmpty, !host.contains(where: { $0 == " " || $0 == "@" || $0 == "[" || $0 == "]" }) else {
            throw DownloadError(.invalidArgument, "the proxy \(shown) names no host")
        }
        if let portText {
            guard let value = Int(portText), (1...65535).contains(value) else {
                throw DownloadError(.invalidArgument, "the proxy \(shown) has the port '\(portText)', not 1 to 65535")
            }
            port = value
        } else {
            port = 1080
        }
        self.kind = kind
        if kind != .http, user != nil {
            throw DownloadError(
                .invalidArgument,
                "the proxy \(shown) has credentials; Haul's SOCKS5 client offers no authentication (use an http:// proxy)"
            )
        }
    }

    /// The proxy's address for messages: `kind://host:port`, never the credentials.
    public var display: String {
        "\(kind.rawValue)://\(HostAndPort.shown(host, port: port))"
    }

    /// `text` with the credentials of a proxy URL replaced by `***`, for messages.
    public static func redacted(_ text: String) -> String {
        guard let userInfo = userInfoRange(in: text) else { return "'\(text)'" }
        return "'\(text[..<userInfo.lowerBound])***@\(text[userInfo.upperBound...])'"
    }

    /// `text` without the credentials of a proxy URL (for storing it).
    public static func withoutCredentials(_ text: String) -> String {
        guard let userInfo = userInfoRange(in: text) else { return text }
        return String(text[..<userInfo.lowerBound]) + String(text[userInfo.upperBound...])
    }

    /// Where a proxy URL's `user:password@` lies, up to and with its last `@`: everything before it but a
    /// well-formed scheme counts as credentials.
    static func userInfoRange(in text: String) -> Range<String.Index>? {
        guard let at = text.lastIndex(of: "@") else { return nil }
        var start = text.startIndex
        if let separator = text.firstRange(of: "://"), separator.upperBound <= at,
            text[..<separator.lowerBound].allSatisfy({
                $0.isASCII && ($0.isLetter || $0.isNumber || "+-.".contains($0))
            })
        {
            start = separator.upperBound
        }
        return start..<text.index(after: at)
    }
}

/// Which proxy a request goes through, with curl's precedence and `no_proxy` rules.
///
/// - The exclusion list is `--noproxy` when given, else `no_proxy` (then `NO_PROXY`); a host it matches goes
///   direct, whichever proxy is set.
/// - `--proxy URL` is used for every other host; `--proxy ""` turns proxies off.
/// - Without `--proxy`: `http_proxy` for `http://` URLs (lower case only, as curl: a CGI program's `HTTP_PROXY` can
///   come from a request's `Proxy:` header), `https_proxy` then `HTTPS_PROXY` for `https://` ones, then
///   `all_proxy`, `ALL_PROXY`. An empty variable counts as unset.
public struct ProxyRules: Sendable, Hashable, Codable {
    /// `--proxy`: nil to read the environment, empty for no proxy at all.
    public var proxy: String?
    /// `--noproxy`: nil to read `no_proxy`/`NO_PROXY`.
    public var noProxy: String?

    /// Makes rules.
    public init(proxy: String? = nil, noProxy: String? = nil) {
        self.proxy = proxy
        self.noProxy = noProxy
    }

    /// Whether nothing is set on the command line (the environment alone decides).
    public var isDefault: Bool { proxy == nil && noProxy == nil }

    /// The proxy for a URL of `scheme` to `host`, or nil to connect directly.
    public func proxy(scheme: String, host: String, environment: [String: String]) throws(DownloadError)
        -> ProxyEndpoint?
    {
        func variable(_ name: String) -> String? {
            guard let value = environment[name], !value.trimmingSpaces.isEmpty else { return nil }
            return value
        }
        // The proxy is chosen before the exclusions are read: with none (the common case) no list is built.
        let chosen: String
        if let proxy {
            guard !proxy.trimmingSpaces.isEmpty else { return nil }
            chosen = proxy
        } else {
            let scheme = scheme.lowercased()
            let specific =
                scheme == "http"
                ? variable("http_proxy") : variable("\(scheme)_proxy") ?? variable("\(scheme.uppercased())_PROXY")
            guard let variable = specific ?? variable("all_proxy") ?? variable("ALL_PROXY") else { return nil }
            chosen = variable
        }
        let exclusions = noProxy ?? variable("no_proxy") ?? variable("NO_PROXY") ?? ""
        if NoProxyList(exclusions).matches(host: host) { return nil }
        return try ProxyEndpoint(parsing: chosen)
    }
}

/// A `no_proxy` list, as curl reads it: entries separated by commas or spaces; `*` matches every host; a name matches
/// itself and every name under it (`example.com` and `.example.com` both match `example.com` and `a.example.com`,
/// case-insensitively); an IP address matches itself and a CIDR range (`10.0.0.0/8`, `fd00::/8`) the addresses in
/// it. Ports are not part of an entry, as in curl: `host:80` matches nothing.
public struct NoProxyList: Sendable, Hashable {
    /// The entries, trimmed and lower-cased.
    public let entries: [String]

    /// Reads a list. It is cut at separator scalars, not characters: a prepending mark such as U+0600 makes one
    /// grapheme of itself and the comma after it, and that comma must still end the entry.
    public init(_ text: String) {
        entries = text.unicodeScalars.split(whereSeparator: { $0 == "," || $0 == " " || $0 == "\t" || $0 == "\n" })
            .map { String(String.UnicodeScalarView($0)).lowercased() }
            .filter { !$0.isEmpty }
    }

    /// Whether a request to `host` goes direct.
    public func matches(host: String) -> Bool {
        var name = host.lowercased()
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        while name.hasSuffix(".") { name.removeLast() }
        let address = IPAddress(name)
        for entry in entries {
            if entry == "*" { return true }
            if let address {
                if let (network, bits) = Self.cidr(entry) {
                    if address.isIn(network, prefix: bits) { return true }
                } else {
                    let bare =
                        entry.hasPrefix("[") && entry.hasSuffix("]") ? String(entry.dropFirst().dropLast()) : entry
                    if IPAddress(bare) == address { return true }
                }
                continue
            }
            var suffix = Substring(entry)
            while suffix.hasPrefix(".") { suffix = suffix.dropFirst() }
            while suffix.hasSuffix(".") { suffix = suffix.dropLast() }
            if suffix.isEmpty { continue }
            if name == suffix || name.hasSuffix("." + suffix) { return true }
        }
        return false
    }

    /// An entry `ADDRESS/BITS`.
    private static func cidr(_ entry: String) -> (IPAddress, Int)? {
        guard let slash = entry.firstIndex(of: "/"), let network = IPAddress(String(entry[..<slash])),
            let bits = Int(entry[entry.index(after: slash)...]), bits >= 0, bits <= network.bytes.count * 8
        else { return nil }
        return (network, bits)
    }
}

/// An IPv4 or IPv6 address as its bytes (4 or 16).
public struct IPAddress: Sendable, Hashable {
    /// The address in network order.
    public let bytes: [UInt8]

    /// Parses a dotted-quad IPv4 or a textual IPv6 address (no brackets, no zone); nil for anything else.
    public init?(_ text: String) {
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            bytes = withUnsafeBytes(of: &v4) { Array($0) }
        } else if inet_pton(AF_INET6, text, &v6) == 1 {
            bytes = withUnsafeBytes(of: &v6) { Array($0) }
        } else {
            return nil
        }
    }

    /// Whether the first `prefix` bits equal `network`'s (of the same family).
    public func isIn(_ network: IPAddress, prefix: Int) -> Bool {
        guard bytes.count == network.bytes.count else { return false }
        var left = prefix
        for (mine, theirs) in zip(bytes, network.bytes) {
            if left <= 0 { return true }
            let mask: UInt8 = left >= 8 ? 0xFF : ~(0xFF >> UInt8(left))
            if mine & mask != theirs & mask { return false }
            left -= 8
        }
        return true
    }
}

extension StringProtocol {
    /// Without leading and trailing spaces, tabs and line breaks.
    var trimmingSpaces: String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(self[first...last])
    }

    /// `%XX` escapes decoded (invalid escapes and invalid UTF-8 kept as they are).
    var percentDecoded: String {
        guard contains("%") else { return String(self) }
        var bytes: [UInt8] = []
        var utf8 = Array(self.utf8)[...]
        while let byte = utf8.popFirst() {
            if byte == UInt8(ascii: "%"), utf8.count >= 2,
                let high = hexValue(utf8[utf8.startIndex]), let low = hexValue(utf8[utf8.startIndex + 1])
            {
                bytes.append(high << 4 | low)
                utf8 = utf8.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self) ?? String(self)
    }
}

private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
}
