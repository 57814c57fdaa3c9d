import Foundation
import HaulCore
import Synchronization

/// Who a request is from: its credentials and its cookies, as the download's options and the user's files give them.
extension LiveTransport {
    /// The credentials for a request to `url`: the download's own (`--user`, the URL's) on its own host, else
    /// `.netrc`'s entry for the host. A user name without a password takes `.netrc`'s password for that login.
    static func credentials(for url: URL, network: NetworkOptions, isOwnHost: Bool) throws -> Credentials? {
        let host = url.host ?? ""
        let given = isOwnHost ? network.credentials : nil
        if let given, !given.password.isEmpty { return given }
        guard network.usesNetrc else { return given }
        let netrc = try netrcFile(network.netrcFile)
        if let entry = netrc?.credentials(host: host, login: given?.user) {
            return Credentials(user: entry.login, password: entry.password ?? "")
        }
        return given
    }

    /// The `.netrc` at `path` (nil: `$HOME/.netrc`, which may be missing), read again when it changes.
    static func netrcFile(_ path: String?) throws -> Netrc? {
        let home = ProcessEnvironment.variables["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        let file = path ?? (home + "/.netrc")
        guard let text = try cachedText(file, required: path != nil, what: "the .netrc file") else { return nil }
        do { return try Netrc(parsing: text) } catch {
            throw DownloadError(
                .invalidArgument, "\(file): \(error.message.replacingOccurrences(of: ".netrc ", with: ""))")
        }
    }

    /// The `Cookie` value for a request to `url`: the cookie file's cookies for its domain and path, and `--cookie`'s
    /// pairs on the download's own host.
    static func cookieHeader(url: URL, network: NetworkOptions, isOwnHost: Bool) throws -> String? {
        var parts: [String] = []
        if let path = network.cookieFile, let text = try cachedText(path, required: true, what: "the cookie file") {
            let file: CookieFile
            do { file = try CookieFile(parsing: text) } catch {
                throw DownloadError(.invalidArgument, "the cookie file \(path): \(error.message)")
            }
            if let header = file.header(
                host: url.host ?? "", path: url.path(percentEncoded: true), secure: url.scheme?.lowercased() == "https",
                now: Int64(Date().timeIntervalSince1970))
            {
                parts.append(header)
            }
        }
        if isOwnHost, let cookies = network.cookies { parts.append(cookies) }
        return parts.isEmpty ? nil : parts.joined(separator: "; ")
    }

    /// A small file's text, read once per change of its modification time; nil for a missing file that is not
    /// `required`.
    private static func cachedText(_ path: String, required: Bool, what: String) throws -> String? {
        let attributes = try? FileManager.default.attributesOfItem(atPath: path)
        guard let attributes else {
            if required { throw DownloadError(.invalidArgument, "cannot read \(what) \(path): no such file") }
            return nil
        }
        let stamp = (attributes[.modificationDate] as? Date) ?? .distantPast
        if let known = textFiles.withLock({ $0[path] }), known.stamp == stamp { return known.text }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw DownloadError(.invalidArgument, "cannot read \(what) \(path)")
        }
        let text = String(decoding: data, as: UTF8.self)
        textFiles.withLock { $0[path] = (stamp, text) }
        return text
    }

    private static let textFiles = Mutex<[String: (stamp: Date, text: String)]>([:])
}
