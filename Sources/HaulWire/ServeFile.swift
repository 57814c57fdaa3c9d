import Foundation
import Haul

/// What `haul serve` writes to `STATE_DIR/serve.json` while it runs, and what other commands read to reach it.
public struct ServeFile: Codable, Sendable, Equatable {
    /// The TCP listener's URL.
    public var url: String
    /// The token of the API.
    public var token: String
    /// The daemon's process id.
    public var pid: Int32
    /// The Unix socket of the local door.
    public var socket: String?

    /// The file as `haul serve` writes it.
    public init(url: String, token: String, pid: Int32, socket: String?) {
        self.url = url
        self.token = token
        self.pid = pid
        self.socket = socket
    }

    /// The file's path in `stateDirectory`.
    public static func path(in stateDirectory: String) -> String {
        (stateDirectory as NSString).appendingPathComponent("serve.json")
    }

    /// The socket's path in `stateDirectory`.
    public static func socketPath(in stateDirectory: String) -> String {
        (stateDirectory as NSString).appendingPathComponent("haul.sock")
    }

    /// Reads the file of `stateDirectory`, nil when there is none or it cannot be read. Only a regular file of
    /// this user's is read, never through a link: it tells commands where to send the token.
    public static func read(in stateDirectory: String) -> ServeFile? {
        guard let folder = try? StateFolder.open(stateDirectory), let data = try? folder.read("serve.json") ?? nil
        else { return nil }
        return try? JSONDecoder().decode(ServeFile.self, from: data)
    }
}
