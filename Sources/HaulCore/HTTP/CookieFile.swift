/// One cookie from a Netscape cookie file (as curl, wget and aria2 read and write them) or from `--cookie`.
public struct Cookie: Sendable, Equatable {
    /// The domain, lower-cased, without a leading dot.
    public var domain: String
    /// Whether hosts under `domain` get it too (`TRUE` in the file, or a leading dot).
    public var includesSubdomains: Bool
    /// The path it is for.
    public var path: String
    /// Whether it is sent over HTTPS only.
    public var secureOnly: Bool
    /// Seconds since 1970 after which it is not sent; 0 for a session cookie (always sent).
    public var expires: Int64
    /// Its name.
    public var name: String
    /// Its value.
    public var value: String

    /// Makes a cookie.
    public init(
        domain: String, includesSubdomains: Bool, path: String, secureOnly: Bool, expires: Int64, name: String,
        value: String
    ) {
        self.domain = domain
        self.includesSubdomains = includesSubdomains
        self.path = path
        self.secureOnly = secureOnly
        self.expires = expires
        self.name = name
        self.value = value
    }

    /// Whether a request to `host` and `path` over `secure` (HTTPS) at `now` (seconds since 1970) carries it:
    /// RFC 6265's domain match (the host itself, or a name under the domain when subdomains are included) and path
    /// match (the path itself, or a path under it at a `/`).
    public func matches(host: String, path requestPath: String, secure: Bool, now: Int64) -> Bool {
        if secureOnly, !secure { return false }
        if expires != 0, expires <= now { return false }
        let host = host.lowercased()
        guard host == domain || (includesSubdomains && host.hasSuffix("." + domain)) else { return false }
        let requestPath = requestPath.isEmpty ? "/" : requestPath
        if requestPath == path { return true }
        guard requestPath.hasPrefix(path) else { return false }
        return path.hasSuffix("/") || requestPath.dropFirst(path.count).hasPrefix("/")
    }
}

/// The cookies of a Netscape cookie file: lines of seven tab-separated fields (domain, include subdomains, path,
/// secure, expiry, name, value); `#HttpOnly_` before a domain marks an HTTP-only cookie (read as any other); other
/// lines starting with `#`, and blank lines, are comments. A line with another shape is skipped, as curl, wget and
/// aria2 do; a file with lines but no cookie at all is an error naming its first bad line.
public struct CookieFile: Sendable, Equatable {
    /// The cookies in file order.
    public var cookies: [Cookie]

    /// Parses a file's text.
    public init(parsing text: String) throws(DownloadError) {
        var cookies: [Cookie] = []
        var firstBad: Int?
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            var line = Substring(rawLine)
            if line.hasSuffix("\r") { line = line.dropLast() }
            if line.hasPrefix("#HttpOnly_") {
                line = line.dropFirst("#HttpOnly_".count)
            } else if line.hasPrefix("#") || line.trimmingSpaces.isEmpty {
                continue
            }
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            guard fields.count == 7 || fields.count == 6, let expires = Int64(fields[4].trimmingSpaces) else {
                firstBad = firstBad ?? index + 1
                continue
            }
            var domain = fields[0].trimmingSpaces.lowercased()
            let dotted = domain.hasPrefix(".")
            while domain.hasPrefix(".") { domain.removeFirst() }
            guard !domain.isEmpty, !fields[5].isEmpty, RequestHeader.isValidValue(String(line)) else {
                firstBad = firstBad ?? index + 1
                continue
            }
            let path = fields[2].isEmpty ? "/" : String(fields[2])
            cookies.append(
                Cookie(
                    domain: domain, includesSubdomains: dotted || fields[1].uppercased() == "TRUE", path: path,
                    secureOnly: fields[3].uppercased() == "TRUE", expires: expires, name: String(fields[5]),
                    value: fields.count == 7 ? String(fields[6]) : ""))
        }
        if cookies.isEmpty, let firstBad {
            throw DownloadError(
                .invalidArgument,
                "line \(firstBad) is not a cookie: a Netscape cookie file has 7 tab-separated fields a line "
                    + "(domain, subdomains, path, secure, expiry, name, value)")
        }
        self.cookies = cookies
    }

    /// The `Cookie` header value for a request, or nil when none matches. Longer paths come first (RFC 6265 5.4);
    /// a name seen again for the same path keeps the first.
    public func header(host: String, path: String, secure: Bool, now: Int64) -> String? {
        let sent = cookies.enumerated()
            .filter { $0.element.matches(host: host, path: path, secure: secure, now: now) }
            .sorted { ($0.element.path.count, -$0.offset) > ($1.element.path.count, -$1.offset) }
            .map(\.element)
        guard !sent.isEmpty else { return nil }
        return sent.map { "\($0.name)=\($0.value)" }.joined(separator: "; ")
    }

    /// Parses `--cookie` data, `name=value; name2=value2`: each pair must have a name and `=`, and no control
    /// characters. Returns the pairs as a header value, normalised.
    public static func pairs(_ text: String) throws(DownloadError) -> String {
        var pairs: [String] = []
        for part in text.split(separator: ";") {
            let pair = part.trimmingSpaces
            if pair.isEmpty { continue }
            guard let equals = pair.firstIndex(of: "="), equals != pair.startIndex,
                !pair.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
            else {
                throw DownloadError(.invalidArgument, "--cookie '\(pair)' is not name=value")
            }
            pairs.append(pair)
        }
        guard !pairs.isEmpty else { throw DownloadError(.invalidArgument, "--cookie has no name=value pair") }
        return pairs.joined(separator: "; ")
    }
}
