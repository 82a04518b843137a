internal import CSystemShims

#if canImport(Glibc)
    import Glibc
#endif

/// The test process's place in the kernel's key-retention service (keyrings(7)).
public enum KernelKeyring {
    /// Whether the process's session keyring is the user-session keyring, the one every process
    /// of the user without a session of its own shares; nil when the kernel keyring is unavailable
    /// (no keyring support, a seccomp filter). Neither lookup creates a keyring.
    ///
    /// The suite must run in a fresh anonymous session keyring (`keyctl session - …`, which
    /// `scripts/test` does), so that the keys its tests add die with the run and never reach the
    /// developer's keyrings. The process cannot arrange that for itself: KEYCTL_JOIN_SESSION_KEYRING
    /// changes only the calling thread's credentials, and the tests run on many threads.
    public static func sessionIsUserSession() -> Bool? {
        let session = dc_keyctl_get_keyring_id(-3, 0)  // KEY_SPEC_SESSION_KEYRING
        let userSession = dc_keyctl_get_keyring_id(-5, 0)  // KEY_SPEC_USER_SESSION_KEYRING
        guard session >= 0, userSession >= 0 else { return nil }
        return session == userSession
    }
}
