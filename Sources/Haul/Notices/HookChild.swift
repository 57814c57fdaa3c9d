import CHaulSystem
import Foundation
import HaulCore
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// A hook's process, started with posix_spawn: in a process group of its own (a timeout stops the hook's children
/// too), with every signal at its default and none blocked (a daemon ignores or blocks SIGTERM and SIGINT to handle
/// them itself, and a child would inherit that), and its standard input and output on pipes whose other ends are
/// close-on-exec (a hook started meanwhile does not inherit them), and no other descriptor of this process.
final class HookChild: Sendable {
    let pid: pid_t
    private let input: Int32
    private let output: Int32

    init(program: String, arguments: [String], environment: [String: String]) throws(DownloadError) {
        var toChild: [Int32] = [-1, -1]
        var fromChild: [Int32] = [-1, -1]
        guard haul_pipe_cloexec(&toChild) == 0 else { throw Self.failure("pipe2") }
        guard haul_pipe_cloexec(&fromChild) == 0 else {
            close(toChild[0])
            close(toChild[1])
            throw Self.failure("pipe2")
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, toChild[0], 0)
        posix_spawn_file_actions_adddup2(&actions, fromChild[1], 1)
        posix_spawn_file_actions_adddup2(&actions, fromChild[1], 2)
        // Nothing else of this process's: a descriptor it inherited without close-on-exec (the socket by which its
        // own parent watches it, the state folder's lock) would otherwise outlive it in a hook that outlives it.
        haul_spawn_close_from(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for number in 1..<Int32(32) where number != SIGKILL && number != SIGSTOP { sigaddset(&defaults, number) }
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(
            &attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let error = posix_spawn(&pid, program, &actions, &attributes, argv, envp)
        close(toChild[0])
        close(fromChild[1])
        guard error == 0 else {
            close(toChild[1])
            close(fromChild[0])
            throw DownloadError(.invalidArgument, String(cString: strerror(error)))
        }
        self.pid = pid
        input = toChild[1]
        output = fromChild[0]
    }

    private static func failure(_ call: String) -> DownloadError {
        DownloadError(.fileSystem, "\(call): \(String(cString: strerror(errno)))")
    }

    /// Writes `body` to the hook's input and closes it; a hook that exits without reading makes the write fail
    /// (EPIPE): not an error of the hook.
    func write(_ body: [UInt8]) {
        var written = 0
        body.withUnsafeBytes { buffer in
            while written < buffer.count {
                let count = Glibc.write(input, buffer.baseAddress! + written, buffer.count - written)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                written += count
            }
        }
        close(input)
    }

    /// Logs the hook's output, a line at a time, until it closes.
    func log(to logger: Logger, as name: String) { _ = lines(loggingTo: logger, as: name) }

    /// Logs the hook's output, a line at a time, until it closes; returns the lines.
    func lines(loggingTo logger: Logger, as name: String) -> [String] {
        var lines: [String] = []
        var pending: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(output, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            pending.append(contentsOf: chunk[..<count])
            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                lines.append(String(decoding: pending[..<newline], as: UTF8.self))
                logger.notice("\(name): \(lines[lines.count - 1])")
                pending.removeSubrange(...newline)
            }
        }
        if !pending.isEmpty {
            lines.append(String(decoding: pending, as: UTF8.self))
            logger.notice("\(name): \(lines[lines.count - 1])")
        }
        close(output)
        return lines
    }

    /// Sends `number` to the hook's process group.
    func signal(_ number: Int32) { kill(-pid, number) }

    /// Waits for the hook to exit; its status, or 128 plus the signal that ended it.
    func waitForExit() -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            if errno != EINTR { return -1 }
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }
}
