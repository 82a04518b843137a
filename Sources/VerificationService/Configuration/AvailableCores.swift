import Foundation

extension ServiceConfiguration {
    /// The cores this process may run on: its CPU affinity (what `taskset` sets, read from
    /// `Cpus_allowed` in /proc/self/status, as `sched_getaffinity` would say), which NIO's core
    /// count ignores; at least 1.
    public static var availableCores: Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Cpus_allowed:") })
        else { return max(1, ProcessInfo.processInfo.activeProcessorCount) }
        let mask = line.dropFirst("Cpus_allowed:".count).filter { $0.isHexDigit }
        let count = mask.reduce(0) { $0 + (Int(String($1), radix: 16) ?? 0).nonzeroBitCount }
        return max(1, count)
    }
}
