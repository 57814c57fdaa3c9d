import ArgumentParser
import Foundation
import Haul
import HaulAPI
import HaulCore

/// How each download is fetched: the flags `haul get` and `haul add` share.
struct TransferOptions: ParsableArguments {
    // Numbers are taken as given, a minus sign too (`.unconditional`), so `--retries -1` is refused by its rule
    // rather than reported as a missing value.
    @Option(
        parsing: .unconditional,
        help: """
            Limit all downloads together to RATE bytes a second (e.g. 500K, 2M; K, M, G are powers of 1024; 0: no \
            limit); through a daemon, each download of this command gets this limit.
            """)
    var limitRate: String?

    @Option(
        name: [.customShort("x"), .customLong("connections")], parsing: .unconditional,
        help: "The most connections per download, 1 to 16 (Haul adds them one at a time while they make it faster).")
    var connections: Int?

    @Option(
        name: .customLong("mirror"),
        help: ArgumentHelp(
            "Another URL of the same file, fetched from at once (repeatable; one URL only: in an -i file, put a "
                + "file's mirrors on its line, separated by tabs).", valueName: "URL"))
    var mirrors: [String] = []

    @Option(
        parsing: .unconditional,
        help: "Start no segment smaller than SIZE when splitting a file over connections (e.g. 4M; at least 1M).")
    var minSplitSize: String = "4M"

    @Flag(help: "Replace a file at the destination that Haul did not create.")
    var overwrite = false

    @Option(
        help: ArgumentHelp(
            "Expected checksum, ALGO=HEX with ALGO one of sha256, sha512, sha1, md5; or auto: the one published "
                + "beside the file (URL.sha256, URL.sha512, URL.sha256sum, SHA256SUMS, SHA512SUMS in its folder).",
            valueName: "ALGO=HEX|auto"))
    var checksum: String?

    @Option(
        help: ArgumentHelp(
            "The variant of an HLS stream to download: a resolution (1280x720), a height (720p), a bandwidth or part "
                + "of its URI (default: the highest bandwidth).", valueName: "NAME"))
    var variant: String?

    @Flag(help: "Make a DASH stream's video and audio one file with ffmpeg, when it is installed (else two files).")
    var mux = false

    @Option(
        help: ArgumentHelp(
            "Verify with the checksum file at URL (a SHA256SUMS-style list naming the file, or one digest).",
            valueName: "URL"))
    var checksumURL: String?

    @Option(name: .customLong("header"), help: "Extra request header 'Name: value' (repeatable).")
    var headers: [String] = []

    @Option(help: "The User-Agent header.")
    var userAgent: String?

    @Option(parsing: .unconditional, help: "Seconds without a byte before the connection is abandoned and retried.")
    var timeout: Double = 30

    @Option(parsing: .unconditional, help: "Failed attempts in a row without progress before giving up.")
    var retries: Int = 5

    @Option(help: "Trust the CA certificates in this PEM FILE too (besides the system's, or SSL_CERT_FILE's).")
    var cacert: String?

    @Option(help: "Trust the PEM CA certificates in this folder too.")
    var capath: String?

    @Flag(
        name: [.customShort("k"), .customLong("insecure")],
        help: "Do not verify HTTPS servers' certificates (encrypted, but the server is not proven; warns each time).")
    var insecure = false

    @Option(help: "Show this PEM client certificate to HTTPS servers (its key in --key, or in the same file).")
    var cert: String?

    @Option(help: "The PEM private key of --cert.")
    var key: String?

    @Option(
        help: """
            Use this proxy: http://[USER:PASSWORD@]HOST[:PORT] (CONNECT tunnels for https), socks5:// or socks5h://; \
            "" for none. Default: the http_proxy, https_proxy and all_proxy variables.
            """)
    var proxy: String?

    @Option(
        help: "Hosts to reach without the proxy, comma-separated (names and their subdomains, IPs, CIDR ranges, *).")
    var noproxy: String?

    @Option(
        name: [.customShort("u"), .customLong("user")],
        help: "Credentials NAME[:PASSWORD] for the download's host (asked for on the terminal when missing).")
    var user: String?

    @Option(help: "Read credentials from this .netrc file (default: ~/.netrc).")
    var netrcFile: String?

    @Flag(help: "Do not read ~/.netrc.")
    var noNetrc = false

    @Option(
        name: [.customShort("b"), .customLong("cookie")],
        help: "Send these cookies ('name=value; name2=value2') to the download's host; without '=', a cookie file.")
    var cookie: String?

    @Option(help: "Send the cookies of this Netscape cookie file to their domains and paths.")
    var loadCookies: String?

    func validate() throws {
        if let limitRate, TokenBucket.parseLimit(limitRate) == nil {
            throw ValidationError("--limit-rate '\(limitRate)' is not a rate such as 500K or 2M (0: no limit)")
        }
        if !(timeout > 0) || !timeout.isFinite {
            throw ValidationError("--timeout must be a positive number of seconds")
        }
        if retries < 0 { throw ValidationError("--retries must be 0 or more") }
        for (flag, path) in [("--cacert", cacert), ("--cert", cert), ("--key", key)] {
            if let path, !FileManager.default.isReadableFile(atPath: path) {
                throw ValidationError("\(flag) \(path): no readable file there")
            }
        }
        if let capath {
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: capath, isDirectory: &isFolder), isFolder.boolValue else {
                throw ValidationError("--capath \(capath): no folder there")
            }
        }
        if key != nil, cert == nil { throw ValidationError("--key needs --cert") }
        if let proxy, !proxy.isEmpty {
            do { _ = try ProxyEndpoint(parsing: proxy) } catch { throw ValidationError("--proxy: \(error.message)") }
        }
        for (flag, path) in [("--netrc-file", netrcFile), ("--load-cookies", loadCookies)] {
            if let path, !FileManager.default.isReadableFile(atPath: path) {
                throw ValidationError("\(flag) \(path): no readable file there")
            }
        }
        if let netrcFile, let text = try? String(contentsOfFile: netrcFile, encoding: .utf8) {
            do { _ = try Netrc(parsing: text) } catch {
                throw ValidationError(
                    "--netrc-file \(netrcFile): \(error.message.replacingOccurrences(of: ".netrc ", with: ""))")
            }
        }
        if netrcFile != nil, noNetrc { throw ValidationError("give --netrc-file or --no-netrc, not both") }
        for path in [loadCookies, cookie.flatMap { $0.contains("=") ? nil : $0 }].compactMap({ $0 }) {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ValidationError("--cookie \(path): no readable cookie file there (cookie data is name=value)")
            }
            do { _ = try CookieFile(parsing: String(decoding: data, as: UTF8.self)) } catch {
                throw ValidationError("cookie file \(path): \(error.message)")
            }
        }
        if let cookie, cookie.contains("=") {
            do { _ = try CookieFile.pairs(cookie) } catch { throw ValidationError(error.message) }
        }
        if let user, user.isEmpty || user.hasPrefix(":") { throw ValidationError("--user needs a NAME") }
        try checkRule("--mirror") { () throws(DownloadRules.RuleViolation) in
            try DownloadRules.checkMirrors(mirrors)
        }
        if let connections {
            try checkRule("-x/--connections") { () throws(DownloadRules.RuleViolation) in
                try DownloadRules.checkConnections(connections)
            }
        }
        guard let split = TokenBucket.parseRate(minSplitSize) else {
            throw ValidationError("--min-split-size '\(minSplitSize)' is not a size such as 4M")
        }
        try checkRule("--min-split-size") { () throws(DownloadRules.RuleViolation) in
            try DownloadRules.checkMinimumSplitSize(split)
        }
        if let checksum = givenChecksum, case .failure(let problem) = Checksum.parse(checksum) {
            throw ValidationError("--checksum '\(checksum)'\(problem.reason)")
        }
        if let checksumURL {
            if checksum != nil { throw ValidationError("--checksum and --checksum-url name two checksums; give one") }
            do { try DownloadRules.checkURL(checksumURL) } catch {
                throw ValidationError("--checksum-url '\(checksumURL)' \(error.problem)")
            }
        }
        for header in headers {
            switch Result(catching: { () throws(DownloadError) in try DownloadOptions.Header(parsing: header) }) {
            // The parser's message begins "header …": the flag's name goes before it, as for every other flag.
            case .failure(let error): throw ValidationError("--" + error.message)
            case .success(let parsed):
                do { try DownloadRules.checkHeader(parsed) } catch {
                    throw ValidationError("--header \(error.problem)")
                }
            }
        }
    }

    /// The limit `--limit-rate` gives; nil for none (left out, or 0).
    var rate: Int64? { limitRate.flatMap(TokenBucket.parseLimit).flatMap { $0 > 0 ? $0 : nil } }

    /// How HTTPS servers are trusted (paths made absolute: a daemon or a later run has another current folder).
    var tls: TLSOptions {
        TLSOptions(
            caCertificates: cacert.map(Self.absolute), caDirectory: capath.map(Self.absolute), insecure: insecure,
            clientCertificate: cert.map(Self.absolute), clientKey: key.map(Self.absolute))
    }

    /// The engine's options.
    func downloadOptions(continuePartial: Bool, computesSHA256: Bool) throws -> DownloadOptions {
        var options = DownloadOptions(
            headers: try headers.map { try DownloadOptions.Header(parsing: $0) },
            userAgent: userAgent,
            checksum: try givenChecksum.map { try Checksum(parsing: $0) },
            overwrite: overwrite,
            continuePartial: continuePartial,
            idleTimeoutSeconds: timeout,
            maximumAttemptsWithoutProgress: retries,
            computesSHA256: computesSHA256,
            maxConnectionsPerDownload: connections ?? DownloadOptions.defaultMaxConnections,
            minimumSplitSize: TokenBucket.parseRate(minSplitSize) ?? DownloadOptions.defaultMinimumSplitSize
        )
        options.streamVariant = variant
        options.streamMux = mux
        return options
    }

    /// The network options for downloads handed to a daemon, read once for a whole list (a `--user NAME` without a
    /// password asks once); `--insecure` warns here, as without a daemon.
    func networkForDaemon() throws -> NetworkOptions {
        let options = try network()
        if insecure {
            Console.error(
                Data("haul: warning: --insecure: HTTPS certificates are not verified; the server is not proven\n".utf8))
        }
        return options
    }

    /// Proxies, credentials, `.netrc` and cookies (paths made absolute). A `--user NAME` without a password asks
    /// for it on the terminal, as curl does; without a terminal it is an error.
    func network() throws -> NetworkOptions {
        var options = NetworkOptions(
            proxy: ProxyRules(proxy: proxy, noProxy: noproxy), netrcFile: netrcFile.map(Self.absolute),
            usesNetrc: !noNetrc)
        if let cookie {
            if cookie.contains("=") {
                options.cookies = try CookieFile.pairs(cookie)
            } else {
                options.cookieFile = Self.absolute(cookie)
            }
        }
        if let loadCookies {
            if options.cookieFile != nil {
                throw ValidationError("give one cookie file: --cookie FILE or --load-cookies FILE")
            }
            options.cookieFile = Self.absolute(loadCookies)
        }
        if let user {
            if let colon = user.firstIndex(of: ":") {
                options.credentials = Credentials(
                    user: String(user[..<colon]), password: String(user[user.index(after: colon)...]))
            } else {
                guard isatty(0) == 1, let typed = getpass("Enter the password for '\(user)': ") else {
                    throw ValidationError("--user \(user) has no password and there is no terminal to ask for it on")
                }
                options.credentials = Credentials(user: user, password: String(cString: typed))
            }
        }
        return options
    }

    /// The engine's options with the TLS and network ones; `--insecure` warns on standard error every time it is
    /// used.
    func downloadOptionsWithTLS(continuePartial: Bool, computesSHA256: Bool) throws -> DownloadOptions {
        var options = try downloadOptions(continuePartial: continuePartial, computesSHA256: computesSHA256)
        options.tls = tls
        options.network = try network()
        if insecure {
            Console.error(
                Data("haul: warning: --insecure: HTTPS certificates are not verified; the server is not proven\n".utf8))
        }
        return options
    }

    /// One download as the daemon's API takes it: to `output` (a file) or into `directory`.
    ///
    /// The daemon of this machine (`isLocal`, its socket) is given both made absolute here, and the current folder
    /// when neither is given, as `haul get` without a daemon: it does not share this process's current folder.
    /// Another machine's daemon (`--server`) is given them as they are, naming its own folders: relative to its
    /// download folder, or absolute inside a folder it allows; with neither, the download goes to its download
    /// folder (as aria2's RPC does without `dir`). This machine's current folder means nothing there.
    func item(
        _ entry: URLList.Entry, output: String?, directory: String?, isLocal: Bool, continuePartial: Bool,
        computesSHA256: Bool,
        network: NetworkOptions, paused: Bool = false, priority: Components.Schemas.Priority? = nil
    ) throws -> Components.Schemas.AddDownload {
        let url = entry.url
        let mirrors = entry.mirrors
        let checksum = entry.checksum?.description ?? givenChecksum
        var folder = isLocal ? Self.absolute(directory ?? FileManager.default.currentDirectoryPath) : directory
        var filename = entry.name
        // A Metalink's file in folders (`docs/a.txt`): the folders go beneath the add's folder, which the daemon
        // makes when missing (inside its allowed folders), and the name is the file's.
        if let name = entry.name, name.contains("/") {
            let inside = PathName.folder(of: name)
            folder = folder.map { $0 + "/" + inside } ?? inside
            filename = (name as NSString).lastPathComponent
        }
        if let output {
            let path = isLocal ? Self.absolute(output) : output
            let parent = PathName.folder(of: path)
            folder = parent.isEmpty ? nil : parent
            filename = PathName.lastComponent(of: path)
        }
        var headerFields: [String: String] = [:]
        for header in try headers.map({ try DownloadOptions.Header(parsing: $0) }) {
            headerFields[header.name] = header.value
        }
        return Components.Schemas.AddDownload(
            url: url, directory: folder, filename: filename, priority: priority, connections: connections,
            minSplitSize: TokenBucket.parseRate(minSplitSize), mirrors: mirrors.isEmpty ? nil : mirrors,
            pieces: entry.pieces.map(Components.Schemas.PieceHashes.init), checksum: checksum,
            headers: headerFields.isEmpty ? nil : .init(additionalProperties: headerFields), limitRate: rate,
            paused: paused ? true : nil, overwrite: overwrite ? true : nil,
            continuePartial: continuePartial ? true : nil, userAgent: userAgent, timeoutSeconds: timeout,
            retries: retries, computeSha256: computesSHA256 ? true : nil,
            tls: tls.isDefault
                ? nil
                : .init(
                    caCertificates: tls.caCertificates, caDirectory: tls.caDirectory,
                    insecure: tls.insecure ? true : nil,
                    clientCertificate: tls.clientCertificate, clientKey: tls.clientKey),
            proxy: network.proxy.proxy, noProxy: network.proxy.noProxy,
            credentials: network.credentials.map { .init(user: $0.user, password: $0.password) },
            netrcFile: network.netrcFile, useNetrc: network.usesNetrc ? nil : false, cookies: network.cookies,
            cookieFile: network.cookieFile, variant: variant, mux: mux ? true : nil)
    }

    static func absolute(_ path: String) -> String {
        // Lexical, as the shell treats `..`: Foundation's standardizingPath also resolves links, a seventh of the
        // time of `haul add -i` with a thousand URLs.
        PathName.absolute(path.hasPrefix("~") ? (path as NSString).expandingTildeInPath : path)
    }
}

extension TransferOptions {
    /// The files of `haul get` and `haul add`: `collectURLs` with these options' mirrors and checksum; a usage error
    /// is told and the command exits 2.
    func entries(_ urls: [String], inputFile: String?, output: String?) throws -> [URLList.Entry] {
        do {
            return try collectURLs(
                urls, inputFile: inputFile, mirrors: mirrors, checksum: givenChecksum, output: output != nil)
        } catch let error as ValidationError {
            Console.error(Data("Error: \(error.message)\n".utf8))
            throw ExitCode(2)
        }
    }

    /// `--checksum ALGO=HEX`: nil for `auto`, which `withSidecars` resolves.
    var givenChecksum: String? { checksum?.lowercased() == "auto" ? nil : checksum }

    /// `list` with each file's checksum found beside it (`--checksum auto`) or in `--checksum-url`, saying which file
    /// gave it. With `auto`, a file none of whose sidecars has one is said to be unverified, and its download does
    /// not fail for it; a `--checksum-url` the user named that cannot be read, or that has no checksum for a file,
    /// exits 1 before anything is fetched. A file that has a checksum already (a Metalink's) keeps it.
    func withSidecars(_ list: [URLList.Entry], quiet: Bool) async throws -> [URLList.Entry] {
        guard checksum?.lowercased() == "auto" || checksumURL != nil else { return list }
        var options = DownloadOptions(
            headers: try headers.map { try DownloadOptions.Header(parsing: $0) }, userAgent: userAgent)
        options.tls = tls
        var resolved = list
        for index in resolved.indices where resolved[index].checksum == nil {
            let url = resolved[index].url
            let found: ChecksumSidecar.Found?
            do { found = try await ChecksumSidecar.find(for: url, list: checksumURL, options: options) } catch {
                Console.error(
                    Data("haul: error: \(Output.shown(url)): \(error.message); nothing fetched\n".utf8))
                throw ExitCode(1)
            }
            if let found {
                resolved[index].checksum = found.checksum
                if !quiet {
                    let name = ChecksumSidecar.fileName(of: url)
                    Console.error(
                        Data(
                            "haul: \(name): verifying with the \(found.checksum.algorithm.rawValue) of \(found.source)\n"
                                .utf8))
                }
            } else {
                let tried = "URL.sha256, URL.sha512, URL.sha256sum, SHA256SUMS and SHA512SUMS"
                Console.error(
                    Data("haul: \(Output.shown(url)): no checksum found (tried \(tried)); not verifying\n".utf8))
            }
        }
        return resolved
    }
}

/// The URLs of a command: its arguments, then an input file read by `URLList` (`-` is standard input); each once, in
/// first-seen order. A line that is not an http or https URL is a usage error that names its line.
func collectURLs(
    _ arguments: [String], inputFile: String?, mirrors: [String] = [], checksum: String? = nil, output: Bool = false
) throws -> [URLList.Entry] {
    if !mirrors.isEmpty, arguments.count != 1 || inputFile != nil || isMetalinkFile(arguments[0]) {
        throw ValidationError(
            "--mirror names mirrors of one URL; for several files, put each file's mirrors on its line of an -i file, "
                + "separated by tabs")
    }
    var list: [URLList.Entry] = []
    for argument in arguments {
        guard isMetalinkFile(argument) else {
            list.append(URLList.Entry(url: argument, mirrors: DownloadRules.distinctMirrors(mirrors, of: argument)))
            continue
        }
        list += try metalinkEntries(argument, checksum: checksum)
    }
    if let inputFile {
        let text: String
        if inputFile == "-" {
            text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
        } else {
            guard let data = FileManager.default.contents(atPath: inputFile) else {
                throw ValidationError("cannot read the input file \(inputFile)")
            }
            text = String(decoding: data, as: UTF8.self)
        }
        do { list += try URLList.entries(text) } catch { throw ValidationError(error.message) }
    }
    // An input file alone is deduplicated as it is read (`URLList.entries`): a second pass hashed every URL again.
    var seen = Set<String>()
    let entries = arguments.isEmpty ? list : list.filter { seen.insert($0.url).inserted }
    if output, entries.count > 1 {
        throw ValidationError("-o PATH takes one file, and there are \(entries.count): use -d DIR for several")
    }
    return entries
}

/// The usage errors of the URLs and destination of `haul get` and `haul add`.
func checkTargets(urls: [String], inputFile: String?, output: String?, directory: String?, continue: Bool) throws {
    if output != nil, directory != nil { throw ValidationError("give -o PATH or -d DIR, not both") }
    if urls.isEmpty, inputFile == nil { throw ValidationError("give at least one URL, or -i FILE") }
    if output != nil, urls.count + (inputFile == nil ? 0 : 2) > 1 {
        throw ValidationError("-o PATH takes one URL; use -d DIR for several")
    }
    // A name ending in '/' is a folder's (as curl's and wget's -o/-O refuse it); the folder form is -d.
    if let output, output.hasSuffix("/") {
        throw ValidationError("-o PATH names a file, and '\(output)' ends with '/'; to download into it, use -d")
    }
    // curl's and wget's `-o -` write to standard output. Haul only writes files it can resume and check, so it
    // refuses instead of making a file named '-' (one of that name is `-o ./-`).
    if output == "-" {
        throw ValidationError(
            "-o - would mean standard output, and Haul writes only files (resumable, checked): give -o FILE, "
                + "or -o ./- for a file named '-'"
        )
    }
    if `continue`, output == nil {
        throw ValidationError("-c/--continue needs -o PATH: it adopts the file at that path")
    }
}

/// Throws a usage error naming the first of `urls` that is not one Haul downloads (nor a Metalink file here).
/// Called from `run()`, not `validate()`: swift-argument-parser validates before it reports an unknown option, and
/// `haul add --sort '*.iso=ISO' URL` would be told that `*.iso=ISO` is not a URL instead of that `add` takes no
/// `--sort`.
func checkURLs(_ urls: [String]) throws {
    for url in urls where !isMetalinkFile(url) { try checkURL(url) }
}

/// Whether a `haul get` or `haul add` argument names a Metalink file (`.meta4`, `.metalink`) on this machine.
func isMetalinkFile(_ argument: String) -> Bool {
    let lowered = argument.lowercased()
    return (lowered.hasSuffix(".meta4") || lowered.hasSuffix(".metalink")) && !lowered.contains("://")
        && FileManager.default.fileExists(atPath: argument)
}

/// The downloads of the files a Metalink file describes, each with its mirrors, hashes and name; `checksum` is the
/// user's `--checksum`, which must agree with the Metalink's.
func metalinkEntries(_ path: String, checksum: String?) throws -> [URLList.Entry] {
    guard let data = FileManager.default.contents(atPath: path) else {
        throw ValidationError("cannot read the Metalink file \(path)")
    }
    do {
        let given = try checksum.map { text throws(DownloadError) in try Checksum(parsing: text) }
        let metalink = try Metalink.parse(String(decoding: data, as: UTF8.self))
        return try metalink.files.map { file throws(DownloadError) in URLList.Entry(try file.plan(checksum: given)) }
    } catch {
        throw ValidationError("\(path): \(error.message)")
    }
}

/// Throws a usage error naming what is wrong with `url` (`DownloadRules.checkedURL`'s words).
func checkURL(_ url: String) throws {
    do { try URLList.check(url) } catch { throw ValidationError(error.message) }
}

/// Creates the folder of `-d DIR` and its parents when they are missing, as wget's `-P`, aria2c's `-d` and curl's
/// `--create-dirs` do, each beneath the deepest folder that exists (`HeldFolder.make`); exits 1 naming the cause
/// when it cannot. (Only on this machine: a daemon reached with `--server` creates what is missing inside its own
/// allowed folders.)
func createFolder(_ path: String) throws {
    do { _ = try HeldFolder.make(path) } catch {
        // The message names the folder and what went wrong ("cannot create the folder …", "… is not a folder").
        Console.error(Data("haul: error: \(error.message)\n".utf8))
        throw ExitCode(1)
    }
}

/// Creates the folders the downloads of `list` go to when they are missing, as `createFolder` makes them: `-d`'s,
/// `-o`'s (as curl's `--create-dirs` does), and those a Metalink's names put files in (`docs/a.txt`) beneath the
/// folder. For downloads run here or by the daemon on this machine, which makes no folder for its own user's socket.
/// (A daemon reached with `--server` makes them inside its allowed folders.) The Metalink's plan refused a name
/// leading out.
func createFolders(of list: [URLList.Entry], output: String?, directory: String?) throws {
    if let output {
        let parent = PathName.folder(of: output)
        if !parent.isEmpty { try createFolder(parent) }
        return
    }
    if let directory { try createFolder(directory) }
    let base = directory ?? FileManager.default.currentDirectoryPath
    for name in Set(list.compactMap(\.name)) where name.contains("/") {
        try createFolder(base + "/" + PathName.folder(of: name))
    }
}

/// Runs a check of `DownloadRules` on an option's value; a value outside its rule is a usage error naming `option`.
func checkRule(_ option: String, _ check: () throws(DownloadRules.RuleViolation) -> Void) throws {
    do { try check() } catch { throw ValidationError("\(option) \(error.problem)") }
}
