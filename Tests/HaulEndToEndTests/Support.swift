import Dispatch
import Foundation
import Haul
import HaulTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The `haul` binary built beside the test bundle.
let haulBinary: String = {
    let testBundle = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    var directory = testBundle
    while directory.path != "/" {
        let candidate = directory.appendingPathComponent("haul").path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        directory = directory.deletingLastPathComponent()
    }
    return testBundle.appendingPathComponent("haul").path
}()

/// A temporary folder with a state directory, removed at the end.
struct Workspace {
    let root: String
    var files: String { root + "/files" }
    var state: String { root + "/state" }

    init() throws {
        root = NSTemporaryDirectory() + "haul-e2e-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: root + "/files", withIntermediateDirectories: true)
    }

    func path(_ name: String) -> String { files + "/" + name }

    func contents(_ name: String) -> [UInt8]? { FileManager.default.contents(atPath: path(name)).map { [UInt8]($0) } }

    func holds(_ name: String, _ bytes: [UInt8]) -> Bool { contents(name) == bytes }

    func size(_ name: String) -> Int64? {
        (try? FileManager.default.attributesOfItem(atPath: path(name))[.size] as? NSNumber)?.int64Value
    }

    func remove() { try? FileManager.default.removeItem(atPath: root) }
}

/// A running `haul` process. Its output goes to files, not pipes: a pipe's write end can be inherited by another
/// child that a parallel test spawns at the same moment, and reading to end-of-file would then wait for that child.
final class HaulProcess: @unchecked Sendable {
    let process = Process()
    private let outPath: String
    let errPath: String

    /// With a `launcher` (a program and its arguments), that program runs and is handed the `haul` binary and its
    /// arguments to run in its place (a seccomp filter installed first, say). It runs in `folder`, by default the
    /// workspace's files folder.
    init(
        _ arguments: [String], in workspace: Workspace, environment: [String: String] = [:], launcher: [String] = [],
        folder: String? = nil
    ) throws {
        let stamp = UUID().uuidString
        outPath = workspace.root + "/haul-\(stamp).out"
        errPath = workspace.root + "/haul-\(stamp).err"
        _ = FileManager.default.createFile(atPath: outPath, contents: nil)
        _ = FileManager.default.createFile(atPath: errPath, contents: nil)
        let arguments =
            arguments.first == "get" && !arguments.contains("--state-dir")
            ? arguments + ["--state-dir", workspace.state] : arguments
        if let program = launcher.first {
            process.executableURL = URL(fileURLWithPath: program)
            process.arguments = Array(launcher.dropFirst()) + [haulBinary] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: haulBinary)
            process.arguments = arguments
        }
        process.currentDirectoryURL = URL(fileURLWithPath: folder ?? workspace.files)
        process.standardOutput = FileHandle(forWritingAtPath: outPath)
        process.standardError = FileHandle(forWritingAtPath: errPath)
        process.standardInput = FileHandle.nullDevice
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        try process.run()
    }

    func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    /// Sends signal `number` once `condition` holds (checked every 5 ms for at most `seconds`; sent then anyway),
    /// `delay` microseconds later, from the thread that checks; returns whether the condition held. A kill meant for
    /// a moment of the download is sent at that moment: a busy cooperative pool could keep the test's task from
    /// running for seconds, long enough for the download to end before a kill sent from it.
    func signal(
        _ number: Int32, delay: UInt32 = 0, seconds: Double = 30, when condition: @escaping @Sendable () -> Bool
    ) async -> Bool {
        await onOwnThread {
            let held = poll(seconds: seconds, condition)
            if delay > 0 { usleep(delay) }
            self.signal(number)
            return held
        }
    }

    /// Waits for the exit (on a dispatch thread: the cooperative pool has only as many threads as cores) and returns
    /// the status and the output.
    func finish() async -> (status: Int32, stdout: String, stderr: String) {
        await onOwnThread { self.process.waitUntilExit() }
        let stdout = FileManager.default.contents(atPath: outPath) ?? Data()
        let stderr = FileManager.default.contents(atPath: errPath) ?? Data()
        return (
            process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self)
        )
    }

    /// Whether what it wrote to standard error so far holds `text`.
    func hasSaid(_ text: String) -> Bool {
        String(decoding: FileManager.default.contents(atPath: errPath) ?? Data(), as: UTF8.self).contains(text)
    }

    /// Waits up to `seconds` for it to end by itself, interrupts it (SIGINT) when it has not, and returns whether it
    /// had, with the status and the output: a command that should end and hangs fails its test instead of hanging it.
    func finish(within seconds: Double) async -> (ended: Bool, status: Int32, stdout: String, stderr: String) {
        let ended = await waitUntil(seconds: seconds) { !self.process.isRunning }
        if !ended { signal(SIGINT) }
        let (status, stdout, stderr) = await finish()
        return (ended, status, stdout, stderr)
    }

    static func run(
        _ arguments: [String], in workspace: Workspace, environment: [String: String] = [:], folder: String? = nil
    ) async throws
        -> (status: Int32, stdout: String, stderr: String)
    {
        try await HaulProcess(arguments, in: workspace, environment: environment, folder: folder).finish()
    }
}

/// Waits until `condition` holds, checking every 5 ms, for at most `seconds`; returns whether it held. Polls on a
/// thread of its own, so a busy pool cannot make it miss the moment it waits for.
func waitUntil(seconds: Double = 30, _ condition: @escaping @Sendable () -> Bool) async -> Bool {
    await onOwnThread { poll(seconds: seconds, condition) }
}

/// Checks `condition` every 5 ms on the calling thread, for at most `seconds`; returns whether it held.
func poll(seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        usleep(5000)
    }
    return condition()
}

/// Finds an executable on PATH or in the usual system folders.
func executable(_ name: String) -> String? {
    let path = (ProcessInfo.processInfo.environment["PATH"] ?? "") + ":/usr/sbin:/sbin:/usr/bin:/bin"
    return path.split(separator: ":").map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
}

/// Runs openssl with `arguments` in `folder`; fails the test when it fails.
func openssl(_ arguments: [String], in folder: String) async throws {
    let tool = try #require(executable("openssl"), "openssl is installed by .ci/run")
    let process = Process()
    process.executableURL = URL(fileURLWithPath: tool)
    process.arguments = arguments
    process.currentDirectoryURL = URL(fileURLWithPath: folder)
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    await onOwnThread { process.waitUntilExit() }
    #expect(process.terminationStatus == 0, "openssl \(arguments.joined(separator: " "))")
}

/// A CA of the test's own (`ca.pem`) and a server certificate it signed for `names` (`server.pem`, `server.key`).
func makeCertificates(in folder: String, names: String = "DNS:localhost,IP:127.0.0.1", days: Int = 2) async throws {
    try await openssl(
        [
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=Haul Test CA",
            "-keyout", "ca.key", "-out", "ca.pem",
        ], in: folder)
    try await openssl(
        [
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key", "-out",
            "server.csr",
        ],
        in: folder)
    try "subjectAltName=\(names)\n".write(toFile: folder + "/ext.cnf", atomically: true, encoding: .utf8)
    try await openssl(
        [
            "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days",
            "\(days)", "-extfile", "ext.cnf", "-out", "server.pem",
        ], in: folder)
}

/// Starts nginx on `port` (as the test's user, in the foreground, one worker, its files under the workspace) with
/// `http` as the body of its `http` block.
func runNginx(in workspace: Workspace, port: Int, http: String) throws -> ServerProcess {
    let nginx = try #require(executable("nginx"), "nginx must be installed (.ci/run installs it)")
    let root = workspace.root
    let configuration = """
        daemon off;
        master_process off;
        worker_processes 1;
        pid \(root)/nginx.pid;
        error_log \(root)/error.log;
        events { worker_connections 64; }
        http {
            client_body_temp_path \(root)/tmp-body;
            proxy_temp_path \(root)/tmp-proxy;
            fastcgi_temp_path \(root)/tmp-fastcgi;
            uwsgi_temp_path \(root)/tmp-uwsgi;
            scgi_temp_path \(root)/tmp-scgi;
        \(http)
        }
        """
    try configuration.write(toFile: root + "/nginx.conf", atomically: true, encoding: .utf8)
    return try ServerProcess(
        executable: nginx, arguments: ["-c", root + "/nginx.conf", "-p", root], port: port, directory: root)
}
