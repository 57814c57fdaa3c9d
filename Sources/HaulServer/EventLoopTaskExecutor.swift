import NIOCore
import NIOPosix

/// Runs the daemon's tasks on the event loops that serve its connections: a job goes to the event loop of the
/// thread that enqueues it (the loop that read a request, or that a continuation was resumed on), else to the next
/// loop of the group.
///
/// Hummingbird reads a request on an event loop and hands it to a task; by default that task runs on Swift's global
/// pool, so every request crossed from the loop's thread to a pool thread and back, and every wait for the manager
/// crossed again. With this as the task executor preference of the daemon's service group, the tasks of its
/// connections (children of the server's task group) and the manager's actor, when they call it, run where the
/// bytes are, with no hop between threads for each request. Downloads
/// do not run here: the manager starts them as unstructured tasks, which do not inherit the preference.
///
/// What runs here must not block for long, as on any event loop; a commit of the store (a few hundred microseconds)
/// is the longest wait of a request.
final class EventLoopTaskExecutor: TaskExecutor {
    private let group: MultiThreadedEventLoopGroup

    init(group: MultiThreadedEventLoopGroup) {
        self.group = group
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let loop = MultiThreadedEventLoopGroup.currentEventLoop ?? group.next()
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
