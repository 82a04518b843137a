import SystemSupport

extension ServiceConfiguration {
    /// The cores this process may run on (SystemSupport's `ParallelWork.availableCores`: its CPU
    /// affinity, what `taskset` sets, which NIO's core count ignores); at least 1.
    public static var availableCores: Int { ParallelWork.availableCores }
}
