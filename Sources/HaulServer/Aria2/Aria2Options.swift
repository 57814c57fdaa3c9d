import Foundation
import Haul
import HaulAPI
import HaulCore
import HaulWire

/// aria2's option names and values (every value a string; `header` a list) read into Haul's: the options of
/// `aria2.addUri`, `changeOption` and `changeGlobalOption`. Each bad value is an error naming the option.
enum Aria2Options {
    /// aria2's options that run a program at an event (`on-download-complete`, …): refused by name. Haul's hooks are
    /// set only on `haul serve`'s command line or in its config file, never over RPC.
    static func refuseHook(_ name: String) throws(Failure) {
        guard name.hasPrefix("on-download-") || name.hasPrefix("on-bt-") else { return }
        throw Failure(
            message: "option '\(name)': programs to run are set only with haul serve --on-complete and --on-error "
                + "or in its config file, never over RPC")
    }

    /// An option aria2 has that is about what Haul does its own way (file allocation, renaming, resuming, BitTorrent,
    /// retries' timing): taken and ignored, so clients that always send them work.
    static let ignored: Set<String> = [
        "allow-piece-length-change", "always-resume", "async-dns", "auto-file-renaming", "auto-save-interval",
        "conditional-get", "connect-timeout", "continue", "disk-cache", "enable-http-keep-alive",
        "enable-http-pipelining", "file-allocation", "follow-metalink", "follow-torrent", "http-accept-gzip",
        "http-no-cache", "lowest-speed-limit", "max-file-not-found", "max-resume-failure-tries", "metalink-file",
        "min-tls-version", "no-file-allocation-limit", "piece-length", "proxy-method", "remote-time",
        "remove-control-file", "retry-wait", "reuse-uri", "stream-piece-selector", "uri-selector",
        "realtime-chunk-checksum",
        "max-upload-limit", "seed-ratio", "seed-time", "pause-metadata", "force-save",
    ]

    /// What a change of a download's options does: the options `aria2.changeOption` can change.
    struct Change: Equatable {
        var rateLimit: Int64??
        var connections: Int?
    }

    /// What a change of the global options does.
    struct GlobalChange: Equatable {
        var maxConcurrentDownloads: Int?
        var rateLimit: Int64??
        var connections: Int?
    }

    /// An option's value that Haul cannot take.
    struct Failure: Error, Equatable {
        var message: String
    }

    /// The values of `options`, each a string as aria2 sends them (numbers and booleans are taken too).
    private static func strings(_ options: [String: JSONValue]) throws(Failure) -> [String: String] {
        var result: [String: String] = [:]
        for (name, value) in options where name != "header" {
            switch value {
            case .string(let text): result[name] = text
            case .integer(let number): result[name] = String(number)
            case .bool(let flag): result[name] = String(flag)
            default: throw Failure(message: "option '\(name)' must be a string, not \(value.kind)")
            }
        }
        return result
    }

    /// The add request of `uri` with aria2 `options`; `paused` says whether the download starts paused.
    static func addDownload(uri: String, options given: [String: JSONValue]) throws(Failure)
        -> Components.Schemas.AddDownload
    {
        var item = Components.Schemas.AddDownload(url: uri)
        let options = try strings(given)
        var headers: [String: String] = [:]
        for line in try headerLines(given["header"]) {
            guard let colon = line.firstIndex(of: ":") else {
                throw Failure(message: "option 'header': '\(line)' is not NAME: VALUE")
            }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces)
            // Browser extensions hand aria2 the page's request headers, `Accept-Encoding: gzip, br` and a `Range`
            // among them; aria2 sent them on. Haul sets those itself (the REST API refuses them), so they are left
            // out here rather than failing the add.
            let lowered = name.lowercased()
            if lowered == "accept-encoding" || DownloadRules.ownedHeaders.contains(lowered) { continue }
            headers[name] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var connectionLimits: [Int] = []
        var user: String?
        var password: String?
        for (name, value) in options.sorted(by: { $0.key < $1.key }) {
            switch name {
            case "dir": item.directory = value
            case "out": try out(value, into: &item)
            case "split", "max-connection-per-server":
                connectionLimits.append(try count(name, value, in: DownloadRules.connections))
            case "min-split-size": item.minSplitSize = try size(name, value)
            case "max-download-limit":
                let limit = try size(name, value)
                item.limitRate = limit == 0 ? nil : limit
            case "checksum": item.checksum = try checksum(value)
            case "pause": item.paused = try flag(name, value)
            case "user-agent": item.userAgent = value
            case "referer": headers["Referer"] = value
            case "allow-overwrite": item.overwrite = try flag(name, value)
            case "timeout": item.timeoutSeconds = Double(try count(name, value, in: 1...600))
            case "max-tries":
                // aria2's 0 is "no limit"; Haul counts attempts without progress, and a million is no limit.
                let tries = try count(name, value, in: DownloadRules.retries)
                item.retries = tries == 0 ? DownloadRules.retries.upperBound : tries
            case "all-proxy": item.proxy = value
            case "no-proxy": item.noProxy = value
            case "http-user", "ftp-user": user = value
            case "http-passwd", "ftp-passwd": password = value
            case "load-cookies": item.cookieFile = value
            case "netrc-path": item.netrcFile = value
            case "no-netrc": item.useNetrc = !(try flag(name, value))
            case "check-certificate":
                item.tls = item.tls ?? .init()
                item.tls?.insecure = !(try flag(name, value))
            case "ca-certificate":
                item.tls = item.tls ?? .init()
                item.tls?.caCertificates = value
            case "certificate":
                item.tls = item.tls ?? .init()
                item.tls?.clientCertificate = value
            case "private-key":
                item.tls = item.tls ?? .init()
                item.tls?.clientKey = value
            case "gid":
                throw Failure(message: "option 'gid': Haul chooses the gid of a download")
            default:
                try refuseHook(name)
                guard ignored.contains(name) || name.hasPrefix("bt-") else {
                    throw Failure(message: "option '\(name)' is not one Haul takes")
                }
            }
        }
        if let limit = connectionLimits.min() { item.connections = limit }
        if let user {
            item.credentials = .init(user: user, password: password ?? "")
        } else if password != nil {
            throw Failure(message: "option 'http-passwd' needs 'http-user'")
        }
        if !headers.isEmpty { item.headers = .init(additionalProperties: headers) }
        return item
    }

    /// aria2's `out`: a path relative to `dir` (aria2 reads even a leading `/` so), whose folders are beneath it:
    /// `sub/file.iso` goes to `DIR/sub/file.iso`. One that climbs above `dir` (`../x`) is refused as such; its folder
    /// part joins the add's directory, which is then checked as any directory is (the allowed folders, links). Only
    /// its last name is the file name. Called after `dir` (options are read in name order).
    private static func out(_ value: String, into item: inout Components.Schemas.AddDownload) throws(Failure) {
        var path = Substring(value)
        while path.hasPrefix("/") { path = path.dropFirst() }
        guard !value.hasSuffix("/") else {
            throw Failure(message: "option 'out': '\(value)' ends with '/', a folder's name; give the file's name")
        }
        var depth = 0
        for component in path.split(separator: "/", omittingEmptySubsequences: true).dropLast() where component != "." {
            depth += component == ".." ? -1 : 1
            guard depth >= 0 else {
                throw Failure(message: "option 'out': '\(value)' climbs above dir with '..'; out is a path inside dir")
            }
        }
        guard let slash = path.lastIndex(of: "/") else {
            item.filename = String(path)
            return
        }
        item.filename = String(path[path.index(after: slash)...])
        let folder = String(path[..<slash])
        item.directory = item.directory.map { $0.hasSuffix("/") ? $0 + folder : $0 + "/" + folder } ?? folder
    }

    /// The options `aria2.changeOption` takes for one download.
    static func change(_ given: [String: JSONValue]) throws(Failure) -> Change {
        var change = Change()
        var limits: [Int] = []
        for (name, value) in try strings(given).sorted(by: { $0.key < $1.key }) {
            switch name {
            case "max-download-limit":
                let limit = try size(name, value)
                change.rateLimit = .some(limit == 0 ? nil : limit)
            case "split", "max-connection-per-server":
                limits.append(try count(name, value, in: DownloadRules.connections))
            default:
                try refuseHook(name)
                guard ignored.contains(name) || name.hasPrefix("bt-") else {
                    throw Failure(message: "option '\(name)' cannot be changed on a download in Haul")
                }
            }
        }
        change.connections = limits.min()
        return change
    }

    /// The options `aria2.changeGlobalOption` takes.
    static func globalChange(_ given: [String: JSONValue]) throws(Failure) -> GlobalChange {
        var change = GlobalChange()
        var limits: [Int] = []
        for (name, value) in try strings(given).sorted(by: { $0.key < $1.key }) {
            switch name {
            case "max-concurrent-downloads":
                change.maxConcurrentDownloads = try count(name, value, in: DownloadRules.concurrentDownloads)
            case "max-overall-download-limit":
                let limit = try size(name, value)
                change.rateLimit = .some(limit == 0 ? nil : limit)
            case "split", "max-connection-per-server":
                limits.append(try count(name, value, in: DownloadRules.connections))
            default:
                try refuseHook(name)
                guard ignored.contains(name) || name.hasPrefix("bt-") || name.hasPrefix("log") else {
                    throw Failure(message: "option '\(name)' cannot be changed in Haul (start haul serve with it)")
                }
            }
        }
        change.connections = limits.min()
        return change
    }

    /// A size as aria2 writes one: digits with an optional `K` or `M` (1024 and 1024²).
    static func size(_ name: String, _ text: String) throws(Failure) -> Int64 {
        var digits = Substring(text.trimmingCharacters(in: .whitespaces))
        var unit: Int64 = 1
        switch digits.last {
        case "K", "k": unit = 1 << 10
        case "M", "m": unit = 1 << 20
        default: break
        }
        if unit != 1 { digits = digits.dropLast() }
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }), let number = Int64(digits),
            number <= Int64.max / unit
        else {
            throw Failure(message: "option '\(name)': '\(text)' is not a size (digits, optionally with K or M)")
        }
        return number * unit
    }

    /// A whole number in `range`.
    static func count(_ name: String, _ text: String, in range: ClosedRange<Int>) throws(Failure) -> Int {
        guard let number = Int(text.trimmingCharacters(in: .whitespaces)), range.contains(number) else {
            throw Failure(
                message: "option '\(name)': '\(text)' is not a number from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }

    /// `true` or `false`.
    static func flag(_ name: String, _ text: String) throws(Failure) -> Bool {
        switch text {
        case "true": return true
        case "false": return false
        default: throw Failure(message: "option '\(name)': '\(text)' is not true or false")
        }
    }

    /// aria2's `TYPE=DIGEST` (`sha-256=…`, `sha-1=…`, `md5=…`) as Haul's `sha256=…`.
    static func checksum(_ text: String) throws(Failure) -> String {
        let parts = text.split(separator: "=", maxSplits: 1).map(String.init)
        guard parts.count == 2 else { throw Failure(message: "option 'checksum': '\(text)' is not TYPE=DIGEST") }
        let name = parts[0].lowercased().replacingOccurrences(of: "-", with: "")
        switch Checksum.parse("\(name)=\(parts[1])") {
        case .success(let checksum): return checksum.description
        // Told with the text as the client sent it ("'sha-256=ab': a sha256 digest is 64 hex digits").
        case .failure(let problem): throw Failure(message: "option 'checksum': '\(text)'\(problem.reason)")
        }
    }

    /// aria2's name of a digest algorithm.
    static func aria2Name(of algorithm: Checksum.Algorithm) -> String {
        switch algorithm {
        case .sha256: "sha-256"
        case .sha512: "sha-512"
        case .sha1: "sha-1"
        case .md5: "md5"
        }
    }

    /// The `header` option: one `NAME: VALUE` string or a list of them.
    private static func headerLines(_ value: JSONValue?) throws(Failure) -> [String] {
        switch value {
        case nil: return []
        case .string(let line): return [line]
        case .array(let lines):
            var result: [String] = []
            for line in lines {
                guard let text = line.string else {
                    throw Failure(message: "option 'header' must be a string or a list of strings")
                }
                result.append(text)
            }
            return result
        default: throw Failure(message: "option 'header' must be a string or a list of strings")
        }
    }
}
