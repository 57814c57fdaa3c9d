import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Standard output and standard error, as a command writes its lines. A reader that went away (`haul get --json |
/// head -1`, a terminal that closed) loses the text and never the command: Foundation's `FileHandle.write(_:)` traps
/// on the `EPIPE` such a write gets, which killed a command mid-download. SIGPIPE is ignored (`Main`), so the write
/// fails instead of the process.
enum Console {
    static func output(_ data: Data) { write(data, to: STDOUT_FILENO) }

    static func error(_ data: Data) { write(data, to: STDERR_FILENO) }

    private static func write(_ data: Data, to descriptor: Int32) {
        data.withUnsafeBytes { buffer in
            guard var next = buffer.baseAddress else { return }
            var left = buffer.count
            while left > 0 {
                let written = Glibc.write(descriptor, next, left)
                if written < 0 {
                    if errno == EINTR { continue }
                    return
                }
                next += written
                left -= written
            }
        }
    }
}
