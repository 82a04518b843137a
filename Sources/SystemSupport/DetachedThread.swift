#if canImport(Glibc)
    import Glibc
#endif

/// Threads of the process's own, outside Swift's concurrency pool, for work that blocks (waiting
/// for a child, watching a file) or that needs a thread to itself (a Landlock confinement): what
/// Foundation's `Thread(block:)` did, without Foundation.
public enum DetachedThread {
    /// Runs `body` on a new detached thread with the default attributes (glibc's stack size, from
    /// `ulimit -s`). Returns the `pthread_create` error when no thread could be made (`body` then
    /// never runs), or nil.
    @discardableResult
    public static func start(_ body: @escaping @Sendable () -> Void) -> Int32? {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        var thread = pthread_t()
        let created = pthread_create(
            &thread, &attributes,
            { context in
                // cannot fail: pthread_create hands the thread the non-nil context passed below
                Unmanaged<Body>.fromOpaque(context!).takeRetainedValue().run()
                return nil
            }, context)
        guard created == 0 else {
            Unmanaged<Body>.fromOpaque(context).release()
            return created
        }
        return nil
    }

    /// Blocks the calling thread for `duration`, resuming after a signal until all of it passed.
    public static func sleep(for duration: Duration) {
        let (seconds, attoseconds) = duration.components
        guard seconds > 0 || attoseconds > 0 else { return }
        var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }

    /// The closure a new thread runs, handed to it through `pthread_create`'s context pointer.
    private final class Body: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }
}
