#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A file's device and inode: what the machine knows it by, whatever it is called now. Haul records the identity of
/// each download's folder and part file, and trusts what it finds on disk later only when it is the same file.
public struct FileIdentity: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The device the file lives on (`st_dev`).
    public var device: UInt64
    /// Its inode on that device (`st_ino`).
    public var inode: UInt64

    /// An identity from its two numbers.
    public init(device: UInt64, inode: UInt64) {
        self.device = device
        self.inode = inode
    }

    init(_ info: stat) {
        self.init(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    public var description: String { "device \(device), inode \(inode)" }

    /// The two numbers as the store keeps them (SQLite integers are signed).
    var stored: (device: Int64, inode: Int64) { (Int64(bitPattern: device), Int64(bitPattern: inode)) }

    /// The identity the store kept as `device` and `inode`, nil when it kept none.
    init?(stored device: Int64?, _ inode: Int64?) {
        guard let device, let inode else { return nil }
        self.init(device: UInt64(bitPattern: device), inode: UInt64(bitPattern: inode))
    }
}

/// What one name in a folder is, read without following a link (`fstatat` with `AT_SYMLINK_NOFOLLOW`).
struct FolderEntry: Sendable {
    /// The kinds of file a name can hold.
    enum Kind: Sendable {
        case regular, folder, symbolicLink, fifo, socket, device, other
    }

    let kind: Kind
    let identity: FileIdentity
    /// Hard links to the file (`st_nlink`).
    let links: Int
    /// The owner's user id.
    let owner: UInt32
    let size: Int64
    /// The permission bits (`st_mode & 0o7777`).
    let permissions: UInt32

    init(_ info: stat) {
        let type = UInt32(info.st_mode) & UInt32(S_IFMT)
        switch type {
        case UInt32(S_IFREG): kind = .regular
        case UInt32(S_IFDIR): kind = .folder
        case UInt32(S_IFLNK): kind = .symbolicLink
        case UInt32(S_IFIFO): kind = .fifo
        case UInt32(S_IFSOCK): kind = .socket
        case UInt32(S_IFCHR), UInt32(S_IFBLK): kind = .device
        default: kind = .other
        }
        identity = FileIdentity(info)
        links = Int(info.st_nlink)
        owner = UInt32(info.st_uid)
        size = Int64(info.st_size)
        permissions = UInt32(info.st_mode) & 0o7777
    }

    /// The kind in words, for messages ("a symbolic link").
    var kindInWords: String {
        switch kind {
        case .regular: "a regular file"
        case .folder: "a folder"
        case .symbolicLink: "a symbolic link"
        case .fifo: "a FIFO"
        case .socket: "a socket"
        case .device: "a device node"
        case .other: "not a regular file"
        }
    }

    /// Why a file Haul is about to write must not be trusted with its bytes, nil when it may: anything but a regular
    /// file is refused (a link would send the writes elsewhere, a FIFO or a device would block or do something else
    /// than store them), and so is a file with other hard links (the writes would change the file those share). With
    /// `owner`, it must also belong to that user.
    func distrust(owner expected: UInt32?) -> String? {
        if kind != .regular { return "is \(kindInWords)" }
        if links != 1 { return "has \(links) hard links (another name shares it)" }
        if let expected, owner != expected { return "belongs to another user (uid \(owner))" }
        return nil
    }
}
