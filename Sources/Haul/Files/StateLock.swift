import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The lock on a state folder's `serve.lock`: `haul serve` holds it exclusively for as long as it runs; a command
/// that opens the store itself (`haul get` without a daemon) holds it shared. So a command finds a daemon by failing
/// to share the lock, and a daemon never starts behind a command writing the store.
public enum StateLock {
    /// What trying to take the lock gave.
    public enum Outcome: Sendable {
        /// Taken; the descriptor holds it until closed.
        case acquired(Int32)
        /// Someone holds it the other way.
        case held
        /// The lock file cannot be opened.
        case failed(String)
    }

    /// Tries once, without waiting. The state folder is made when missing and checked (`StateFolder`), and the lock
    /// file must be a regular file of this user's.
    public static func acquire(_ state: String, exclusive: Bool) -> Outcome {
        let descriptor: Int32
        do { descriptor = try StateFolder.open(state).openOwnFile("serve.lock") } catch {
            return .failed(error.message)
        }
        guard flock(descriptor, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0 else {
            close(descriptor)
            return .held
        }
        return .acquired(descriptor)
    }
}
