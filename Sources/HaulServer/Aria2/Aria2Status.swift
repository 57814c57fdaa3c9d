import Crypto
import Foundation
import Haul
import HaulCore
import HaulWire

/// How a Haul download looks to an aria2 client: its gid, its `status`, the struct `aria2.tellStatus` answers, the
/// `errorCode` numbers, and which notification a change of state sends. Pure functions of a snapshot, table-tested.
enum Aria2Status {
    /// aria2's piece length, which clients use to draw the bitfield.
    static let pieceLength: Int64 = 1 << 20

    /// The gid of a download: its brief id, 16 hex digits of its id (`DownloadID.brief`).
    static func gid(of id: DownloadID) -> String { id.brief }

    /// Whether `text` has the shape of a gid (aria2 also takes a unique prefix; Haul takes the whole gid only).
    static func isGID(_ text: String) -> Bool {
        text.utf8.count == 16 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// aria2's name for a state. A download waiting for the network is `active` (aria2 shows a download between
    /// retries as active too); a queued one is `waiting`; a cancelled one is `removed`.
    static func name(of state: DownloadState) -> String {
        switch state {
        case .running, .waitingForNetwork: "active"
        case .queued: "waiting"
        case .paused: "paused"
        case .completed: "complete"
        case .failed: "error"
        case .cancelled: "removed"
        }
    }

    /// The notification aria2 sends when a download's status goes from `old` to `new`, nil for none (a download
    /// that is queued again sends nothing, as in aria2).
    static func notification(from old: DownloadState?, to new: DownloadState) -> String? {
        if let old, name(of: old) == name(of: new) { return nil }
        switch name(of: new) {
        case "active": return "aria2.onDownloadStart"
        case "paused": return "aria2.onDownloadPause"
        case "removed": return "aria2.onDownloadStop"
        case "complete": return "aria2.onDownloadComplete"
        case "error": return "aria2.onDownloadError"
        default: return nil
        }
    }

    /// aria2's exit-status number for an error (its manual's "EXIT STATUS"); 1, "unknown error", where none fits.
    static func errorCode(of error: DownloadError) -> Int {
        if let status = error.status {
            switch status {
            case 401, 407: return 24  // HTTP authorization failed
            case 404, 410, 550: return 3  // resource not found
            case 429, 503: return 29  // server overloaded
            default: return 22  // unexpected HTTP response header
            }
        }
        switch error.code {
        case .idleTimeout: return 2
        case .connectionFailed, .connectionLost, .retriesExhausted: return 6
        case .diskFull: return 9
        case .locked: return 11
        case .destinationExists: return 13
        // "could not open existing file": what is at the name is not Haul's to write through.
        case .untrustedFile: return 15
        case .destinationNotWritable: return 16
        case .fileSystem: return 17
        case .invalidResponse, .contentEncoding, .bodyTooShort, .bodyTooLong: return 22
        case .tooManyRedirects: return 23
        case .invalidURL, .invalidArgument: return 28
        case .checksumMismatch: return 32
        default: return 1
        }
    }

    /// The folder of a download, as `dir`.
    static func directory(of snapshot: DownloadSnapshot) -> String {
        if let path = snapshot.path { return PathName.folder(of: path) }
        return snapshot.directory ?? ""
    }

    /// The one file of a download, as `aria2.getFiles` lists it.
    static func file(of snapshot: DownloadSnapshot) -> JSONValue {
        [
            "index": "1", "path": .string(snapshot.path ?? ""), "length": .string(String(snapshot.totalBytes ?? 0)),
            "completedLength": .string(String(snapshot.receivedBytes)), "selected": "true", "uris": uris(of: snapshot),
        ]
    }

    /// The URIs of a download (its URL, then its mirrors), as `aria2.getUris` lists them: `used` once a request
    /// went out to it, `waiting` before.
    static func uris(of snapshot: DownloadSnapshot) -> JSONValue {
        let started = snapshot.state != .queued && snapshot.state != .paused || snapshot.receivedBytes > 0
        let urls = [snapshot.url] + snapshot.options.mirrors
        return .array(
            urls.enumerated().map { index, url in
                let mirrors = snapshot.mirrors ?? []
                let state = index < mirrors.count ? mirrors[index].state : nil
                let used = index == 0 ? started : state != nil && state != .waiting
                return ["uri": .string(url), "status": .string(used ? "used" : "waiting")]
            })
    }

    /// The struct of `aria2.tellStatus`: every value a string, as aria2 sends them; `keys` keeps only those named
    /// (all when empty).
    static func status(of snapshot: DownloadSnapshot, keys: [String] = []) -> JSONValue {
        let total = snapshot.totalBytes ?? 0
        let running = snapshot.state == .running
        var fields: [String: JSONValue] = [
            "gid": .string(gid(of: snapshot.id)),
            "status": .string(name(of: snapshot.state)),
            "totalLength": .string(String(total)),
            "completedLength": .string(String(snapshot.receivedBytes)),
            "uploadLength": "0",
            "downloadSpeed": .string(String(running ? Int64(snapshot.bytesPerSecond.rounded()) : 0)),
            "uploadSpeed": "0",
            "connections": .string(String(running ? snapshot.connections : 0)),
            "pieceLength": .string(String(pieceLength)),
            "numPieces": .string(String((total + pieceLength - 1) / pieceLength)),
            "dir": .string(directory(of: snapshot)),
            "files": [file(of: snapshot)],
        ]
        if let bitfield = bitfield(of: snapshot) { fields["bitfield"] = .string(bitfield) }
        switch snapshot.state {
        case .completed:
            fields["errorCode"] = "0"
            fields["errorMessage"] = ""
        case .failed:
            let error = snapshot.error ?? DownloadError(.store, "failed")
            fields["errorCode"] = .string(String(errorCode(of: error)))
            fields["errorMessage"] = .string(error.message)
        case .cancelled:
            // aria2's code for a download removed by the user.
            fields["errorCode"] = "31"
            fields["errorMessage"] = "Removed"
        default:
            break
        }
        guard !keys.isEmpty else { return .object(fields) }
        return .object(fields.filter { keys.contains($0.key) })
    }

    /// The pieces held, as aria2's hex bitfield (high bit first), when the length is known: a piece counts once
    /// every byte of it is held.
    static func bitfield(of snapshot: DownloadSnapshot) -> String? {
        guard let total = snapshot.totalBytes, total > 0 else { return nil }
        // Rounded up without adding first: HTTP lengths stop at 2^60, but the snapshot's type allows Int64.max.
        let count = Int(total / pieceLength + (total % pieceLength == 0 ? 0 : 1))
        // 2 MiB of hex for a 4 TiB file at most; more than a client would draw.
        guard count <= 1 << 22 else { return nil }
        let held: [(Int64, Int64)] =
            snapshot.segments.map { $0.map { ($0.start, $0.offset) } } ?? [(Int64(0), snapshot.receivedBytes)]
        var bits = [UInt8](repeating: 0, count: (count + 7) / 8)
        for (start, end) in held where end > start {
            var piece = (start + pieceLength - 1) / pieceLength
            while piece < Int64(count) {
                let pieceEnd = min((piece + 1) * pieceLength, total)
                guard pieceEnd <= end else { break }
                bits[Int(piece / 8)] |= 0x80 >> UInt8(piece % 8)
                piece += 1
            }
        }
        return bits.map { String(format: "%02x", $0) }.joined()
    }

    /// The download's options as `aria2.getOption` answers them (every value a string).
    static func options(of snapshot: DownloadSnapshot) -> JSONValue {
        var options: [String: JSONValue] = [
            "dir": .string(directory(of: snapshot)),
            "split": .string(String(snapshot.options.maxConnectionsPerDownload)),
            "max-connection-per-server": .string(String(snapshot.options.maxConnectionsPerDownload)),
            "min-split-size": .string(String(snapshot.options.minimumSplitSize)),
            "max-download-limit": .string(String(snapshot.rateLimit ?? 0)),
            "allow-overwrite": .string(String(snapshot.options.overwrite)),
            "timeout": .string(String(Int(snapshot.options.idleTimeoutSeconds))),
            "max-tries": .string(String(snapshot.options.maximumAttemptsWithoutProgress)),
            "check-certificate": .string(String(!snapshot.options.tls.insecure)),
        ]
        if let path = snapshot.path { options["out"] = .string((path as NSString).lastPathComponent) }
        if let checksum = snapshot.options.checksum {
            options["checksum"] = .string("\(Aria2Options.aria2Name(of: checksum.algorithm))=\(checksum.hex)")
        }
        if let agent = snapshot.options.userAgent { options["user-agent"] = .string(agent) }
        return .object(options)
    }
}
