internal import CP11Kit
import DerivedCredentials
import Foundation

/// How to log in to a token. PINs are precious (DESIGN.md §3.5): the token's flags are read
/// before `C_Login`; a locked PIN is refused, the final try is refused unless allowed, a low
/// count is reported; a wrong PIN is never retried; a PIN pad logs in with no PIN.
public struct LoginPolicy: Sendable {
    public var pin: any PassphraseSource
    public var allowFinalPINTry: Bool
    /// Receives warnings (a low PIN count) for the user.
    public var warn: @Sendable (String) -> Void

    public init(pin: any PassphraseSource, allowFinalPINTry: Bool = false, warn: @escaping @Sendable (String) -> Void = { _ in }) {
        self.pin = pin
        self.allowFinalPINTry = allowFinalPINTry
        self.warn = warn
    }
}

extension Session {
    /// Logs the user in on this session's token, following ``LoginPolicy``; one `C_Login` at most.
    func login(slot: CK_SLOT_ID, policy: LoginPolicy) throws {
        var info = CK_TOKEN_INFO()
        try module.call("C_GetTokenInfo") { $0.C_GetTokenInfo(slot, &info) }
        let label = fixedString(info.label)
        func has<T: BinaryInteger>(_ flag: T) -> Bool { info.flags & CK_FLAGS(flag) != 0 }
        if has(CKF_USER_PIN_LOCKED) {
            throw DCError(
                .pinLocked, "the token's user PIN is locked", subject: label,
                hint: "unlock it with the security officer PIN (e.g. pkcs11-tool --init-pin --login --login-type so) or the card issuer's tool")
        }
        if has(CKF_USER_PIN_FINAL_TRY) && !policy.allowFinalPINTry {
            throw DCError(
                .pinFinalTry, "one more wrong PIN will lock the token; refusing to try", subject: label,
                hint: "if you are sure of the PIN, pass --allow-final-pin-try")
        }
        if has(CKF_USER_PIN_COUNT_LOW) {
            policy.warn("\(label.escapingControlCharacters): an incorrect PIN was entered recently; few tries are left")
        }
        let result: CK_RV
        if has(CKF_PROTECTED_AUTHENTICATION_PATH) {
            policy.warn("\(label.escapingControlCharacters): enter the PIN on the reader's PIN pad")
            result = module.functions.pointee.C_Login(handle, CK_USER_TYPE(CKU_USER), nil, 0)
        } else {
            guard let pin = try policy.pin.passphrase(for: label) else {
                throw DCError(
                    .passphraseRequired, "the token needs a PIN and none was given", subject: label,
                    hint: "pass --pin-file FILE, --pin-fd N or --pin-env NAME")
            }
            // The PIN is lent from its wiped-on-release buffer; no copy is made.
            result = pin.withUnsafeBytes { bytes in
                module.functions.pointee.C_Login(
                    handle, CK_USER_TYPE(CKU_USER),
                    UnsafeMutablePointer(mutating: bytes.baseAddress?.assumingMemoryBound(to: CK_UTF8CHAR.self)), CK_ULONG(bytes.count))
            }
        }
        switch result {
        case CK_RV(CKR_OK), CK_RV(CKR_USER_ALREADY_LOGGED_IN): return
        case CK_RV(CKR_PIN_INCORRECT):
            throw DCError(.wrongPIN, "the token refused the PIN (not retried)", subject: label, hint: "check the PIN; each wrong try counts against the card")
        case CK_RV(CKR_PIN_LOCKED):
            throw DCError(.pinLocked, "the token's user PIN is locked", subject: label)
        default:
            throw DCError(.pkcs11Failure, "the token refused the login", subject: label, underlying: PKCS11Error(function: "C_Login", returnValue: UInt(result)))
        }
    }

    func logout() { _ = module.functions.pointee.C_Logout(handle) }

    /// Opens a session, logs in, runs `body`, then logs out and closes the session — in that order.
    static func withLoggedInSession<R>(_ module: LoadedModule, slot: CK_SLOT_ID, policy: LoginPolicy, _ body: (Session) throws -> R) throws -> R {
        try withSession(module, slot: slot) { session in
            try session.login(slot: slot, policy: policy)
            defer { session.logout() }
            return try body(session)
        }
    }
}
