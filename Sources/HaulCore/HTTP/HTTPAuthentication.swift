/// A user name and password for a server (`--user`, a URL's `user:password@`, `.netrc`). Never stored, logged or
/// shown: `description` hides the password.
public struct Credentials: Sendable, Hashable, CustomStringConvertible {
    /// The user name.
    public var user: String
    /// The password.
    public var password: String

    /// Makes credentials.
    public init(user: String, password: String) {
        self.user = user
        self.password = password
    }

    /// `user:***`.
    public var description: String { "\(user):***" }
}

/// One challenge of a `WWW-Authenticate` (or `Proxy-Authenticate`) field: a scheme and its parameters (RFC 9110
/// §11.6.1).
public struct AuthChallenge: Sendable, Equatable {
    /// The scheme, lower-cased (`basic`, `digest`, ...).
    public var scheme: String
    /// The parameters by lower-cased name, unquoted.
    public var parameters: [String: String]

    /// Makes a challenge.
    public init(scheme: String, parameters: [String: String] = [:]) {
        self.scheme = scheme
        self.parameters = parameters
    }

    /// The challenges of one or more field values, in order. A malformed part is skipped, never fatal.
    public static func parse(_ values: [String]) -> [AuthChallenge] {
        var challenges: [AuthChallenge] = []
        for value in values {
            for piece in splitOutsideQuotes(value) {
                let item = piece.trimmingHTTPSpace
                if item.isEmpty { continue }
                let firstSpace = item.firstIndex(where: { $0 == " " || $0 == "\t" })
                let firstEquals = item.firstIndex(of: "=")
                if let firstSpace, firstEquals.map({ firstSpace < $0 }) ?? true {
                    // `Scheme param=value` or `Scheme token68`: a new challenge.
                    let scheme = item[..<firstSpace].lowercased()
                    guard RequestHeader.isValidName(scheme) else { continue }
                    var challenge = AuthChallenge(scheme: scheme)
                    let rest = item[firstSpace...].trimmingHTTPSpace
                    if let (name, parameter) = parameter(rest) { challenge.parameters[name] = parameter }
                    challenges.append(challenge)
                } else if firstEquals == nil {
                    // A scheme with no parameters.
                    guard RequestHeader.isValidName(item) else { continue }
                    challenges.append(AuthChallenge(scheme: item.lowercased()))
                } else if let (name, parameter) = parameter(item), !challenges.isEmpty {
                    challenges[challenges.count - 1].parameters[name] = parameter
                }
            }
        }
        return challenges
    }

    private static func parameter(_ text: String) -> (String, String)? {
        guard let equals = text.firstIndex(of: "=") else { return nil }
        let name = text[..<equals].trimmingHTTPSpace.lowercased()
        var value = Substring(text[text.index(after: equals)...].trimmingHTTPSpace)
        guard !name.isEmpty else { return nil }
        if value.hasPrefix("\"") {
            value = value.dropFirst()
            var unquoted = ""
            var escaped = false
            for character in value {
                if escaped {
                    unquoted.append(character)
                    escaped = false
                } else if character == "\\" {
                    escaped = true
                } else if character == "\"" {
                    break
                } else {
                    unquoted.append(character)
                }
            }
            return (name, unquoted)
        }
        return (name, String(value))
    }

    private static func splitOutsideQuotes(_ text: String) -> [Substring] {
        var pieces: [Substring] = []
        var start = text.startIndex
        var quoted = false
        var escaped = false
        var index = text.startIndex
        while index < text.endIndex {
            let character = text[index]
            if escaped {
                escaped = false
            } else if quoted, character == "\\" {
                escaped = true
            } else if character == "\"" {
                quoted.toggle()
            } else if character == ",", !quoted {
                pieces.append(text[start..<index])
                start = text.index(after: index)
            }
            index = text.index(after: index)
        }
        pieces.append(text[start...])
        return pieces
    }
}

/// How Haul answers a server's challenges with credentials: Digest (RFC 7616; SHA-256 preferred over MD5, `qop=auth`)
/// when offered, else Basic (RFC 7617). Basic is sent only after the server asked for it (as wget does), so a
/// password never goes to a server that did not ask for one, nor in clear text to a server that offered Digest.
public enum HTTPAuthentication {
    /// A hash a Digest algorithm names, as lower-case hex of the UTF-8 text.
    public typealias Hash = @Sendable (_ algorithm: DigestAlgorithm, _ text: String) -> String

    /// The Digest algorithms Haul computes.
    public enum DigestAlgorithm: String, Sendable, CaseIterable {
        case md5 = "MD5"
        case sha256 = "SHA-256"
    }

    /// The challenge to answer among those offered: the strongest Digest Haul can compute, else Basic; nil when
    /// neither is offered.
    public static func choose(_ challenges: [AuthChallenge]) -> AuthChallenge? {
        let digests = challenges.filter { $0.scheme == "digest" && $0.parameters["nonce"] != nil }
            .filter { digestAlgorithm($0) != nil }
            .filter { challenge in
                // Only qop=auth (or none, RFC 2069): auth-int would need the body's hash.
                guard let qop = challenge.parameters["qop"] else { return true }
                return qop.split(separator: ",").contains { $0.trimmingHTTPSpace.lowercased() == "auth" }
            }
        if let best = digests.first(where: { digestAlgorithm($0)?.algorithm == .sha256 }) ?? digests.first {
            return best
        }
        return challenges.first { $0.scheme == "basic" }
    }

    /// The algorithm of a Digest challenge (absent means MD5) and whether it is the `-sess` form; nil for one Haul
    /// does not compute.
    public static func digestAlgorithm(_ challenge: AuthChallenge) -> (algorithm: DigestAlgorithm, session: Bool)? {
        var name = (challenge.parameters["algorithm"] ?? "MD5").uppercased()
        let session = name.hasSuffix("-SESS")
        if session { name.removeLast(5) }
        guard let algorithm = DigestAlgorithm(rawValue: name) else { return nil }
        return (algorithm, session)
    }

    /// `Basic base64(user:password)`.
    public static func basic(_ credentials: Credentials) -> String {
        "Basic " + base64(Array("\(credentials.user):\(credentials.password)".utf8))
    }

    /// The `Authorization` value answering a Digest challenge for a request of `method` to `uri` (the request
    /// target), with client nonce `cnonce` and nonce count `count`.
    public static func digest(
        _ challenge: AuthChallenge, credentials: Credentials, method: String, uri: String, cnonce: String,
        count: Int, hash: Hash
    ) -> String? {
        guard let (algorithm, session) = digestAlgorithm(challenge), let nonce = challenge.parameters["nonce"]
        else { return nil }
        let realm = challenge.parameters["realm"] ?? ""
        let offersAuth = challenge.parameters["qop"].map {
            $0.split(separator: ",").contains { $0.trimmingHTTPSpace.lowercased() == "auth" }
        }
        let hex = String(count, radix: 16)
        let countText = String(repeating: "0", count: max(0, 8 - hex.count)) + hex
        var ha1 = hash(algorithm, "\(credentials.user):\(realm):\(credentials.password)")
        if session { ha1 = hash(algorithm, "\(ha1):\(nonce):\(cnonce)") }
        let ha2 = hash(algorithm, "\(method):\(uri)")
        let response =
            offersAuth == true
            ? hash(algorithm, "\(ha1):\(nonce):\(countText):\(cnonce):auth:\(ha2)")
            : hash(algorithm, "\(ha1):\(nonce):\(ha2)")
        var fields = [
            "username=\(quoted(credentials.user))", "realm=\(quoted(realm))", "nonce=\(quoted(nonce))",
            "uri=\(quoted(uri))",
        ]
        if challenge.parameters["algorithm"] != nil {
            fields.append("algorithm=\(algorithm.rawValue)\(session ? "-sess" : "")")
        }
        fields.append("response=\(quoted(response))")
        if let opaque = challenge.parameters["opaque"] { fields.append("opaque=\(quoted(opaque))") }
        if offersAuth == true { fields += ["qop=auth", "nc=\(countText)", "cnonce=\(quoted(cnonce))"] }
        return "Digest " + fields.joined(separator: ", ")
    }

    private static func quoted(_ text: String) -> String {
        var quoted = "\""
        for character in text {
            if character == "\\" || character == "\"" { quoted.append("\\") }
            quoted.append(character)
        }
        return quoted + "\""
    }

    /// Standard Base64 with padding.
    public static func base64(_ bytes: [UInt8]) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var output: [UInt8] = []
        output.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index < bytes.count {
            let b0 = bytes[index]
            let b1 = index + 1 < bytes.count ? bytes[index + 1] : 0
            let b2 = index + 2 < bytes.count ? bytes[index + 2] : 0
            output.append(alphabet[Int(b0 >> 2)])
            output.append(alphabet[Int((b0 & 0x03) << 4 | b1 >> 4)])
            output.append(index + 1 < bytes.count ? alphabet[Int((b1 & 0x0F) << 2 | b2 >> 6)] : UInt8(ascii: "="))
            output.append(index + 2 < bytes.count ? alphabet[Int(b2 & 0x3F)] : UInt8(ascii: "="))
            index += 3
        }
        return String(decoding: output, as: UTF8.self)
    }
}
