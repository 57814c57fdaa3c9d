import Foundation
import Haul
import HaulAPI
import HaulCore
import HaulWire

/// What the daemon's HTTP side needs to know: the token, the folders downloads may go to, the names it answers to.
public struct DaemonConfiguration: Sendable {
    /// The secret every TCP request must carry (bearer token or session cookie).
    public var token: String
    /// Where downloads go when a request names no folder, and what relative folders are under.
    public var downloadDirectory: String
    /// Further folders (and everything under them) that TCP requests may name.
    public var allowedDirectories: [String]
    /// Host names besides loopback ones and the listen address that requests may carry in `Host`.
    public var allowedHosts: [String]
    /// The address the TCP listener is bound to (a host name or an IP address).
    public var listenHost: String
    /// Whether the TCP listener speaks TLS (the session cookie is then `Secure`).
    public var usesTLS: Bool

    /// Makes a configuration.
    public init(
        token: String,
        downloadDirectory: String,
        allowedDirectories: [String] = [],
        allowedHosts: [String] = [],
        listenHost: String = "127.0.0.1",
        usesTLS: Bool = false
    ) {
        self.token = token
        self.downloadDirectory = downloadDirectory
        self.allowedDirectories = allowedDirectories
        self.allowedHosts = allowedHosts
        self.listenHost = listenHost
        self.usesTLS = usesTLS
    }

    /// The names a `Host` header may carry: loopback names and addresses, the listen address, `allowedHosts`.
    var hostNames: Set<String> {
        var names: Set<String> = ["localhost", "127.0.0.1", "::1", "[::1]"]
        names.insert(listenHost.lowercased())
        for host in allowedHosts { names.insert(host.lowercased()) }
        return names
    }

    /// The default download folder: `$XDG_DOWNLOAD_DIR`, else `~/Downloads` when it exists, else the current folder.
    public static func defaultDownloadDirectory() -> String {
        let environment = ProcessInfo.processInfo.environment
        if let directory = environment["XDG_DOWNLOAD_DIR"], !directory.isEmpty { return directory }
        let downloads = (NSHomeDirectory() as NSString).appendingPathComponent("Downloads")
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: downloads, isDirectory: &isDirectory), isDirectory.boolValue {
            return downloads
        }
        return FileManager.default.currentDirectoryPath
    }
}

/// Which way a request came in, and so what it may do.
public enum Door: Sendable, Equatable {
    /// TCP: token required, folders confined to the download folder and the allowed ones, names sanitised.
    case network
    /// The Unix socket of the user's own `haul` commands: any folder the user can write.
    case socket

    var origin: DownloadOrigin { self == .network ? .api : .socket }
}

/// Resolves the folder and file name a request asks for into a destination, within what its door allows.
struct FolderPolicy: Sendable {
    let downloadDirectory: String
    /// The allowed folders as the manager holds them (`DownloadManager.allowedFolders`): the download folder first.
    let allowed: AllowedFolders
    /// The download folder resolved (a request naming no folder needs no file-system call).
    let resolvedDownloadDirectory: String
    /// The download folder as requests name it, normalised.
    let normalizedDownloadDirectory: String

    init(_ configuration: DaemonConfiguration, allowed: AllowedFolders) {
        downloadDirectory = configuration.downloadDirectory
        self.allowed = allowed
        resolvedDownloadDirectory = AllowedFolders.resolved(configuration.downloadDirectory)
        normalizedDownloadDirectory = PathName.normalized(configuration.downloadDirectory)
    }

    /// The destination of a request. Over the network a relative folder is under the download folder; an absolute
    /// one must name a place inside the download folder or an allowed one, and lead nowhere else: it is opened
    /// beneath that folder, where `..` and links may not leave it (`AllowedFolders`); missing folders inside are
    /// created there. The manager opens it beneath the same held folder again at every start of the download. A file
    /// name is sanitised like a server-chosen one (over the socket it must just be one path component).
    func destination(directory: String?, filename: String?, door: Door, index: Int?) throws(APIError)
        -> DownloadManager.Destination
    {
        let requested = directory ?? ""
        for (field, value) in [("directory", requested), ("filename", filename ?? "")] where value.utf8.contains(0) {
            throw .invalidField(field, "contains a NUL character, which no path can hold", index: index)
        }
        let lexical: String
        if requested.isEmpty {
            // Most requests name no folder: the download folder, normalised once at start.
            lexical = normalizedDownloadDirectory
        } else if requested.utf8.first == UInt8(ascii: "/") {
            lexical = PathName.normalized(requested)
        } else if door == .socket, requested.hasPrefix("~") {
            lexical = PathName.absolute(requested)
        } else {
            lexical = PathName.absolute(requested, base: downloadDirectory)
        }
        let folder: String
        // The download folder itself (most requests) needs no file-system call here: the manager opens it.
        if door == .network, lexical == normalizedDownloadDirectory {
            folder = resolvedDownloadDirectory
        } else if door == .network {
            folder = try confined(lexical, requested: requested, index: index)
        } else {
            folder = lexical
        }
        guard let filename else { return .directory(folder) }
        try APIError.checking("filename", index: index) { () throws(DownloadRules.RuleViolation) in
            try DownloadRules.checkFileName(filename)
        }
        // Over the network, a name is made as safe as a server's; the user's own commands write the name they give.
        return .file(PathName.join(folder, door == .network ? FileNameSanitizer.sanitize(filename) : filename))
    }

    /// `path` opened beneath the allowed folder it names (what is missing inside made there), as the path of that
    /// folder plus the rest; 403 when it names none or leads out of its own.
    private func confined(_ path: String, requested: String, index: Int?) throws(APIError) -> String {
        let forbidden = { (why: String) in
            APIError(
                .forbidden, "forbiddenFolder",
                "directory '\(requested)' \(why), outside the folders downloads may go to: "
                    + allowed.paths.joined(separator: ", "),
                index: index, field: "directory")
        }
        do {
            return try allowed.openBeneath(path, creating: true).path
        } catch {
            switch error {
            case .outside: throw forbidden("names \(path)")
            case .leadsOut(let root, _): throw forbidden("leads out of \(root) through a symbolic link or ..")
            case .failed(let failure):
                // The request is well formed; the file system refuses (a name too long, a file in the way).
                throw APIError(
                    .conflict, "destinationNotWritable", "cannot create the folder \(path): \(failure.message)",
                    index: index, field: "directory")
            }
        }
    }
}

extension Components.Schemas.Settings {
    init(_ settings: ManagerSettings, configuration: DaemonConfiguration) {
        self.init(
            maxConcurrentDownloads: settings.maxConcurrentDownloads, limitRate: settings.rateLimit,
            connections: settings.connectionsPerDownload, maxConnectionsPerHost: settings.maxConnectionsPerHost,
            maxDownloadsPerHost: settings.maxDownloadsPerHost, downloadDir: configuration.downloadDirectory,
            allowedDirs: configuration.allowedDirectories, schedule: settings.schedule,
            scheduleInForce: settings.scheduleInForce, sortRules: settings.sortRules)
    }
}
