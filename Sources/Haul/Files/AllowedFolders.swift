import Foundation
import HaulCore

/// The folders that downloads added over the daemon's network door may write to, each opened once when the manager
/// starts and held: a confined download's folder is resolved beneath the allowed folder its path names every time
/// it is opened (`HeldFolder.folder(at:)`), not only when it is added, so a link planted later cannot lead a write
/// out of them.
public final class AllowedFolders: Sendable {
    /// One allowed folder, held, with the paths it is known by.
    public struct Root: Sendable {
        /// The folder, open.
        public let folder: HeldFolder
        /// Its path as given (normalised) and with its links resolved: a request may name it either way.
        let names: [String]
    }

    /// The allowed folders, in the order given.
    public let roots: [Root]

    /// Opens each of `paths` (links in them are followed: whoever starts the daemon names them). Throws naming the
    /// first that is not an existing folder.
    public init(_ paths: [String]) throws(DownloadError) {
        var roots: [Root] = []
        for path in paths {
            let given = PathName.absolute(path)
            let real = Self.resolved(given)
            let folder = try HeldFolder.open(real)
            if roots.contains(where: { $0.folder.identity == folder.identity }) { continue }
            roots.append(Root(folder: folder, names: given == real ? [real] : [real, given]))
        }
        self.roots = roots
    }

    /// No allowed folder: nothing is confined (the command line and the library).
    public static let none: AllowedFolders = {
        // No path to open: cannot throw.
        (try? AllowedFolders([])) ?? AllowedFolders(roots: [])
    }()

    private init(roots: [Root]) {
        self.roots = roots
    }

    /// Whether downloads from `origin` are opened beneath these folders: the network door's are
    /// (`DownloadOrigin.isConfined`), where the manager holds allowed folders at all (the daemon always does: its
    /// download folder). A library's manager without any has nothing to confine them to, and opens them as any other.
    public func confine(_ origin: DownloadOrigin) -> Bool {
        origin.isConfined && !roots.isEmpty
    }

    /// Whether the kernel resolves paths beneath a folder itself (`openat2`, Linux 5.6 and later, when no seccomp
    /// filter refuses it); where it does not, the same rules are kept by walking each path one component at a time.
    public static var resolvesInKernel: Bool { FolderWalk.kernelResolvesBeneath }

    /// The allowed folders' paths, links resolved (for messages).
    public var paths: [String] { roots.map(\.folder.path) }

    /// The allowed folder `path` lies in, judged by its text alone (the deepest one when they nest), and the rest of
    /// the path below it; nil when it lies in none. Nothing is resolved: what the rest leads to is the business of
    /// `open`, beneath the folder.
    public func locate(_ path: String) -> (root: Root, relative: String)? {
        let path = PathName.normalized(path)
        var best: (root: Root, relative: String, length: Int)?
        for root in roots {
            for name in root.names {
                guard let relative = Self.relative(path, under: name) else { continue }
                if best == nil || name.utf8.count > best!.length {
                    best = (root, relative, name.utf8.count)
                }
            }
        }
        return best.map { ($0.root, $0.relative) }
    }

    /// Why a confined folder was refused.
    public enum Refusal: Error, Sendable {
        /// The path lies in no allowed folder.
        case outside(path: String)
        /// It leads out of the allowed folder `root` through a symbolic link or `..`.
        case leadsOut(root: String, DownloadError)
        /// The file system refused (a name too long, a file in the way).
        case failed(DownloadError)

        /// The refusal as the engine reports it.
        public var error: DownloadError {
            switch self {
            case .outside(let path):
                DownloadError(.untrustedFile, "\(path) is outside the folders downloads may go to")
            case .leadsOut(_, let error), .failed(let error): error
            }
        }
    }

    /// Opens the folder `path` beneath the allowed folder it lies in; with `creating`, what is missing inside is
    /// made. This is the one rule of a confined folder: every edge that opens one calls it and words its refusal.
    public func openBeneath(_ path: String, creating: Bool = false) throws(Refusal) -> HeldFolder {
        guard let (root, relative) = locate(path) else { throw .outside(path: path) }
        do {
            return try root.folder.folder(at: relative, creating: creating)
        } catch  where error.code == .untrustedFile {
            throw .leadsOut(root: root.folder.path, error)
        } catch {
            throw .failed(error)
        }
    }

    /// `openBeneath`, its refusal as a `DownloadError` naming the allowed folders.
    public func open(_ path: String, creating: Bool = false) throws(DownloadError) -> HeldFolder {
        do { return try openBeneath(path, creating: creating) } catch {
            guard case .outside = error else { throw error.error }
            throw DownloadError(
                .untrustedFile,
                "\(path) is outside the folders downloads may go to: "
                    + (roots.isEmpty ? "none was given" : paths.joined(separator: ", ")))
        }
    }

    /// `path` relative to `folder` when it is the folder or lies inside it, by text; nil otherwise.
    static func relative(_ path: String, under folder: String) -> String? {
        if path == folder { return "" }
        if folder == "/" { return path.hasPrefix("/") ? String(path.dropFirst()) : nil }
        guard path.hasPrefix(folder), path.utf8.dropFirst(folder.utf8.count).first == UInt8(ascii: "/") else {
            return nil
        }
        return String(decoding: path.utf8.dropFirst(folder.utf8.count + 1), as: UTF8.self)
    }

    /// `path` with every link resolved (as it is, normalised, when it cannot be).
    public static func resolved(_ path: String) -> String {
        guard let real = realpath(path, nil) else { return PathName.normalized(path) }
        defer { free(real) }
        return String(cString: real)
    }
}
