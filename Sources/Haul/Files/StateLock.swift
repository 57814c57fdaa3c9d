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

    /// Joins the commands that run downloads on the state folder's store themselves (`haul get` and `haul retry`
    /// without a daemon), through `run.lock`, and says whether this one is alone. Alone (the lock taken
    /// exclusively), it may queue again the downloads the store holds as running: no live process runs them. With
    /// others, those may be theirs, and stay as they are. An alone command calls `share(_:)` once its manager has
    /// done that, so that the next command sees it; until then a newcomer waits here. Nil when the lock file cannot
    /// be opened (then every command counts as alone, as before there was this lock). The descriptor holds the lock
    /// until the process ends.
    public static func joinRunners(_ state: String) -> (descriptor: Int32, isAlone: Bool)? {
        guard let descriptor = try? StateFolder.open(state).openOwnFile("run.lock") else { return nil }
        if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return (descriptor, true) }
        // Shared, waiting while an alone one queues what it found running again.
        flock(descriptor, LOCK_SH)
        return (descriptor, false)
    }

    /// Whether a command runs downloads on the state folder's store itself now (it holds `run.lock`).
    public static func hasRunners(_ state: String) -> Bool {
        guard let descriptor = try? StateFolder.open(state).openOwnFile("run.lock") else { return false }
        defer { close(descriptor) }
        return flock(descriptor, LOCK_EX | LOCK_NB) != 0
    }

    /// Turns an alone runner's exclusive hold of `run.lock` (`joinRunners`) into a shared one.
    public static func share(_ descriptor: Int32) {
        flock(descriptor, LOCK_SH)
    }
}
