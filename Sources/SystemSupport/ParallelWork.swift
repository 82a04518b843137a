import FoundationEssentials
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Independent pieces of work on threads of their own: one call per index, up to a given number
/// of threads at a time.
///
/// The width depends on the work. Work that computes gets ``availableCores`` threads (more would
/// only take turns). Work that waits, such as a `fsync` per file, gets ``blockingWidth``: a thread
/// blocked in the kernel costs no CPU, and the device sees many requests at once instead of one
/// after another (on the 2-core virtio disk the benchmarks run on, 400 new files synced one after
/// another took 95 ms; from 16 threads, 38 ms).
public enum ParallelWork {
    /// The width for work that waits on a device.
    public static let blockingWidth = 16

    /// The cores this process may run on: its CPU affinity (what `taskset` sets, read from
    /// `Cpus_allowed` in /proc/self/status, as `sched_getaffinity` would say), which a count of the
    /// machine's processors ignores; at least 1.
    public static var availableCores: Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Cpus_allowed:") })
        else { return max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))) }
        let mask = line.dropFirst("Cpus_allowed:".count).filter { $0.isHexDigit }
        let count = mask.reduce(0) { $0 + (Int(String($1), radix: 16) ?? 0).nonzeroBitCount }
        return max(1, count)
    }

    /// Calls `body` once for every index in `0..<count`, from up to `width` threads (the calling
    /// thread is one of them), and returns when every call has returned. The order of the calls
    /// is not defined; each index is taken exactly once. A count of 1 runs on the calling thread.
    public static func forEach(_ count: Int, width: Int, _ body: @Sendable (Int) -> Void) {
        guard count > 0 else { return }
        let threads = max(1, min(width, count))
        guard threads > 1 else {
            for index in 0..<count { body(index) }
            return
        }
        withoutActuallyEscaping(body) { body in
            let work = Work(count: count, body: body)
            var started: [pthread_t] = []
            for _ in 1..<threads {
                var thread = pthread_t()
                let context = Unmanaged.passRetained(work).toOpaque()
                if pthread_create(
                    &thread, nil,
                    { context in
                        // cannot fail: pthread_create hands the thread the non-nil context passed below
                        let work = Unmanaged<Work>.fromOpaque(context!).takeRetainedValue()
                        work.run()
                        return nil
                    }, context) == 0
                {
                    started.append(thread)
                } else {
                    Unmanaged<Work>.fromOpaque(context).release()  // fewer threads; the work still gets done
                }
            }
            work.run()
            for thread in started { pthread_join(thread, nil) }
        }
    }

    /// The shared state of one `forEach`: the next index to take, and the body.
    private final class Work: @unchecked Sendable {
        let count: Int
        let body: @Sendable (Int) -> Void
        let next = Atomic<Int>(0)

        init(count: Int, body: @escaping @Sendable (Int) -> Void) {
            self.count = count
            self.body = body
        }

        func run() {
            while true {
                let index = next.wrappingAdd(1, ordering: .relaxed).oldValue
                guard index < count else { return }
                body(index)
            }
        }
    }
}
