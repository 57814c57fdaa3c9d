import Foundation
import HTTPTypes
import Haul
import HaulAPI
import HaulCore
import HaulWire
import NIOCore
import NIOFoundationCompat
import OpenAPIRuntime
import ServiceLifecycle

extension APIHandler {
    /// The engine's request for one item of an add, every field checked; errors name the item and the field.
    func request(from item: Components.Schemas.AddDownload, index: Int?, defaults: ManagerSettings)
        throws(APIError) -> DownloadRequest
    {
        // The document's pattern for the field (ASCII, percent-encoded), then the engine's rule for a download's URL.
        guard Self.isAcceptedURL(item.url), let url = URL(string: item.url), (try? DownloadRules.checkURL(url)) != nil
        else {
            throw .invalidField("url", Self.urlRefusal(item.url), index: index)
        }
        let connections = item.connections ?? defaults.connectionsPerDownload
        let minSplitSize = item.minSplitSize ?? DownloadOptions.defaultMinimumSplitSize
        try APIError.checking("connections", index: index) { () throws(DownloadRules.RuleViolation) in
            try DownloadRules.checkConnections(connections)
        }
        try APIError.checking("minSplitSize", index: index) { () throws(DownloadRules.RuleViolation) in
            try DownloadRules.checkMinimumSplitSize(minSplitSize)
        }
        try APIError.checking("limitRate", index: index) { () throws(DownloadRules.RuleViolation) in
            try DownloadRules.checkRate(item.limitRate)
        }
        if let timeout = item.timeoutSeconds {
            try APIError.checking("timeoutSeconds", index: index) { () throws(DownloadRules.RuleViolation) in
                try DownloadRules.checkTimeout(timeout)
            }
        }
        if let retries = item.retries {
            try APIError.checking("retries", index: index) { () throws(DownloadRules.RuleViolation) in
                try DownloadRules.checkRetries(retries)
            }
        }
        let mirrors = item.mirrors ?? []
        try APIError.checking("mirrors", index: index) { () throws(DownloadRules.RuleViolation) in
            try DownloadRules.checkMirrors(mirrors)
        }
        if let bad = mirrors.first(where: { !Self.isAcceptedURL($0) }) {
            throw .invalidField("mirrors", Self.urlRefusal(bad), index: index)
        }
        if let userAgent = item.userAgent, !DownloadOptions.Header.isValidValue(userAgent) {
            throw .invalidField("userAgent", "has a line break or another control character", index: index)
        }
        for case (let field, let value?) in [("directory", item.directory), ("filename", item.filename)] {
            try APIError.checking(field, index: index) { () throws(DownloadRules.RuleViolation) in
                try DownloadRules.checkNameLength(value)
            }
        }
        var checksum: Checksum?
        if let text = item.checksum {
            switch Checksum.parse(text) {
            case .success(let parsed): checksum = parsed
            case .failure(let problem): throw .invalidField("checksum", "'\(text)'\(problem.reason)", index: index)
            }
        }
        var headers: [DownloadOptions.Header] = []
        for (name, value) in (item.headers?.additionalProperties ?? [:]).sorted(by: { $0.key < $1.key }) {
            let header: DownloadOptions.Header
            do { header = try DownloadOptions.Header(parsing: "\(name): \(value)") } catch {
                throw .invalidField("headers", error.message, index: index)
            }
            try APIError.checking("headers", index: index) { () throws(DownloadRules.RuleViolation) in
                try DownloadRules.checkHeader(header)
            }
            headers.append(header)
        }
        let destination = try policy.destination(
            directory: item.directory, filename: item.filename, door: door, index: index)
        var options = DownloadOptions(
            headers: headers,
            userAgent: item.userAgent,
            checksum: checksum,
            overwrite: item.overwrite ?? false,
            // Only a named file can be adopted; for a name the server chooses there is nothing to continue.
            continuePartial: item.filename != nil && item.continuePartial == true,
            idleTimeoutSeconds: item.timeoutSeconds ?? 30,
            maximumAttemptsWithoutProgress: item.retries ?? 5,
            computesSHA256: item.computeSha256 ?? false,
            maxConnectionsPerDownload: connections,
            minimumSplitSize: minSplitSize
        )
        options.mirrors = mirrors
        options.streamVariant = item.variant
        options.streamMux = item.mux ?? false
        if let pieces = item.pieces?.engine {
            try APIError.checking("pieces", index: index) { () throws(DownloadRules.RuleViolation) in
                try DownloadRules.checkPieces(pieces)
            }
            options.pieces = pieces
        }
        options.tls = try Self.tls(item.tls, index: index)
        options.network = try Self.network(item, index: index)
        return DownloadRequest(
            url: url, destination: destination, options: options, priority: item.priority?.engine ?? .normal,
            after: (item.after ?? []).map(DownloadID.init), rateLimit: item.limitRate, isPaused: item.paused ?? false,
            origin: door.origin)
    }

    /// The TLS options of an add: every path absolute and readable by the daemon, checked now rather than when the
    /// download first connects.
    static func tls(_ given: Components.Schemas.TLSOptions?, index: Int?) throws(APIError) -> TLSOptions {
        guard let given else { return TLSOptions() }
        let paths = [
            ("tls.caCertificates", given.caCertificates), ("tls.caDirectory", given.caDirectory),
            ("tls.clientCertificate", given.clientCertificate), ("tls.clientKey", given.clientKey),
        ]
        for case (let field, let path?) in paths {
            try readable(field, path, index: index, folder: field == "tls.caDirectory")
        }
        if given.clientKey != nil, given.clientCertificate == nil {
            throw .invalidField("tls.clientKey", "needs tls.clientCertificate", index: index)
        }
        return TLSOptions(
            caCertificates: given.caCertificates, caDirectory: given.caDirectory, insecure: given.insecure ?? false,
            clientCertificate: given.clientCertificate, clientKey: given.clientKey)
    }

    /// The proxy, credentials, `.netrc` and cookie options of an add, each checked: a proxy URL Haul can use, cookie
    /// pairs, files the daemon can read. The credentials stay in memory (`NetworkOptions` never stores them).
    static func network(_ item: Components.Schemas.AddDownload, index: Int?) throws(APIError) -> NetworkOptions {
        var network = NetworkOptions(
            proxy: ProxyRules(proxy: item.proxy, noProxy: item.noProxy), netrcFile: item.netrcFile,
            usesNetrc: item.useNetrc ?? true, cookieFile: item.cookieFile)
        if let proxy = item.proxy, !proxy.trimmingCharacters(in: .whitespaces).isEmpty {
            do { _ = try ProxyEndpoint(parsing: proxy) } catch {
                throw .invalidField("proxy", error.message, index: index)
            }
        }
        if let cookies = item.cookies {
            do { network.cookies = try CookieFile.pairs(cookies) } catch {
                throw .invalidField("cookies", error.message, index: index)
            }
        }
        for case (let field, let path?) in [("netrcFile", item.netrcFile), ("cookieFile", item.cookieFile)] {
            try readable(field, path, index: index, folder: false)
        }
        if let credentials = item.credentials {
            guard !credentials.user.isEmpty else {
                throw .invalidField("credentials.user", "must not be empty", index: index)
            }
            network.credentials = HaulCore.Credentials(user: credentials.user, password: credentials.password)
        }
        return network
    }

    static func readable(_ field: String, _ path: String, index: Int?, folder: Bool) throws(APIError) {
        // Bytes, not characters: "/" and a combining mark after it are one Character, and the path is still absolute.
        guard path.utf8.first == UInt8(ascii: "/") else {
            throw .invalidField(field, "must be an absolute path on the daemon's machine", index: index)
        }
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder), isFolder.boolValue == folder,
            folder || FileManager.default.isReadableFile(atPath: path)
        else {
            // The request is well formed; the daemon's disk does not hold what it names (as a folder in the way of
            // a destination, a 409).
            let problem = "\(path) is not a \(folder ? "folder" : "file") the daemon can read"
            var error = APIError(
                .conflict, "unreadableFile", "\(index.map { "item \($0): " } ?? "")\(field): \(problem)", index: index,
                field: field)
            error.problem = problem
            throw error
        }
    }
}

extension APIHandler {
    /// The URLs the API takes, as the document's pattern for `url` says (a test checks the document has it).
    static let urlPattern =
        #"^(https?|ftps?|ftpes)://[A-Za-z0-9.-]+(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?(/([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*)?$"#

    /// Per byte: bit 0 a byte a path may hold as it is, bit 1 a hex digit, bit 2 a byte of a host name.
    private static let byteClasses: [UInt8] = {
        var table = [UInt8](repeating: 0, count: 256)
        for byte in UInt8(ascii: "0")...UInt8(ascii: "9") { table[Int(byte)] |= 0b111 }
        for byte in UInt8(ascii: "A")...UInt8(ascii: "Z") { table[Int(byte)] |= 0b101 }
        for byte in UInt8(ascii: "a")...UInt8(ascii: "z") { table[Int(byte)] |= 0b101 }
        for byte in "abcdefABCDEF".utf8 { table[Int(byte)] |= 0b010 }
        for byte in "._~!$&'()*+,;=:@/?-".utf8 { table[Int(byte)] |= 0b001 }
        for byte in ".-".utf8 { table[Int(byte)] |= 0b100 }
        return table
    }()
    private static let schemes = DownloadRules.urlSchemes.map { Array(($0 + "://").utf8) }

    /// Whether `text` matches `urlPattern`, checked by hand, byte by byte: a `Regex` (or sets of bytes) for every
    /// item of a list of thousands costs more than the rest of its checks. (A test checks the two agree on thousands
    /// of strings.)
    /// Why a download's URL is refused: the engine's rule's words when the rule refuses it (a space, a control
    /// character, no host, another scheme), else the document's pattern's.
    static func urlRefusal(_ text: String) -> String {
        do { _ = try DownloadRules.checkedURL(text) } catch { return "'\(text)' \(error.problem)" }
        return "'\(text)' is not an http, https or ftp URL (ASCII host; percent-encode the rest)"
    }

    static func isAcceptedURL(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { isAcceptedURL(bytes: $0) }
    }

    private static func isAcceptedURL(bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let classes = byteClasses
        let count = bytes.count
        guard let scheme = schemes.first(where: { count >= $0.count && bytes.starts(with: $0) }) else { return false }
        var index = scheme.count
        let hostStart = index
        while index < count, classes[Int(bytes[index])] & 0b100 != 0 { index += 1 }
        guard index > hostStart else { return false }
        if index < count, bytes[index] == UInt8(ascii: ":") {
            // One to four digits of any value, or five from 10000 to 65535 (the pattern's alternatives).
            let digitsStart = index + 1
            var end = digitsStart
            var port = 0
            while end < count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[end]), end - digitsStart < 6 {
                port = port * 10 + Int(bytes[end] - UInt8(ascii: "0"))
                end += 1
            }
            switch end - digitsStart {
            case 1...4: break
            case 5: guard bytes[digitsStart] != UInt8(ascii: "0"), port <= 65535 else { return false }
            default: return false
            }
            index = end
        }
        guard index < count else { return true }
        guard bytes[index] == UInt8(ascii: "/") else { return false }
        while index < count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < count, classes[Int(bytes[index + 1])] & 0b010 != 0,
                    classes[Int(bytes[index + 2])] & 0b010 != 0
                else { return false }
                index += 3
            } else if classes[Int(byte)] & 0b001 != 0 {
                index += 1
            } else {
                return false
            }
        }
        return true
    }
}
