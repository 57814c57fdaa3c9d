import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A PostgreSQL 15 server of the test's own, from Debian's packages: a cluster made with `initdb` in a temporary
/// folder, started with `pg_ctl` on a free port of 127.0.0.1 and a socket folder of its own, asking for a password
/// (SCRAM) like a real deployment, and deleted by `stop()`. PostgreSQL refuses to run as root, so every program of it
/// runs as the `postgres` user (`runuser`). `fsync` is off: the tests prove what Haul does, not the database's disk.
public final class PostgresServer: Sendable {
    public static let binaries = "/usr/lib/postgresql/15/bin"
    public let root: String
    public let port: Int
    public let user = "haul"
    /// With characters a URL must percent-encode, so a URL that forgets to decode it fails.
    public let password: String

    public enum Failure: Error, CustomStringConvertible {
        case missing(String)
        case failed(String, status: Int32, output: String)

        public var description: String {
            switch self {
            case .missing(let what): "\(what) is missing (.ci/run installs postgresql)"
            case .failed(let command, let status, let output): "\(command) exited with \(status): \(output)"
            }
        }
    }

    /// Makes and starts a cluster.
    public init() throws {
        guard FileManager.default.isExecutableFile(atPath: Self.binaries + "/initdb") else {
            throw Failure.missing("PostgreSQL 15 (\(Self.binaries)/initdb)")
        }
        var template = Array("/tmp/haul-postgres.XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw Failure.missing("a temporary folder") }
        root = String(cString: made)
        port = freePort()
        password = "s3cret:@/%-" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        try FileManager.default.createDirectory(atPath: root + "/socket", withIntermediateDirectories: true)
        try password.write(toFile: root + "/password", atomically: false, encoding: .utf8)
        try Self.run("/bin/chown", ["-R", "postgres:postgres", root])
        try Self.run(
            Self.binaries + "/initdb",
            [
                "-D", root + "/data", "-U", user, "--auth=scram-sha-256", "--pwfile=" + root + "/password",
                "--no-sync", "--no-locale", "-E", "UTF8",
            ], asPostgres: true)
        try start()
    }

    /// Starts the server (again, after `stopServer()`), and returns once it accepts connections.
    public func start() throws {
        try Self.run(
            Self.binaries + "/pg_ctl",
            [
                "-D", root + "/data", "-l", root + "/server.log", "-w", "-t", "60", "-o",
                "-p \(port) -k \(root)/socket -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
                "start",
            ], asPostgres: true)
    }

    /// Stops the server at once (as a crash would: `-m immediate`), keeping its data.
    public func stopServer() throws {
        try Self.run(
            Self.binaries + "/pg_ctl", ["-D", root + "/data", "-m", "immediate", "-w", "stop"], asPostgres: true)
    }

    /// Stops the server and deletes its cluster.
    public func stop() {
        try? stopServer()
        try? FileManager.default.removeItem(atPath: root)
    }

    /// Makes an empty database and returns its name.
    @discardableResult
    public func createDatabase(_ name: String = "haul_" + String(UInt32.random(in: 0...UInt32.max), radix: 36)) throws
        -> String
    {
        try Self.run(
            Self.binaries + "/createdb", ["-h", "127.0.0.1", "-p", "\(port)", "-U", user, name], asPostgres: true,
            environment: ["PGPASSWORD": password])
        return name
    }

    /// Runs `sql` in `database` with `psql` (as a test's hand on the rows: a lease stolen, a row read) and returns
    /// what it printed, unaligned and without headers.
    @discardableResult
    public func execute(_ sql: String, database: String) throws -> String {
        try Self.run(
            Self.binaries + "/psql",
            [
                "-h", "127.0.0.1", "-p", "\(port)", "-U", user, "-d", database, "-X", "-A", "-t", "-v",
                "ON_ERROR_STOP=1", "-c", sql,
            ],
            asPostgres: true, environment: ["PGPASSWORD": password]
        ).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The store URL of `database`, its password percent-encoded.
    public func url(database: String, password: String? = nil) -> String {
        let secret = (password ?? self.password).addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        return "postgres://\(user):\(secret)@127.0.0.1:\(port)/\(database)?sslmode=disable"
    }

    /// What the server logged.
    public var log: String { (try? String(contentsOfFile: root + "/server.log", encoding: .utf8)) ?? "" }

    /// Runs a program (as the `postgres` user with `asPostgres`) and waits for it; throws with its output when it
    /// fails. Spawned directly, not with Foundation's `Process`: `pg_ctl` leaves the server running with what it
    /// inherited, and `Process` waits for those to close before it sees its child end.
    @discardableResult
    static func run(
        _ executable: String, _ arguments: [String], asPostgres: Bool = false, environment: [String: String] = [:]
    ) throws -> String {
        // From a folder the postgres user may be in, out of the test's way, and with nothing of the test process
        // but the three standard streams: a server started here must not keep another test's pipe open.
        let script = """
            cd /tmp || exit 1
            for fd in /proc/$$/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
            exec "$@"
            """
        let argv =
            ["/bin/bash", "-c", script, "bash"]
            + (asPostgres ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : []) + [executable] + arguments
        var template = Array("/tmp/haul-postgres-output.XXXXXX".utf8CString)
        let output = mkstemp(&template)
        guard output >= 0 else { throw Failure.missing("a temporary file") }
        let outputPath = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        close(output)
        defer { unlink(outputPath) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_APPEND, 0)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let variables = ProcessInfo.processInfo.environment.merging(environment) { $1 }.map { "\($0)=\($1)" }
        var cArguments = argv.map { strdup($0) } + [nil]
        var cEnvironment = variables.map { strdup($0) } + [nil]
        defer {
            for pointer in cArguments { free(pointer) }
            for pointer in cEnvironment { free(pointer) }
        }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, argv[0], &actions, nil, &cArguments, &cEnvironment)
        guard spawned == 0 else {
            throw Failure.failed(argv.joined(separator: " "), status: spawned, output: "cannot start")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let exited = (status & 0x7f) == 0
        let code = exited ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        guard code == 0 else {
            throw Failure.failed(
                argv.joined(separator: " "), status: code,
                output: (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "")
        }
        return (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
    }
}
