import CHaulSystem
import NIOCore
import NIOPosix

/// Swift's global executor moved onto NIO's event loops (`MultiThreadedEventLoopGroup.singleton`, which
/// AsyncHTTPClient's connections use too): a task that reads a response body then runs on the thread that read it,
/// instead of handing every chunk and every answer across to Swift's cooperative pool and back. This is what
/// `NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()` does, except that NIO
/// finds the runtime's hook with `dlsym`, which cannot see it in a binary linked with the static Swift runtime.
///
/// Only `haul get` running its own downloads installs it. The daemon keeps its loops for answering requests: a
/// download's disk writes and store work on them would hold up the API.
enum EventLoopExecutor {
    private typealias Hook = @convention(thin) (UnownedJob, @convention(thin) (UnownedJob) -> Void) -> Void

    /// Installs the loops as the global executor, for every job enqueued from now on. Call it once, before the work
    /// that is to run on them starts.
    static func install() {
        withUnsafeTemporaryAllocation(of: Hook.self, capacity: 1) { hook in
            // `any()` keeps a job on the loop it is enqueued from, when that is one of the group's.
            hook.baseAddress!.initialize(to: { job, _ in
                MultiThreadedEventLoopGroup.singleton.any().enqueue(ExecutorJob(job))
            })
            hook.baseAddress!.withMemoryRebound(to: UnsafeMutableRawPointer.self, capacity: 1) { function in
                haul_enqueue_global_hook().pointee = function.pointee
            }
        }
    }
}
