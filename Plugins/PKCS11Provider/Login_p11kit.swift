internal import CP11Kit
import DerivedCredentials
import Foundation

/// How to log in to a token. PINs are precious: the token's flags are read
/// before `C_Login`; a locked PIN is refused, the final try is refused unless allowed, a low
/// count is reported; a wrong PIN is never retried; a PIN pad logs in with no PIN.
public struct LoginPolicy: Sendable {
    /// Where the user PIN comes from; asked at most once, only when the token needs a PIN, never retried.
    public var pin: any PassphraseSource
    /// Whether to log in when the token reports that one more wrong PIN locks it; refused by default.
    public var allowFinalPINTry: Bool
    /// Receives warnings (a low PIN count) for the user.
    public var warn: @Sendable (String) -> Void
    /// Receives what the user should see before a PIN is tried: a card's PIN tries left.
    public var inform: @Sendable (String) -> Void

    /// A policy that reads the PIN from `pin`; by default the final try is refused and warnings
    /// and notices are dropped.
    public init(
        pin: any PassphraseSource, allowFinalPINTry: Bool = false,
        warn: @escaping @Sendable (String) -> Void = { _ in },
        inform: @escaping @Sendable (String) -> Void = { _ in }
    ) {
        self.pin = pin
        self.allowFinalPINTry = allowFinalPINTry
        self.warn = warn
        self.inform = inform
    }
}

extension Session {
    /// Logs the user in on this session's token, following ``LoginPolicy``; one `C_Login` at most.
    /// Returns the PIV card behind the token, when it is one in a PC/SC reader, for the log-out.
    @discardableResult
    func login(slot: CK_SLOT_ID, policy: LoginPolicy) throws -> PIVCard? {
        var info = CK_TOKEN_INFO()
        try module.call("C_GetTokenInfo") { $0.C_GetTokenInfo(slot, &info) }
        let label = fixedString(info.label)
        func has<T: BinaryInteger>(_ flag: T) -> Bool { info.flags & CK_FLAGS(flag) != 0 }
        if has(CKF_USER_PIN_LOCKED) {
            throw DCError(
                .pinLocked, "the token's user PIN is locked", subject: label,
                remedy: .unblockUserPIN)
        }
        if has(CKF_USER_PIN_FINAL_TRY) && !policy.allowFinalPINTry {
            throw DCError(
                .pinFinalTry, "one more wrong PIN will lock the token; refusing to try", subject: label,
                remedy: .confirmFinalPINTry)
        }
        // A smart card in a PC/SC reader says how many tries its PIN has left (PKCS#11 only says
        // "low" or "final"): shown before any try, and a blocked PIN is refused without one.
        let pivCard = pcscCard(slot: slot, token: info)
        // What a person asked for the PIN is told with the question (a pinentry's description).
        var detail = ""
        if !has(CKF_PROTECTED_AUTHENTICATION_PATH), let card = pivCard, let counter = try? card.pinCounter() {
            switch counter {
            case .blocked:
                throw DCError(
                    .pinLocked, "the card's PIN is blocked; no PIN was sent", subject: label, remedy: .unblockUserPIN)
            case .triesLeft(1) where !policy.allowFinalPINTry:
                throw DCError(
                    .pinFinalTry, "one more wrong PIN will block the card; refusing to try", subject: label,
                    remedy: .confirmFinalPINTry)
            case .triesLeft(let n):
                detail = "PIN: \(counter)"
                policy.inform(
                    "\(label.escapingControlCharacters) in \(card.reader.escapingControlCharacters): PIN \(counter)")
                if n == 1 { policy.warn("\(label.escapingControlCharacters): this is the PIN's final try") }
            case .verified: break
            }
        }
        if has(CKF_USER_PIN_COUNT_LOW) {
            if detail.isEmpty { detail = "An incorrect PIN was entered recently; few tries are left." }
            policy.warn("\(label.escapingControlCharacters): an incorrect PIN was entered recently; few tries are left")
        }
        let result: CK_RV
        if has(CKF_PROTECTED_AUTHENTICATION_PATH) {
            policy.warn("\(label.escapingControlCharacters): enter the PIN on the reader's PIN pad")
            result = module.functions.pointee.C_Login(handle, CK_USER_TYPE(CKU_USER), nil, 0)
        } else {
            guard let pin = try policy.pin.passphrase(for: label, detail: detail) else {
                throw DCError(
                    .passphraseRequired, "the token needs a PIN and none was given", subject: label,
                    remedy: .givePIN)
            }
            // The PIN is lent from its wiped-on-release buffer; no copy is made.
            result = pin.withUnsafeBytes { bytes in
                module.functions.pointee.C_Login(
                    handle, CK_USER_TYPE(CKU_USER),
                    UnsafeMutablePointer(mutating: bytes.baseAddress?.assumingMemoryBound(to: CK_UTF8CHAR.self)),
                    CK_ULONG(bytes.count))
            }
        }
        switch result {
        case CK_RV(CKR_OK), CK_RV(CKR_USER_ALREADY_LOGGED_IN): return pivCard
        case CK_RV(CKR_PIN_INCORRECT):
            throw DCError(
                .wrongPIN, "the token refused the PIN (not retried)", subject: label,
                hint: "check the PIN; each wrong try counts against the card")
        case CK_RV(CKR_PIN_LOCKED):
            throw DCError(.pinLocked, "the token's user PIN is locked", subject: label)
        default:
            throw module.failure("C_Login", result, subject: label)
        }
    }

    /// The PIV card behind a hardware slot with a removable device: a token OpenSC's PIV emulation
    /// shows (manufacturer `piv_II`; a card with other applets that OpenSC drives otherwise is
    /// left alone), in a PC/SC reader named as the slot (OpenSC names its slots after their
    /// readers); nil for anything else.
    func pcscCard(slot: CK_SLOT_ID, token: CK_TOKEN_INFO) -> PIVCard? {
        guard fixedString(token.manufacturerID) == "piv_II" else { return nil }
        var info = CK_SLOT_INFO()
        guard module.functions.pointee.C_GetSlotInfo(slot, &info) == CK_RV(CKR_OK),
            info.flags & CK_FLAGS(CKF_HW_SLOT) != 0, info.flags & CK_FLAGS(CKF_REMOVABLE_DEVICE) != 0
        else { return nil }
        let reader = fixedString(info.slotDescription)
        guard PIVCard.readersWithCard()?.contains(reader) == true else { return nil }
        return PIVCard(reader: reader)
    }

    /// Refuses, as a first login would, when there is no PIN and no PIN pad.
    func requireLoginMeans(slot: CK_SLOT_ID, policy: LoginPolicy) throws {
        var info = CK_TOKEN_INFO()
        try module.call("C_GetTokenInfo") { $0.C_GetTokenInfo(slot, &info) }
        guard info.flags & CK_FLAGS(CKF_PROTECTED_AUTHENTICATION_PATH) == 0 else { return }
        guard try policy.pin.passphrase(for: fixedString(info.label)) != nil else {
            throw DCError(
                .passphraseRequired, "the token needs a PIN and none was given", subject: fixedString(info.label),
                remedy: .givePIN)
        }
    }

    /// Opens a session, logs in, runs `body`, then logs out and closes the session — in that order.
    ///
    /// PKCS#11 login state belongs to the application, not the session: a `C_Logout` ends every
    /// session's login on that token. So logins are counted per token in this process: the first
    /// user logs in (one attempt, under a lock), the last one logs out.
    static func withLoggedInSession<R>(
        _ module: LoadedModule, slot: CK_SLOT_ID, policy: LoginPolicy, _ body: (Session) throws -> R
    ) throws -> R {
        try withSession(module, slot: slot) { session in
            try LoginCounter.shared.enter(
                module: module, slot: slot, canLogIn: { try session.requireLoginMeans(slot: slot, policy: policy) },
                login: { try session.login(slot: slot, policy: policy) })
            defer {
                LoginCounter.shared.leave(module: module, slot: slot) { card in
                    _ = module.functions.pointee.C_Logout(session.handle)
                    // A PIV card in a PC/SC reader stays verified after C_Logout (OpenSC sends
                    // nothing): end the verification on the card itself.
                    try? card?.logOut()
                }
            }
            return try body(session)
        }
    }
}

/// Per-token login reference counts for this process.
final class LoginCounter: @unchecked Sendable {
    static let shared = LoginCounter()
    // `counts` is only touched under `lock`, which is also held across C_Login and C_Logout so
    // that two users never log in or out at the same time.
    private let lock = NSLock()
    private var counts: [String: Int] = [:]
    // The PIV card each login found behind its token, for the last leaver's log-out.
    private var cards: [String: PIVCard] = [:]

    /// `login` runs for the first user; a later user joins the existing login but must still be
    /// able to log in itself (`canLogIn`), so that whether a request without a PIN succeeds does
    /// not depend on what else happens to be running.
    func enter(module: LoadedModule, slot: CK_SLOT_ID, canLogIn: () throws -> Void, login: () throws -> PIVCard?)
        throws
    {
        let key = "\(module.name)#\(slot)"
        try lock.withLock {
            if counts[key, default: 0] == 0 { cards[key] = try login() } else { try canLogIn() }
            counts[key, default: 0] += 1
        }
    }

    func leave(module: LoadedModule, slot: CK_SLOT_ID, logout: (PIVCard?) -> Void) {
        let key = "\(module.name)#\(slot)"
        lock.withLock {
            counts[key, default: 1] -= 1
            if counts[key] == 0 { logout(cards.removeValue(forKey: key)) }
        }
    }
}
