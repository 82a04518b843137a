internal import CSystemShims

#if canImport(Glibc)
    import Glibc
#endif

/// What a process that holds secrets (a PIN, a passphrase, a store key, a signing key) does
/// before it reads one, so that its memory reaches neither the disk nor another process of the
/// same user.
public enum ProcessSecrecy {
    /// Marks this process not dumpable (`PR_SET_DUMPABLE` 0) and sets its core-file limit to 0.
    /// Not dumpable: no core file, and `/proc/PID/mem`, `environ`, `fd`, `cwd`, `root` and the
    /// rest belong to root, so another process of this user (a plug-in reading
    /// `/proc/$PPID/environ`) cannot read them or attach to this one; root still can. The core
    /// limit covers the case the first cannot: an exec'd program that becomes dumpable again.
    /// Both are kept across fork; exec of an ordinary program makes a child dumpable again, its own
    /// business. Returns whether both took effect.
    @discardableResult
    public static func forbidDumpsAndReaders() -> Bool {
        var none = rlimit(rlim_cur: 0, rlim_max: 0)
        let noCore = setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &none) == 0
        return dc_set_not_dumpable() == 0 && noCore
    }
}
