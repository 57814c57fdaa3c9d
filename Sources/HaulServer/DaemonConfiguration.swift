import Foundation
import Haul
import HaulCore

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
    let allowedDirectories: [String]
    /// The download folder and the allowed ones with symbolic links resolved, once: they are set at start.
    let roots: [String]
    /// The download folder resolved (a request naming no folder needs no file-system call).
    let resolvedDownloadDirectory: String
    /// The download folder as requests name it, normalised.
    let normalizedDownloadDirectory: String

    init(_ configuration: DaemonConfiguration) {
        downloadDirectory = configuration.downloadDirectory
        allowedDirectories = configuration.allowedDirectories
        roots = ([configuration.downloadDirectory] + configuration.allowedDirectories).map(Self.resolved)
        resolvedDownloadDirectory = Self.resolved(configuration.downloadDirectory)
        normalizedDownloadDirectory = PathName.normalized(configuration.downloadDirectory)
    }

    /// The destination of a request. Over the network a relative folder is under the download folder; an absolute
    /// one must lie inside the download folder or an allowed one, after resolving `..` and symbolic links; missing
    /// folders inside are created. A file name is sanitised like a server-chosen one (over the socket it must just
    /// be one path component).
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
        } else if requested.hasPrefix("/") {
            lexical = PathName.normalized(requested)
        } else if door == .socket, requested.hasPrefix("~") {
            lexical = PathName.absolute(requested)
        } else {
            lexical = PathName.absolute(requested, base: downloadDirectory)
        }
        let folder: String
        // The download folder itself (most requests) needs no file-system call: the manager checks it is writable.
        if door == .network, lexical == normalizedDownloadDirectory {
            folder = resolvedDownloadDirectory
        } else if door == .network {
            folder = try confined(lexical, requested: requested, index: index)
        } else {
            folder = lexical
        }
        guard let filename else { return .directory(folder) }
        let name: String
        if door == .network {
            name = FileNameSanitizer.sanitize(filename)
        } else {
            guard !filename.isEmpty, !filename.contains("/"), filename != ".", filename != ".." else {
                throw .invalidField("filename", "'\(filename)' is not a single file name", index: index)
            }
            name = filename
        }
        return .file(PathName.join(folder, name))
    }

    /// `path` with every symbolic link resolved, checked to lie inside an allowed folder; creates what is missing.
    private func confined(_ path: String, requested: String, index: Int?) throws(APIError) -> String {
        // The deepest folder that exists decides where the path really leads; what is missing below it cannot be a
        // link.
        var existing = path
        var missing: [String] = []
        while !FileManager.default.fileExists(atPath: existing), existing != "/" {
            missing.insert((existing as NSString).lastPathComponent, at: 0)
            existing = (existing as NSString).deletingLastPathComponent
        }
        var real = Self.resolved(existing)
        for component in missing { real = (real as NSString).appendingPathComponent(component) }
        guard roots.contains(where: { real == $0 || real.hasPrefix($0 == "/" ? "/" : $0 + "/") }) else {
            throw APIError(
                .forbidden, "forbiddenFolder",
                "directory '\(requested)' leads to \(real), outside the folders downloads may go to: "
                    + roots.joined(separator: ", "),
                index: index, field: "directory")
        }
        if !missing.isEmpty {
            do { try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: true) } catch {
                // The request is well formed; the file system refuses (a name too long, a file in the way).
                throw APIError(
                    .conflict, "destinationNotWritable", "cannot create the folder \(real): \(error)",
                    index: index, field: "directory")
            }
        }
        return real
    }

    /// The path with symbolic links resolved (as it is when it cannot be).
    static func resolved(_ path: String) -> String {
        guard let real = realpath(path, nil) else { return PathName.normalized(path) }
        defer { free(real) }
        return String(cString: real)
    }
}
