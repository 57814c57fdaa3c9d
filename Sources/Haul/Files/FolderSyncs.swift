import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The `fsync` of a folder that makes a rename into it durable, shared: one sync covers every rename made before it
/// started, so files finishing together in one folder pay for one sync, not one each (group commit, as the store's
/// writes). A caller whose rename came while a sync of its folder ran waits for the next one, which starts as soon as
/// that one ends.
final class FolderSyncs: @unchecked Sendable {
    /// The process's syncs: every download's renames go through the same one.
    static let shared = FolderSyncs()

    /// One folder's syncs. A class: a caller looks its folder up once and then reads and changes this in place
    /// while it waits (each read through the dictionary hashed the folder's identity again).
    private final class Progress {
        /// Requests made (each a ticket), and the newest ticket covered by a finished sync.
        var requested: UInt64 = 0
        var synced: UInt64 = 0
        var isSyncing = false
    }

    private let condition = NSCondition()
    /// Each folder by its identity: two descriptors of one folder share its syncs.
    private var folders: [FileIdentity: Progress] = [:]
    /// Syncs made (for tests).
    private(set) var syncs = 0

    /// Returns once a sync of `held` (through any descriptor of the same folder) that started after this call has
    /// finished. Blocking: call it off the cooperative pool (from `Blocking.run`).
    func sync(_ held: HeldFolder) {
        sync(held.identity) { held.sync() }
    }

    /// Returns once a `perform` of the folder `folder` that started after this call has finished; `perform` syncs it.
    func sync(_ folder: FileIdentity, perform: () -> Void) {
        condition.lock()
        let progress: Progress
        if let known = folders[folder] {
            progress = known
        } else {
            progress = Progress()
            folders[folder] = progress
        }
        progress.requested += 1
        let ticket = progress.requested
        while progress.synced < ticket {
            if progress.isSyncing {
                condition.wait()
                continue
            }
            // This caller syncs, for itself and every request made until now.
            progress.isSyncing = true
            let covered = progress.requested
            condition.unlock()
            perform()
            condition.lock()
            syncs += 1
            progress.synced = covered
            progress.isSyncing = false
            condition.broadcast()
        }
        // The entry stays (a few numbers for each folder downloads went to): the next request for the folder shares
        // its count.
        condition.unlock()
    }
}
