internal import CP11Kit
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import Foundation
import ManagedClient
import Synchronization
import SystemSupport

/// A `CK_RV` other than `CKR_OK`, thrown inside the module and returned at its edge.
struct ReturnValue: Error, Equatable {
    var value: CK_RV
    init(_ value: CK_RV) { self.value = value }
}

/// Where the client's token stands, as the module sees it before every call.
enum TokenPresence: Equatable {
    /// No token: the client is not set up, has nothing installed, or is not authorized (an
    /// unauthorized or retired app has no credential to use).
    case absent
    /// A token whose objects cannot be read: the client's store is locked. `C_Login` unlocks it.
    case locked
    /// Secure services are available: the credential can be read.
    case available
}

/// The module's one state, behind one lock: PKCS#11 allows calls from any thread
/// (`CKF_OS_LOCKING_OK`), and every call takes the lock for its whole length except
/// `C_WaitForSlotEvent`'s waiting.
final class Module: Sendable {
    static let shared = Module()
    /// The one slot.
    static let slotID: CK_SLOT_ID = 1
    /// The longest passphrase `C_Login` takes.
    static let maximumPINLength = 1024

    /// The most data a multi-part signature collects (`C_SignUpdate`), 64 MiB: the hashing
    /// mechanisms sign what they collected at `C_SignFinal`.
    static let maximumSignedData = 1 << 26

    struct Signing {
        var key: CK_OBJECT_HANDLE
        var scheme: SignatureScheme
        var length: Int
        /// What `C_SignUpdate` collected; nil until it is called (then `C_Sign` may not end it).
        var parts: [UInt8]?
    }

    struct Decrypting {
        var key: CK_OBJECT_HANDLE
        var padding: DecryptionPadding
        var length: Int
    }

    struct Session {
        var readWrite: Bool
        var found: [CK_OBJECT_HANDLE]?
        var signing: Signing?
        var decrypting: Decrypting?
    }

    /// A secret `C_DeriveKey` made: a session object of the application, visible to all its
    /// sessions, destroyed with the session that made it or at logout.
    struct SessionObject {
        var owner: CK_SESSION_HANDLE
        var secret: DerivedSecret
    }

    struct State {
        var initialized = false
        var client = ManagedClient()
        var sessions: [CK_SESSION_HANDLE: Session] = [:]
        /// The secrets derived while logged in; gone at logout, since their key is.
        var secrets: [CK_OBJECT_HANDLE: SessionObject] = [:]
        /// How many threads wait in C_WaitForSlotEvent, by the initialization they began in (the
        /// count of C_Finalize calls before it): a C_Finalize waits for those of its own only.
        var waiting: [Int: Int] = [:]
        var nextSession: CK_SESSION_HANDLE = 1
        var nextSecret: CK_OBJECT_HANDLE = 0x4000_0000
        var loggedIn = false
        /// Logged in by the policy (``TokenLogin/secureServices``), not by C_Login.
        var automaticLogin = false
        var contents: TokenContents?
        /// What C_WaitForSlotEvent reported last (or what C_Initialize found).
        var reported: TokenPresence = .absent
        /// What the client's files said when they were last read.
        var watch: ClientWatch?
    }

    /// The client as its files said when their stamps were `stamps`.
    struct ClientWatch {
        var stamps: [FileStamp?]
        var unlock: UnlockWatcher?
        /// Set up, authorized, a credential installed.
        var ready: Bool
        var sequence: UInt64?
        /// How programs log in, as the operator's policy says.
        var tokenLogin: TokenLogin
    }

    private let state = Mutex(State())
    /// Counts C_Finalize calls, so that a waiting C_WaitForSlotEvent notices one without the lock.
    private let finalizations = Atomic<Int>(0)

    // MARK: - The edge

    /// Runs `body` under the lock and turns what it throws into a `CK_RV`. Anything that is not
    /// a `ReturnValue` is a failure the module did not expect: `CKR_FUNCTION_FAILED`.
    func call(
        needsInitialization: Bool = true, _ body: (inout State) throws -> Void
    ) -> CK_RV {
        state.withLock { state in
            do {
                if needsInitialization, !state.initialized { throw ReturnValue(CKR_CRYPTOKI_NOT_INITIALIZED) }
                try body(&state)
                return CKR_OK
            } catch let failure as ReturnValue {
                return failure.value
            } catch {
                return CKR_FUNCTION_FAILED
            }
        }
    }

    // MARK: - General

    func initialize(_ arguments: UnsafeMutableRawPointer?) -> CK_RV {
        call(needsInitialization: false) { state in
            if let arguments {
                let given = arguments.loadUnaligned(as: CK_C_INITIALIZE_ARGS.self)
                guard given.pReserved == nil else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
                let functions = [
                    given.CreateMutex == nil, given.DestroyMutex == nil, given.LockMutex == nil,
                    given.UnlockMutex == nil,
                ]
                guard Set(functions).count == 1 else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
                // Only the application's own locks offered, and no leave to use the system's: the
                // module has only the system's.
                if functions[0] == false, given.flags & CKF_OS_LOCKING_OK == 0 { throw ReturnValue(CKR_CANT_LOCK) }
            }
            guard !state.initialized else { throw ReturnValue(CKR_CRYPTOKI_ALREADY_INITIALIZED) }
            state.initialized = true
            state.watch = nil
            let apps = ManagedApps(locations: XDGDirectories())
            state.client = (try? apps.choose(nil)) ?? apps.client(ManagedApps.defaultApp)
            state.reported = Self.presence(&state)
        }
    }

    /// Ends the module's use. The threads still in C_WaitForSlotEvent see it within 10 ms and
    /// return `CKR_CRYPTOKI_NOT_INITIALIZED`; C_Finalize returns only after they have, since the
    /// application may unload the library next. (The library is also linked `-z nodelete`, so an
    /// unload never unmaps code a thread is still leaving.)
    func finalize(_ reserved: UnsafeMutableRawPointer?) -> CK_RV {
        var ended = 0
        let result = call { state in
            guard reserved == nil else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            Self.closeAll(&state)
            state.initialized = false
            ended = finalizations.add(1, ordering: .releasing).oldValue
        }
        guard result == CKR_OK else { return result }
        while state.withLock({ $0.waiting[ended] ?? 0 }) > 0 { usleep(1_000) }
        return result
    }

    func info(_ info: UnsafeMutablePointer<CK_INFO>?) -> CK_RV {
        call { _ in
            guard let info else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            var value = CK_INFO()
            value.cryptokiVersion = CK_VERSION(major: 2, minor: 40)
            Text.pad("Derived Credentials", into: &value.manufacturerID)
            Text.pad("dcclient derived credential", into: &value.libraryDescription)
            value.libraryVersion = CK_VERSION(major: 1, minor: 0)
            info.pointee = value
        }
    }

    // MARK: - Slots and the token

    func slotList(
        _ tokenPresent: CK_BBOOL, _ list: UnsafeMutablePointer<CK_SLOT_ID>?, _ count: UnsafeMutablePointer<CK_ULONG>?
    ) -> CK_RV {
        call { state in
            guard let count else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            let slots: [CK_SLOT_ID] =
                tokenPresent != 0 && Self.presence(&state) == .absent ? [] : [Self.slotID]
            try Buffers.deliver(slots, to: list, count: count)
        }
    }

    func slotInfo(_ slot: CK_SLOT_ID, _ info: UnsafeMutablePointer<CK_SLOT_INFO>?) -> CK_RV {
        call { state in
            guard slot == Self.slotID else { throw ReturnValue(CKR_SLOT_ID_INVALID) }
            guard let info else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            var value = CK_SLOT_INFO()
            Text.pad("dcclient: the client's credential store", into: &value.slotDescription)
            Text.pad("Derived Credentials", into: &value.manufacturerID)
            value.flags = CKF_REMOVABLE_DEVICE
            if Self.presence(&state) != .absent { value.flags |= CKF_TOKEN_PRESENT }
            value.hardwareVersion = CK_VERSION(major: 1, minor: 0)
            value.firmwareVersion = CK_VERSION(major: 1, minor: 0)
            info.pointee = value
        }
    }

    func tokenInfo(_ slot: CK_SLOT_ID, _ info: UnsafeMutablePointer<CK_TOKEN_INFO>?) -> CK_RV {
        call { state in
            guard slot == Self.slotID else { throw ReturnValue(CKR_SLOT_ID_INVALID) }
            guard let info else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            try Self.refresh(&state)
            var value = CK_TOKEN_INFO()
            Text.pad("dcclient " + (state.client.clientID?.text ?? ""), into: &value.label)
            Text.pad("Derived Credentials", into: &value.manufacturerID)
            Text.pad("derived cred", into: &value.model)
            // The delivery number of the installed credential: a renewal is a new token, as a new
            // card would be.
            Text.pad(String(format: "%016llu", state.watch?.sequence ?? 0), into: &value.serialNumber)
            value.flags = CKF_TOKEN_INITIALIZED | CKF_USER_PIN_INITIALIZED | CKF_RNG
            if state.watch?.tokenLogin != .secureServices { value.flags |= CKF_LOGIN_REQUIRED }
            value.ulMaxSessionCount = CK_ULONG(0)
            value.ulSessionCount = CK_ULONG(state.sessions.count)
            value.ulMaxRwSessionCount = CK_ULONG(0)
            value.ulRwSessionCount = CK_ULONG(state.sessions.values.filter(\.readWrite).count)
            value.ulMaxPinLen = CK_ULONG(Self.maximumPINLength)
            value.ulMinPinLen = 1
            value.ulTotalPublicMemory = unavailableInformation
            value.ulFreePublicMemory = unavailableInformation
            value.ulTotalPrivateMemory = unavailableInformation
            value.ulFreePrivateMemory = unavailableInformation
            value.hardwareVersion = CK_VERSION(major: 1, minor: 0)
            value.firmwareVersion = CK_VERSION(major: 1, minor: 0)
            Text.pad("", into: &value.utcTime)
            info.pointee = value
        }
    }

    func mechanismList(
        _ slot: CK_SLOT_ID, _ list: UnsafeMutablePointer<CK_MECHANISM_TYPE>?, _ count: UnsafeMutablePointer<CK_ULONG>?
    ) -> CK_RV {
        call { _ in
            guard slot == Self.slotID else { throw ReturnValue(CKR_SLOT_ID_INVALID) }
            guard let count else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            try Buffers.deliver(Mechanisms.all, to: list, count: count)
        }
    }

    func mechanismInfo(
        _ slot: CK_SLOT_ID, _ type: CK_MECHANISM_TYPE, _ info: UnsafeMutablePointer<CK_MECHANISM_INFO>?
    ) -> CK_RV {
        call { _ in
            guard slot == Self.slotID else { throw ReturnValue(CKR_SLOT_ID_INVALID) }
            guard let info else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            guard let value = Mechanisms.info(type) else { throw ReturnValue(CKR_MECHANISM_INVALID) }
            info.pointee = value
        }
    }

    /// Reports a change of the token's presence or lock since the last report (or since
    /// C_Initialize). Blocking calls look every 200 ms, without holding the lock, and end with
    /// `CKR_CRYPTOKI_NOT_INITIALIZED` within 10 ms when another thread finalizes the module
    /// (which waits for them).
    func waitForSlotEvent(
        _ flags: CK_FLAGS, _ slot: UnsafeMutablePointer<CK_SLOT_ID>?, _ reserved: UnsafeMutableRawPointer?
    ) -> CK_RV {
        var generation = 0
        let first = call { state in
            guard slot != nil, reserved == nil else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            // Counted under the lock: a C_Finalize after this sees the waiter.
            generation = finalizations.load(ordering: .acquiring)
            state.waiting[generation, default: 0] += 1
        }
        guard first == CKR_OK, let slot else { return first }
        defer {
            state.withLock { state in
                state.waiting[generation, default: 1] -= 1
                if state.waiting[generation] == 0 { state.waiting[generation] = nil }
            }
        }
        while true {
            var happened = false
            let result = call { state in
                guard finalizations.load(ordering: .acquiring) == generation else {
                    throw ReturnValue(CKR_CRYPTOKI_NOT_INITIALIZED)
                }
                let now = Self.presence(&state)
                if now != state.reported {
                    state.reported = now
                    happened = true
                }
            }
            if result != CKR_OK { return result }
            if happened {
                slot.pointee = Self.slotID
                return CKR_OK
            }
            if flags & CKF_DONT_BLOCK != 0 { return CKR_NO_EVENT }
            for _ in 0..<20 where finalizations.load(ordering: .acquiring) == generation { usleep(10_000) }
        }
    }

    // MARK: - Sessions

    func openSession(_ slot: CK_SLOT_ID, _ flags: CK_FLAGS, _ handle: UnsafeMutablePointer<CK_SESSION_HANDLE>?) -> CK_RV
    {
        call { state in
            guard slot == Self.slotID else { throw ReturnValue(CKR_SLOT_ID_INVALID) }
            guard flags & CKF_SERIAL_SESSION != 0 else { throw ReturnValue(CKR_SESSION_PARALLEL_NOT_SUPPORTED) }
            guard let handle else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            guard Self.presence(&state) != .absent else { throw ReturnValue(CKR_TOKEN_NOT_PRESENT) }
            let session = state.nextSession
            state.nextSession += 1
            state.sessions[session] = Session(readWrite: flags & CKF_RW_SESSION != 0)
            handle.pointee = session
        }
    }

    func closeSession(_ handle: CK_SESSION_HANDLE) -> CK_RV {
        call { state in
            guard state.sessions.removeValue(forKey: handle) != nil else {
                throw ReturnValue(CKR_SESSION_HANDLE_INVALID)
            }
            state.secrets = state.secrets.filter { $0.value.owner != handle }
            // Closing the last session logs the application out.
            if state.sessions.isEmpty { Self.logOut(&state) }
        }
    }

    func closeAllSessions(_ slot: CK_SLOT_ID) -> CK_RV {
        call { state in
            guard slot == Self.slotID else { throw ReturnValue(CKR_SLOT_ID_INVALID) }
            Self.closeAll(&state)
        }
    }

    func sessionInfo(_ handle: CK_SESSION_HANDLE, _ info: UnsafeMutablePointer<CK_SESSION_INFO>?) -> CK_RV {
        call { state in
            let session = try Self.session(handle, in: &state)
            guard let info else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            let user = state.loggedIn
            let sessionState: CK_STATE =
                session.readWrite
                ? (user ? CKS_RW_USER_FUNCTIONS : CKS_RW_PUBLIC_SESSION)
                : (user ? CKS_RO_USER_FUNCTIONS : CKS_RO_PUBLIC_SESSION)
            info.pointee = CK_SESSION_INFO(
                slotID: Self.slotID, state: sessionState,
                flags: CKF_SERIAL_SESSION | (session.readWrite ? CKF_RW_SESSION : 0), ulDeviceError: 0)
        }
    }

    /// Logs in with the client's store passphrase: the store is unlocked with it (so a wrong one
    /// is refused with `CKR_PIN_INCORRECT`), and the credential's private keys are loaded.
    func login(
        _ handle: CK_SESSION_HANDLE, _ user: CK_USER_TYPE, _ pin: UnsafeMutablePointer<UInt8>?, _ length: CK_ULONG
    )
        -> CK_RV
    {
        call { state in
            _ = try Self.session(handle, in: &state)
            switch user {
            case CKU_USER: break
            case CKU_CONTEXT_SPECIFIC: throw ReturnValue(CKR_OPERATION_NOT_INITIALIZED)
            default: throw ReturnValue(CKR_USER_TYPE_INVALID)
            }
            guard !state.loggedIn else { throw ReturnValue(CKR_USER_ALREADY_LOGGED_IN) }
            guard let pin else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            guard (1...CK_ULONG(Self.maximumPINLength)).contains(length) else { throw ReturnValue(CKR_PIN_LEN_RANGE) }
            let passphrase = SecretBytes(UnsafeBufferPointer(start: pin, count: Int(length)))
            do {
                try state.client.unlock(passphrase: passphrase)
            } catch DCError.Code.wrongPassphrase {
                throw ReturnValue(CKR_PIN_INCORRECT)
            } catch DCError.Code.notAuthorized {
                Self.closeAll(&state)
                throw ReturnValue(CKR_DEVICE_REMOVED)
            }
            state.loggedIn = true
            do {
                try Self.refresh(&state)
            } catch {
                Self.logOut(&state)
                throw error
            }
        }
    }

    func logout(_ handle: CK_SESSION_HANDLE) -> CK_RV {
        call { state in
            _ = try Self.session(handle, in: &state)
            guard state.loggedIn else { throw ReturnValue(CKR_USER_NOT_LOGGED_IN) }
            Self.logOut(&state)
        }
    }

    // MARK: - Objects

    func findObjectsInit(
        _ handle: CK_SESSION_HANDLE, _ template: UnsafeMutablePointer<CK_ATTRIBUTE>?, _ count: CK_ULONG
    )
        -> CK_RV
    {
        call { state in
            let session = try Self.session(handle, in: &state)
            guard session.found == nil else { throw ReturnValue(CKR_OPERATION_ACTIVE) }
            let wanted = try Buffers.template(template, count: count)
            var found: [CK_OBJECT_HANDLE] = []
            for object in Self.visibleObjects(state, session: session) {
                let attributes = Self.attributes(of: object, state: state, session: session) ?? [:]
                let matches = wanted.allSatisfy { type, value in attributes[type]?.encoded == value }
                if matches { found.append(object) }
            }
            state.sessions[handle]?.found = found
        }
    }

    func findObjects(
        _ handle: CK_SESSION_HANDLE, _ objects: UnsafeMutablePointer<CK_OBJECT_HANDLE>?, _ maximum: CK_ULONG,
        _ count: UnsafeMutablePointer<CK_ULONG>?
    ) -> CK_RV {
        call { state in
            let session = try Self.session(handle, in: &state)
            guard let found = session.found else { throw ReturnValue(CKR_OPERATION_NOT_INITIALIZED) }
            guard let count, objects != nil || maximum == 0 else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            let taken = Array(found.prefix(Int(min(maximum, CK_ULONG(Int.max)))))
            for (index, object) in taken.enumerated() { objects?[index] = object }
            count.pointee = CK_ULONG(taken.count)
            state.sessions[handle]?.found = Array(found.dropFirst(taken.count))
        }
    }

    func findObjectsFinal(_ handle: CK_SESSION_HANDLE) -> CK_RV {
        call { state in
            let session = try Self.session(handle, in: &state)
            guard session.found != nil else { throw ReturnValue(CKR_OPERATION_NOT_INITIALIZED) }
            state.sessions[handle]?.found = nil
        }
    }

    /// PKCS#11's rules for reading attributes: every attribute of the template is answered; a
    /// sensitive or unknown one, or one whose buffer is too short, gets the length
    /// `unavailableInformation`, and the call returns the matching error after answering the rest.
    func attributeValue(
        _ handle: CK_SESSION_HANDLE, _ object: CK_OBJECT_HANDLE, _ template: UnsafeMutablePointer<CK_ATTRIBUTE>?,
        _ count: CK_ULONG
    ) -> CK_RV {
        call { state in
            let session = try Self.session(handle, in: &state)
            guard let attributes = Self.attributes(of: object, state: state, session: session) else {
                throw ReturnValue(CKR_OBJECT_HANDLE_INVALID)
            }
            guard count == 0 || template != nil, count <= 4096 else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            var result = CKR_OK
            for index in 0..<Int(count) {
                guard let entry = template?.advanced(by: index) else { continue }
                guard let value = attributes[entry.pointee.type] else {
                    entry.pointee.ulValueLen = unavailableInformation
                    result = CKR_ATTRIBUTE_TYPE_INVALID
                    continue
                }
                guard let bytes = value.encoded else {
                    entry.pointee.ulValueLen = unavailableInformation
                    result = CKR_ATTRIBUTE_SENSITIVE
                    continue
                }
                if let destination = entry.pointee.pValue {
                    guard entry.pointee.ulValueLen >= CK_ULONG(bytes.count) else {
                        entry.pointee.ulValueLen = unavailableInformation
                        result = CKR_BUFFER_TOO_SMALL
                        continue
                    }
                    bytes.withUnsafeBytes { source in
                        if let base = source.baseAddress { destination.copyMemory(from: base, byteCount: source.count) }
                    }
                }
                entry.pointee.ulValueLen = CK_ULONG(bytes.count)
            }
            if result != CKR_OK { throw ReturnValue(result) }
        }
    }

    func destroyObject(_ handle: CK_SESSION_HANDLE, _ object: CK_OBJECT_HANDLE) -> CK_RV {
        call { state in
            let session = try Self.session(handle, in: &state)
            if state.secrets.removeValue(forKey: object) != nil { return }
            guard Self.attributes(of: object, state: state, session: session) != nil else {
                throw ReturnValue(CKR_OBJECT_HANDLE_INVALID)
            }
            throw ReturnValue(CKR_ACTION_PROHIBITED)
        }
    }

    // MARK: - Signing

    func signInit(
        _ handle: CK_SESSION_HANDLE, _ mechanism: UnsafeMutablePointer<CK_MECHANISM>?, _ key: CK_OBJECT_HANDLE
    )
        -> CK_RV
    {
        call { state in
            let session = try Self.session(handle, in: &state)
            guard let mechanism else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            guard session.signing == nil else { throw ReturnValue(CKR_OPERATION_ACTIVE) }
            let pair = try Self.privateKey(key, for: .sign, mechanism: mechanism.pointee.mechanism, state: state)
            let keyBytes: Int
            if case .rsa(let bits) = pair.publicParts.kind { keyBytes = (bits + 7) / 8 } else { keyBytes = 0 }
            let scheme = try Mechanisms.signatureScheme(mechanism.pointee, keyBytes: keyBytes)
            state.sessions[handle]?.signing = Signing(
                key: key, scheme: scheme, length: pair.key?.signatureLength ?? 0)
        }
    }

    func sign(
        _ handle: CK_SESSION_HANDLE, _ data: UnsafeMutablePointer<UInt8>?, _ length: CK_ULONG,
        _ signature: UnsafeMutablePointer<UInt8>?, _ signatureLength: UnsafeMutablePointer<CK_ULONG>?
    ) -> CK_RV {
        finishSigning(handle, adding: (data, length), signature, signatureLength)
    }

    func signUpdate(_ handle: CK_SESSION_HANDLE, _ part: UnsafeMutablePointer<UInt8>?, _ length: CK_ULONG) -> CK_RV {
        call { state in
            // Read in a scope of its own, so that no copy of the collected bytes outlives it and
            // the append below grows them in place.
            let hashes: Bool
            let collected: Int
            do {
                guard let signing = try Self.session(handle, in: &state).signing else {
                    throw ReturnValue(CKR_OPERATION_NOT_INITIALIZED)
                }
                hashes = signing.scheme.hashes
                collected = signing.parts?.count ?? 0
            }
            do {
                // The raw mechanisms sign one block that is given whole, as SoftHSM2 has it too.
                guard hashes else { throw ReturnValue(CKR_FUNCTION_NOT_SUPPORTED) }
                guard length <= CK_ULONG(Self.maximumSignedData - collected) else {
                    throw ReturnValue(CKR_DATA_LEN_RANGE)
                }
                let bytes = try Buffers.input(part, length)
                if state.sessions[handle]?.signing?.parts == nil { state.sessions[handle]?.signing?.parts = [] }
                state.sessions[handle]?.signing?.parts?.append(contentsOf: bytes)
            } catch {
                state.sessions[handle]?.signing = nil
                throw error
            }
        }
    }

    func signFinal(
        _ handle: CK_SESSION_HANDLE, _ signature: UnsafeMutablePointer<UInt8>?,
        _ signatureLength: UnsafeMutablePointer<CK_ULONG>?
    ) -> CK_RV {
        finishSigning(handle, adding: nil, signature, signatureLength)
    }

    /// C_Sign and C_SignFinal: a null `signature` asks for the length, a short buffer gets
    /// `CKR_BUFFER_TOO_SMALL`; both leave the operation active. Anything else ends it.
    private func finishSigning(
        _ handle: CK_SESSION_HANDLE, adding input: (UnsafeMutablePointer<UInt8>?, CK_ULONG)?,
        _ signature: UnsafeMutablePointer<UInt8>?, _ signatureLength: UnsafeMutablePointer<CK_ULONG>?
    ) -> CK_RV {
        call { state in
            let session = try Self.session(handle, in: &state)
            guard let signing = session.signing else { throw ReturnValue(CKR_OPERATION_NOT_INITIALIZED) }
            var ended = true
            defer { if ended { state.sessions[handle]?.signing = nil } }
            guard let signatureLength else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            // C_Sign is one whole operation; C_SignFinal ends what C_SignUpdate collected.
            let data: [UInt8]
            switch (input, signing.parts) {
            case (let input?, nil): data = try Buffers.input(input.0, input.1)
            // C_SignFinal with no C_SignUpdate signs the empty message.
            case (nil, let parts) where signing.scheme.hashes: data = parts ?? []
            default: throw ReturnValue(CKR_FUNCTION_NOT_SUPPORTED)
            }
            guard let signature else {
                signatureLength.pointee = CK_ULONG(signing.length)
                ended = false
                return
            }
            guard signatureLength.pointee >= CK_ULONG(signing.length) else {
                signatureLength.pointee = CK_ULONG(signing.length)
                ended = false
                throw ReturnValue(CKR_BUFFER_TOO_SMALL)
            }
            let pair = try Self.privateKey(signing.key, for: .sign, mechanism: nil, state: state)
            guard let key = pair.key else { throw ReturnValue(CKR_USER_NOT_LOGGED_IN) }
            let made: [UInt8]
            do {
                made = try key.sign(data, with: signing.scheme)
            } catch DCError.Code.usage {
                throw ReturnValue(CKR_DATA_LEN_RANGE)
            }
            _ = UnsafeMutableBufferPointer(start: signature, count: made.count).update(fromContentsOf: made)
            signatureLength.pointee = CK_ULONG(made.count)
        }
    }

    // MARK: - Decrypting

    func decryptInit(
        _ handle: CK_SESSION_HANDLE, _ mechanism: UnsafeMutablePointer<CK_MECHANISM>?, _ key: CK_OBJECT_HANDLE
    ) -> CK_RV {
        call { state in
            let session = try Self.session(handle, in: &state)
            guard let mechanism else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            guard session.decrypting == nil else { throw ReturnValue(CKR_OPERATION_ACTIVE) }
            let pair = try Self.privateKey(key, for: .decrypt, mechanism: mechanism.pointee.mechanism, state: state)
            let padding = try Mechanisms.decryptionPadding(mechanism.pointee)
            state.sessions[handle]?.decrypting = Decrypting(
                key: key, padding: padding, length: pair.key?.signatureLength ?? 0)
        }
    }

    func decrypt(
        _ handle: CK_SESSION_HANDLE, _ encrypted: UnsafeMutablePointer<UInt8>?, _ encryptedLength: CK_ULONG,
        _ data: UnsafeMutablePointer<UInt8>?, _ dataLength: UnsafeMutablePointer<CK_ULONG>?
    ) -> CK_RV {
        call { state in
            let session = try Self.session(handle, in: &state)
            guard let decrypting = session.decrypting else { throw ReturnValue(CKR_OPERATION_NOT_INITIALIZED) }
            var ended = true
            defer { if ended { state.sessions[handle]?.decrypting = nil } }
            guard let dataLength else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            let input = try Buffers.input(encrypted, encryptedLength)
            guard input.count == decrypting.length else { throw ReturnValue(CKR_ENCRYPTED_DATA_LEN_RANGE) }
            guard let data else {
                dataLength.pointee = CK_ULONG(decrypting.length)
                ended = false
                return
            }
            let pair = try Self.privateKey(decrypting.key, for: .decrypt, mechanism: nil, state: state)
            guard let key = pair.key else { throw ReturnValue(CKR_USER_NOT_LOGGED_IN) }
            let plaintext: SecretBytes
            do {
                plaintext = try key.decrypt(input, padding: decrypting.padding)
            } catch {
                throw ReturnValue(CKR_ENCRYPTED_DATA_INVALID)
            }
            guard dataLength.pointee >= CK_ULONG(plaintext.count) else {
                dataLength.pointee = CK_ULONG(plaintext.count)
                ended = false
                throw ReturnValue(CKR_BUFFER_TOO_SMALL)
            }
            plaintext.withUnsafeBytes { bytes in
                if let base = bytes.baseAddress {
                    UnsafeMutableRawPointer(data).copyMemory(from: base, byteCount: bytes.count)
                }
            }
            dataLength.pointee = CK_ULONG(plaintext.count)
        }
    }

    // MARK: - Deriving

    /// ECDH with an encryption key (`CKM_ECDH1_DERIVE`, `CKD_NULL`): the shared secret becomes a
    /// session object, extractable unless the template says otherwise.
    func deriveKey(
        _ handle: CK_SESSION_HANDLE, _ mechanism: UnsafeMutablePointer<CK_MECHANISM>?, _ base: CK_OBJECT_HANDLE,
        _ template: UnsafeMutablePointer<CK_ATTRIBUTE>?, _ count: CK_ULONG,
        _ made: UnsafeMutablePointer<CK_OBJECT_HANDLE>?
    ) -> CK_RV {
        call { state in
            _ = try Self.session(handle, in: &state)
            guard let mechanism, let made else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            let pair = try Self.privateKey(base, for: .derive, mechanism: mechanism.pointee.mechanism, state: state)
            guard case .ec(let bits) = pair.publicParts.kind else { throw ReturnValue(CKR_KEY_TYPE_INCONSISTENT) }
            let point = try Mechanisms.peerPoint(mechanism.pointee, fieldBytes: (bits + 7) / 8)
            let attributes = try Buffers.template(template, count: count)
            var secret = DerivedSecret(
                value: SecretBytes([]), keyType: CKK_GENERIC_SECRET, sensitive: false, extractable: true,
                private: true, label: [], id: [])
            var length: Int?
            for (type, value) in attributes {
                switch type {
                case CKA_CLASS:
                    guard Buffers.number(value) == CKO_SECRET_KEY else { throw ReturnValue(CKR_TEMPLATE_INCONSISTENT) }
                case CKA_KEY_TYPE:
                    guard let keyType = Buffers.number(value) else { throw ReturnValue(CKR_ATTRIBUTE_VALUE_INVALID) }
                    secret.keyType = keyType
                case CKA_TOKEN:
                    // The token is the client's store: nothing is written to it.
                    guard value == [0] else { throw ReturnValue(CKR_TEMPLATE_INCONSISTENT) }
                case CKA_SENSITIVE: secret.sensitive = value != [0]
                case CKA_PRIVATE: secret.private = value != [0]
                case CKA_EXTRACTABLE: secret.extractable = value != [0]
                case CKA_LABEL: secret.label = value
                case CKA_ID: secret.id = value
                case CKA_VALUE_LEN:
                    guard let wanted = Buffers.number(value), wanted > 0 else {
                        throw ReturnValue(CKR_ATTRIBUTE_VALUE_INVALID)
                    }
                    length = Int(clamping: wanted)
                default: break
                }
            }
            guard let key = pair.key else { throw ReturnValue(CKR_USER_NOT_LOGGED_IN) }
            let shared: SecretBytes
            do {
                shared = try key.agree(peerPoint: point)
            } catch {
                throw ReturnValue(CKR_MECHANISM_PARAM_INVALID)
            }
            if let length {
                guard length <= shared.count else { throw ReturnValue(CKR_TEMPLATE_INCONSISTENT) }
                secret.value = shared.withUnsafeBytes { SecretBytes($0.prefix(length)) }
            } else {
                secret.value = shared
            }
            let object = state.nextSecret
            state.nextSecret += 1
            state.secrets[object] = SessionObject(owner: handle, secret: secret)
            made.pointee = object
        }
    }

    // MARK: - Random numbers

    func generateRandom(_ handle: CK_SESSION_HANDLE, _ output: UnsafeMutablePointer<UInt8>?, _ length: CK_ULONG)
        -> CK_RV
    {
        call { state in
            _ = try Self.session(handle, in: &state)
            guard length == 0 || output != nil, length <= 1 << 20 else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            guard length > 0, let output else { return }
            let random = try Digests.random(Int(length))
            random.withUnsafeBytes {
                UnsafeMutableRawBufferPointer(start: output, count: $0.count).copyMemory(from: $0)
            }
        }
    }

    func seedRandom(_ handle: CK_SESSION_HANDLE) -> CK_RV {
        call { state in
            _ = try Self.session(handle, in: &state)
            throw ReturnValue(CKR_RANDOM_SEED_NOT_SUPPORTED)
        }
    }

    /// What every function the token does not offer answers: `CKR_FUNCTION_NOT_SUPPORTED`, after
    /// the checks every call makes.
    func notSupported() -> CK_RV {
        call { _ in throw ReturnValue(CKR_FUNCTION_NOT_SUPPORTED) }
    }

    // MARK: - Inside

    /// Where the token stands. The client's files are read again only when one of them changed
    /// (``ClientWatch``); whether the store is unlocked is asked of the keyring every time.
    static func presence(_ state: inout State) -> TokenPresence {
        let stamps = [FileStamp(path: state.client.stateDirectory)]
        if state.watch?.stamps != stamps {
            let client = state.client
            let policy = try? client.currentPolicy()
            state.watch = ClientWatch(
                stamps: stamps, unlock: try? client.unlockWatcher(),
                ready: client.clientID != nil && client.hasInstalledCredential && policy?.state == .authorized,
                sequence: client.installedSequence, tokenLogin: policy?.tokenLogin ?? .passphrase)
        }
        guard state.watch?.ready == true else { return .absent }
        return state.watch?.unlock?.isUnlocked() == true ? .available : .locked
    }

    /// Brings the module's view up to date before a call that uses the token: a token gone closes
    /// every session (`CKR_DEVICE_REMOVED`); a locked store logs the application out and hides the
    /// objects; an unlocked one has its credential read (again after a renewal), with the private
    /// keys while logged in.
    static func refresh(_ state: inout State) throws {
        switch presence(&state) {
        case .absent:
            let hadSessions = !state.sessions.isEmpty
            closeAll(&state)
            state.contents = nil
            throw ReturnValue(hadSessions ? CKR_DEVICE_REMOVED : CKR_TOKEN_NOT_PRESENT)
        case .locked:
            logOut(&state)
            state.contents = nil
        case .available:
            // The operator's policy may make the keys usable whenever secure services are.
            if state.watch?.tokenLogin == .secureServices {
                if !state.loggedIn {
                    state.loggedIn = true
                    state.automaticLogin = true
                }
            } else if state.automaticLogin {
                logOut(&state)
            }
            let sequence = state.watch?.sequence
            if state.contents == nil || state.contents?.sequence != sequence {
                let credential = try state.client.installed()
                guard let credential else { throw ReturnValue(CKR_TOKEN_NOT_PRESENT) }
                let history = try state.client.keyHistory()
                var contents = try TokenContents(credential: credential, history: history, sequence: sequence)
                if state.loggedIn { try contents.loadKeys(credential: credential, history: history) }
                state.contents = contents
                // Operations begun on the keys of a credential that was replaced end with it.
                for handle in state.sessions.keys {
                    state.sessions[handle]?.signing = nil
                    state.sessions[handle]?.decrypting = nil
                }
            } else if state.loggedIn, state.contents?.pairs.first?.key == nil {
                guard let credential = try state.client.installed() else { throw ReturnValue(CKR_TOKEN_NOT_PRESENT) }
                try state.contents?.loadKeys(credential: credential, history: try state.client.keyHistory())
            }
        }
    }

    /// The session behind `handle`, after ``refresh(_:)``.
    static func session(_ handle: CK_SESSION_HANDLE, in state: inout State) throws -> Session {
        guard state.sessions[handle] != nil else { throw ReturnValue(CKR_SESSION_HANDLE_INVALID) }
        try refresh(&state)
        guard let session = state.sessions[handle] else { throw ReturnValue(CKR_SESSION_HANDLE_INVALID) }
        return session
    }

    /// Forgets the login: the private keys and the secrets derived with them are dropped, and the
    /// operations that used them end.
    static func logOut(_ state: inout State) {
        guard state.loggedIn else { return }
        state.loggedIn = false
        state.automaticLogin = false
        state.contents?.dropKeys()
        state.secrets.removeAll()
        for handle in state.sessions.keys {
            state.sessions[handle]?.signing = nil
            state.sessions[handle]?.decrypting = nil
        }
    }

    static func closeAll(_ state: inout State) {
        state.sessions.removeAll()
        logOut(&state)
    }

    /// The objects a session sees: the token's, its private keys only while logged in, and the
    /// application's derived secrets (which exist only while logged in).
    static func visibleObjects(_ state: State, session: Session) -> [CK_OBJECT_HANDLE] {
        let token = (state.contents?.handles ?? []).filter { handle in
            state.loggedIn || state.contents?.object(handle)?.kind != .privateKey
        }
        return token + state.secrets.keys.sorted()
    }

    static func attributes(of object: CK_OBJECT_HANDLE, state: State, session: Session)
        -> [CK_ATTRIBUTE_TYPE: AttributeValue]?
    {
        if let object = state.secrets[object] { return ObjectAttributes.of(object.secret) }
        guard let (pair, kind) = state.contents?.object(object), state.loggedIn || kind != .privateKey else {
            return nil
        }
        return ObjectAttributes.of(pair, kind)
    }

    /// The key pair whose private key `handle` names, checked for `use` (and `mechanism`, when
    /// one is being set up): logged in, a private key, allowed to do it, and for signing within its
    /// certificate's validity and the credential's expiration date (the client's rule,
    /// `CredentialLifetime`).
    static func privateKey(
        _ handle: CK_OBJECT_HANDLE, for use: KeyUse, mechanism: CK_MECHANISM_TYPE?, state: State
    ) throws -> TokenKeyPair {
        guard state.loggedIn else { throw ReturnValue(CKR_USER_NOT_LOGGED_IN) }
        guard let (pair, kind) = state.contents?.object(handle) else { throw ReturnValue(CKR_KEY_HANDLE_INVALID) }
        guard kind == .privateKey else {
            throw ReturnValue(kind == .publicKey ? CKR_KEY_FUNCTION_NOT_PERMITTED : CKR_KEY_HANDLE_INVALID)
        }
        if let mechanism { try Mechanisms.check(mechanism, for: use, pair: pair) }
        guard Mechanisms.permitted(use, by: pair.permissions) else { throw ReturnValue(CKR_KEY_FUNCTION_NOT_PERMITTED) }
        // A certificate outside its validity now, or a credential past its expiration date: the key
        // no longer signs (an expired encryption key still opens old mail). Judged at every use,
        // not when the credential was read.
        let now = Date()
        let lapsed = !pair.isValid(at: now) || (state.contents.map { now > $0.expirationDate } ?? true)
        guard !(use == .sign && lapsed) else { throw ReturnValue(CKR_KEY_FUNCTION_NOT_PERMITTED) }
        return pair
    }
}

/// Blank-padded text fields, as PKCS#11 info structures carry them.
enum Text {
    /// Writes `text` into the fixed-size field, blank-padded, cut at a character boundary.
    static func pad<Field>(_ text: String, into field: inout Field) {
        withUnsafeMutableBytes(of: &field) { bytes in
            var utf8: [UInt8] = []
            for character in text {
                let encoded = Array(String(character).utf8)
                guard utf8.count + encoded.count <= bytes.count else { break }
                utf8 += encoded
            }
            for index in bytes.indices { bytes[index] = index < utf8.count ? utf8[index] : UInt8(ascii: " ") }
        }
    }
}

/// Reading the caller's buffers and answering into them by PKCS#11's conventions.
enum Buffers {
    /// The size-query convention for lists: a null `list` asks for the count; a short one gets
    /// `CKR_BUFFER_TOO_SMALL` with the count needed.
    static func deliver<T>(_ values: [T], to list: UnsafeMutablePointer<T>?, count: UnsafeMutablePointer<CK_ULONG>)
        throws
    {
        guard let list else {
            count.pointee = CK_ULONG(values.count)
            return
        }
        guard count.pointee >= CK_ULONG(values.count) else {
            count.pointee = CK_ULONG(values.count)
            throw ReturnValue(CKR_BUFFER_TOO_SMALL)
        }
        for (index, value) in values.enumerated() { list[index] = value }
        count.pointee = CK_ULONG(values.count)
    }

    /// The bytes of an input buffer; null is allowed only with length 0.
    static func input(_ pointer: UnsafeMutablePointer<UInt8>?, _ length: CK_ULONG) throws -> [UInt8] {
        guard length > 0 else { return [] }
        guard let pointer, length <= 1 << 26 else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
        return Array(UnsafeBufferPointer(start: pointer, count: Int(length)))
    }

    /// A search or creation template: its types and values.
    static func template(_ template: UnsafeMutablePointer<CK_ATTRIBUTE>?, count: CK_ULONG) throws
        -> [(CK_ATTRIBUTE_TYPE, [UInt8])]
    {
        guard count > 0 else { return [] }
        guard let template, count <= 4096 else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
        return try (0..<Int(count)).map { index in
            let entry = template[index]
            guard entry.ulValueLen == 0 || entry.pValue != nil, entry.ulValueLen <= 1 << 20 else {
                throw ReturnValue(CKR_ATTRIBUTE_VALUE_INVALID)
            }
            let bytes =
                entry.ulValueLen == 0
                ? [] : Array(UnsafeRawBufferPointer(start: entry.pValue, count: Int(entry.ulValueLen)))
            return (entry.type, bytes)
        }
    }

    /// A `CK_ULONG` attribute value; nil when the bytes are not one.
    static func number(_ bytes: [UInt8]) -> CK_ULONG? {
        guard bytes.count == MemoryLayout<CK_ULONG>.size else { return nil }
        return bytes.withUnsafeBytes { $0.loadUnaligned(as: CK_ULONG.self) }
    }
}
