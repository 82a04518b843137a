internal import CPKCS11Types
import CredentialCoding
import CredentialDelivery
import DerivedCredentials
import FoundationEssentials
import ManagedClient
import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// A `CK_RV` other than `CKR_OK`, thrown inside the module and returned at its edge.
struct ReturnValue: Error, Equatable {
    var value: CK_RV
    init(_ value: CK_RV) { self.value = value }
}

/// Where an app's token stands, as the module sees it before every call.
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
/// `C_WaitForSlotEvent`'s waiting. It has one slot per managed app (``Slot``), or only the one
/// `C_Initialize`'s `pReserved` names (`app=ID`, a p11-kit module configuration's
/// `x-init-reserved`), else `DCCLIENT_APP` in the environment of the program that loads it.
final class Module: Sendable {
    static let shared = Module()
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

    /// A secret `C_DeriveKey` made: a session object of the application on one token, visible to
    /// all its sessions with that token, destroyed with the session that made it or at logout.
    struct SessionObject {
        var owner: CK_SESSION_HANDLE
        var secret: DerivedSecret
    }

    struct State {
        var initialized = false
        /// The slots, one per managed app, in the order of their ids (slot id = place + 1): the
        /// apps set up at C_Initialize sorted by app id (or the default app's, when there is
        /// none), then those set up later, as they are found. Only the app `DCCLIENT_APP` names,
        /// when it names one.
        var slots: [Slot] = []
        /// Where later apps are looked for; nil when `DCCLIENT_APP` pinned the module to one app.
        var discovery: ManagedApps?
        /// How many threads wait in C_WaitForSlotEvent, by the initialization they began in (the
        /// count of C_Finalize calls before it): a C_Finalize waits for those of its own only.
        var waiting: [Int: Int] = [:]
        /// Session handles are the module's, not a slot's: a handle names its slot too.
        var nextSession: CK_SESSION_HANDLE = 1
        var nextSecret: CK_OBJECT_HANDLE = 0x4000_0000
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

    /// ``call(needsInitialization:_:)`` for a call on a session: `body` gets the slot the
    /// session belongs to, brought up to date (``Slot/refresh()``), and the session.
    func call(session handle: CK_SESSION_HANDLE, _ body: (inout Slot, Session) throws -> Void) -> CK_RV {
        call { state in
            let index = try Self.slotIndex(session: handle, in: state)
            let session = try state.slots[index].session(handle)
            try body(&state.slots[index], session)
        }
    }

    // MARK: - General

    func initialize(_ arguments: UnsafeMutableRawPointer?) -> CK_RV {
        call(needsInitialization: false) { state in
            var pinned: String?
            if let arguments {
                let given = arguments.loadUnaligned(as: CK_C_INITIALIZE_ARGS.self)
                // p11-kit passes a module configuration's `x-init-reserved: app=ID` here.
                if let reserved = given.pReserved { pinned = try Self.pinnedApp(reserved) }
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
            let apps = ManagedApps(locations: XDGDirectories())
            let named = pinned ?? ProcessInfo.processInfo.environment[ManagedApps.environmentVariable] ?? ""
            if !named.isEmpty {
                // Pinned to one app: its slot alone, whether or not it is set up. A name that is no
                // app id names no app: no slot.
                state.discovery = nil
                // An older version's client is moved into its container first, as for every command;
                // a move that cannot be made leaves the slot as the container is.
                state.slots =
                    ClientID(validating: named).map { [Slot(id: 1, client: (try? apps.open($0)) ?? apps.client($0))] }
                    ?? []
            } else {
                state.discovery = apps
                let listed = (try? apps.list()) ?? []
                // No app yet: the slot of the app `dcclient init` sets up when none is named.
                state.slots = (listed.isEmpty ? [ManagedApps.defaultApp] : listed).enumerated().map { index, id in
                    Slot(id: CK_SLOT_ID(index + 1), client: apps.client(id))
                }
            }
            for index in state.slots.indices { state.slots[index].reported = state.slots[index].presence() }
        }
    }

    /// The longest `pReserved` text ``pinnedApp(_:)`` reads, its NUL included: `app=` and an id.
    static let maximumReservedLength = 256

    /// The app `C_Initialize`'s `pReserved` pins the module to: a NUL-terminated `app=ID` (what a
    /// p11-kit module configuration's `x-init-reserved: app=ID` passes), read up to
    /// ``maximumReservedLength`` bytes. Any other text, or an id that is not one, is
    /// `CKR_ARGUMENTS_BAD`: a configuration that means something else must not offer every app.
    static func pinnedApp(_ reserved: UnsafeMutableRawPointer) throws -> String {
        let bytes = reserved.assumingMemoryBound(to: CChar.self)
        let length = strnlen(bytes, maximumReservedLength)
        guard length < maximumReservedLength else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
        let text = String(decoding: UnsafeRawBufferPointer(start: reserved, count: length), as: UTF8.self)
        guard text.hasPrefix("app="), let id = ClientID(validating: String(text.dropFirst(4))) else {
            throw ReturnValue(CKR_ARGUMENTS_BAD)
        }
        return id.description
    }

    /// Ends the module's use. The threads still in C_WaitForSlotEvent see it within 10 ms and
    /// return `CKR_CRYPTOKI_NOT_INITIALIZED`; C_Finalize returns only after they have, since the
    /// application may unload the library next. (The library is also linked `-z nodelete`, so an
    /// unload never unmaps code a thread is still leaving.)
    func finalize(_ reserved: UnsafeMutableRawPointer?) -> CK_RV {
        var ended = 0
        let result = call { state in
            guard reserved == nil else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            for index in state.slots.indices { state.slots[index].closeAll() }
            state.slots = []
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
            // The size query is where PKCS#11 lets the list change: apps set up since are added.
            if list == nil { Self.discover(&state) }
            var slots: [CK_SLOT_ID] = []
            for index in state.slots.indices where tokenPresent == 0 || state.slots[index].presence() != .absent {
                slots.append(state.slots[index].id)
            }
            try Buffers.deliver(slots, to: list, count: count)
        }
    }

    func slotInfo(_ slot: CK_SLOT_ID, _ info: UnsafeMutablePointer<CK_SLOT_INFO>?) -> CK_RV {
        call { state in
            let index = try Self.slotIndex(slot, in: state)
            guard let info else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            var value = CK_SLOT_INFO()
            Text.pad(
                "dcclient: the credential store of \(state.slots[index].client.app)", into: &value.slotDescription)
            Text.pad("Derived Credentials", into: &value.manufacturerID)
            value.flags = CKF_REMOVABLE_DEVICE
            if state.slots[index].presence() != .absent { value.flags |= CKF_TOKEN_PRESENT }
            value.hardwareVersion = CK_VERSION(major: 1, minor: 0)
            value.firmwareVersion = CK_VERSION(major: 1, minor: 0)
            info.pointee = value
        }
    }

    func tokenInfo(_ slot: CK_SLOT_ID, _ info: UnsafeMutablePointer<CK_TOKEN_INFO>?) -> CK_RV {
        call { state in
            let index = try Self.slotIndex(slot, in: state)
            guard let info else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            try state.slots[index].refresh(readingContents: false)
            let token = state.slots[index]
            var value = CK_TOKEN_INFO()
            Text.pad("dcclient " + (token.client.clientID?.text ?? ""), into: &value.label)
            Text.pad("Derived Credentials", into: &value.manufacturerID)
            Text.pad("derived cred", into: &value.model)
            // The delivery number of the installed credential: a renewal is a new token, as a new
            // card would be.
            Text.pad((token.watch?.sequence ?? 0).zeroPadded(width: 16), into: &value.serialNumber)
            value.flags = CKF_TOKEN_INITIALIZED | CKF_USER_PIN_INITIALIZED | CKF_RNG
            if token.watch?.tokenLogin != .secureServices { value.flags |= CKF_LOGIN_REQUIRED }
            value.ulMaxSessionCount = CK_ULONG(0)
            value.ulSessionCount = CK_ULONG(token.sessions.count)
            value.ulMaxRwSessionCount = CK_ULONG(0)
            value.ulRwSessionCount = CK_ULONG(token.sessions.values.filter(\.readWrite).count)
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
        call { state in
            _ = try Self.slotIndex(slot, in: state)
            guard let count else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            try Buffers.deliver(Mechanisms.all, to: list, count: count)
        }
    }

    func mechanismInfo(
        _ slot: CK_SLOT_ID, _ type: CK_MECHANISM_TYPE, _ info: UnsafeMutablePointer<CK_MECHANISM_INFO>?
    ) -> CK_RV {
        call { state in
            _ = try Self.slotIndex(slot, in: state)
            guard let info else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            guard let value = Mechanisms.info(type) else { throw ReturnValue(CKR_MECHANISM_INVALID) }
            info.pointee = value
        }
    }

    /// Reports a slot whose token's presence or lock changed since the last report for it (or
    /// since C_Initialize; a slot added later counts as having had no token), the lowest slot
    /// id first when several did; apps set up since are looked for and added as slots first.
    /// Blocking calls look every 200 ms, without holding the lock, and end with
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
            var happened: CK_SLOT_ID?
            let result = call { state in
                guard finalizations.load(ordering: .acquiring) == generation else {
                    throw ReturnValue(CKR_CRYPTOKI_NOT_INITIALIZED)
                }
                Self.discover(&state)
                for index in state.slots.indices {
                    let now = state.slots[index].presence()
                    if now != state.slots[index].reported {
                        state.slots[index].reported = now
                        happened = state.slots[index].id
                        return
                    }
                }
            }
            if result != CKR_OK { return result }
            if let happened {
                slot.pointee = happened
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
            let index = try Self.slotIndex(slot, in: state)
            guard flags & CKF_SERIAL_SESSION != 0 else { throw ReturnValue(CKR_SESSION_PARALLEL_NOT_SUPPORTED) }
            guard let handle else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            guard state.slots[index].presence() != .absent else { throw ReturnValue(CKR_TOKEN_NOT_PRESENT) }
            let session = state.nextSession
            state.nextSession += 1
            state.slots[index].sessions[session] = Session(readWrite: flags & CKF_RW_SESSION != 0)
            handle.pointee = session
        }
    }

    func closeSession(_ handle: CK_SESSION_HANDLE) -> CK_RV {
        call { state in
            let index = try Self.slotIndex(session: handle, in: state)
            state.slots[index].sessions[handle] = nil
            state.slots[index].secrets = state.slots[index].secrets.filter { $0.value.owner != handle }
            // Closing the last session of a slot logs the application out of its token.
            if state.slots[index].sessions.isEmpty { state.slots[index].logOut() }
        }
    }

    func closeAllSessions(_ slot: CK_SLOT_ID) -> CK_RV {
        call { state in
            let index = try Self.slotIndex(slot, in: state)
            state.slots[index].closeAll()
        }
    }

    func sessionInfo(_ handle: CK_SESSION_HANDLE, _ info: UnsafeMutablePointer<CK_SESSION_INFO>?) -> CK_RV {
        call(session: handle) { slot, session in
            guard let info else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            let user = slot.loggedIn
            let sessionState: CK_STATE =
                session.readWrite
                ? (user ? CKS_RW_USER_FUNCTIONS : CKS_RW_PUBLIC_SESSION)
                : (user ? CKS_RO_USER_FUNCTIONS : CKS_RO_PUBLIC_SESSION)
            info.pointee = CK_SESSION_INFO(
                slotID: slot.id, state: sessionState,
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
        call(session: handle) { slot, _ in
            switch user {
            case CKU_USER: break
            case CKU_CONTEXT_SPECIFIC: throw ReturnValue(CKR_OPERATION_NOT_INITIALIZED)
            default: throw ReturnValue(CKR_USER_TYPE_INVALID)
            }
            guard !slot.loggedIn else { throw ReturnValue(CKR_USER_ALREADY_LOGGED_IN) }
            guard let pin else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            guard (1...CK_ULONG(Self.maximumPINLength)).contains(length) else { throw ReturnValue(CKR_PIN_LEN_RANGE) }
            let passphrase = SecretBytes(UnsafeBufferPointer(start: pin, count: Int(length)))
            do {
                try slot.client.unlock(passphrase: passphrase)
            } catch DCError.Code.wrongPassphrase {
                throw ReturnValue(CKR_PIN_INCORRECT)
            } catch DCError.Code.notAuthorized {
                slot.closeAll()
                throw ReturnValue(CKR_DEVICE_REMOVED)
            }
            slot.loggedIn = true
            do {
                try slot.refresh()
            } catch {
                slot.logOut()
                throw error
            }
        }
    }

    func logout(_ handle: CK_SESSION_HANDLE) -> CK_RV {
        call(session: handle) { slot, _ in
            guard slot.loggedIn else { throw ReturnValue(CKR_USER_NOT_LOGGED_IN) }
            slot.logOut()
        }
    }

    // MARK: - Objects

    func findObjectsInit(
        _ handle: CK_SESSION_HANDLE, _ template: UnsafeMutablePointer<CK_ATTRIBUTE>?, _ count: CK_ULONG
    )
        -> CK_RV
    {
        call(session: handle) { slot, session in
            guard session.found == nil else { throw ReturnValue(CKR_OPERATION_ACTIVE) }
            let wanted = try Buffers.template(template, count: count)
            var found: [CK_OBJECT_HANDLE] = []
            for object in slot.visibleObjects() {
                let attributes = slot.attributes(of: object) ?? [:]
                let matches = wanted.allSatisfy { type, value in attributes[type]?.encoded == value }
                if matches { found.append(object) }
            }
            slot.sessions[handle]?.found = found
        }
    }

    func findObjects(
        _ handle: CK_SESSION_HANDLE, _ objects: UnsafeMutablePointer<CK_OBJECT_HANDLE>?, _ maximum: CK_ULONG,
        _ count: UnsafeMutablePointer<CK_ULONG>?
    ) -> CK_RV {
        call(session: handle) { slot, session in
            guard let found = session.found else { throw ReturnValue(CKR_OPERATION_NOT_INITIALIZED) }
            guard let count, objects != nil || maximum == 0 else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            let taken = Array(found.prefix(Int(min(maximum, CK_ULONG(Int.max)))))
            for (index, object) in taken.enumerated() { objects?[index] = object }
            count.pointee = CK_ULONG(taken.count)
            slot.sessions[handle]?.found = Array(found.dropFirst(taken.count))
        }
    }

    func findObjectsFinal(_ handle: CK_SESSION_HANDLE) -> CK_RV {
        call(session: handle) { slot, session in
            guard session.found != nil else { throw ReturnValue(CKR_OPERATION_NOT_INITIALIZED) }
            slot.sessions[handle]?.found = nil
        }
    }

    /// PKCS#11's rules for reading attributes: every attribute of the template is answered; a
    /// sensitive or unknown one, or one whose buffer is too short, gets the length
    /// `unavailableInformation`, and the call returns the matching error after answering the rest.
    func attributeValue(
        _ handle: CK_SESSION_HANDLE, _ object: CK_OBJECT_HANDLE, _ template: UnsafeMutablePointer<CK_ATTRIBUTE>?,
        _ count: CK_ULONG
    ) -> CK_RV {
        call(session: handle) { slot, session in
            guard let attributes = slot.attributes(of: object) else {
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
        call(session: handle) { slot, session in
            if slot.secrets.removeValue(forKey: object) != nil { return }
            guard slot.attributes(of: object) != nil else {
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
        call(session: handle) { slot, session in
            guard let mechanism else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            guard session.signing == nil else { throw ReturnValue(CKR_OPERATION_ACTIVE) }
            let pair = try slot.privateKey(key, for: .sign, mechanism: mechanism.pointee.mechanism)
            let keyBytes: Int
            if case .rsa(let bits) = pair.publicParts.kind { keyBytes = (bits + 7) / 8 } else { keyBytes = 0 }
            let scheme = try Mechanisms.signatureScheme(mechanism.pointee, keyBytes: keyBytes)
            slot.sessions[handle]?.signing = Signing(
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
            let index = try Self.slotIndex(session: handle, in: state)
            // Read in a scope of its own, so that no copy of the collected bytes outlives it and
            // the append below grows them in place.
            let hashes: Bool
            let collected: Int
            do {
                guard let signing = try state.slots[index].session(handle).signing else {
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
                if state.slots[index].sessions[handle]?.signing?.parts == nil {
                    state.slots[index].sessions[handle]?.signing?.parts = []
                }
                state.slots[index].sessions[handle]?.signing?.parts?.append(contentsOf: bytes)
            } catch {
                state.slots[index].sessions[handle]?.signing = nil
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
        call(session: handle) { slot, session in
            guard let signing = session.signing else { throw ReturnValue(CKR_OPERATION_NOT_INITIALIZED) }
            var ended = true
            defer { if ended { slot.sessions[handle]?.signing = nil } }
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
            let pair = try slot.privateKey(signing.key, for: .sign, mechanism: nil)
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
        call(session: handle) { slot, session in
            guard let mechanism else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            guard session.decrypting == nil else { throw ReturnValue(CKR_OPERATION_ACTIVE) }
            let pair = try slot.privateKey(key, for: .decrypt, mechanism: mechanism.pointee.mechanism)
            let padding = try Mechanisms.decryptionPadding(mechanism.pointee)
            slot.sessions[handle]?.decrypting = Decrypting(
                key: key, padding: padding, length: pair.key?.signatureLength ?? 0)
        }
    }

    func decrypt(
        _ handle: CK_SESSION_HANDLE, _ encrypted: UnsafeMutablePointer<UInt8>?, _ encryptedLength: CK_ULONG,
        _ data: UnsafeMutablePointer<UInt8>?, _ dataLength: UnsafeMutablePointer<CK_ULONG>?
    ) -> CK_RV {
        call(session: handle) { slot, session in
            guard let decrypting = session.decrypting else { throw ReturnValue(CKR_OPERATION_NOT_INITIALIZED) }
            var ended = true
            defer { if ended { slot.sessions[handle]?.decrypting = nil } }
            guard let dataLength else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            let input = try Buffers.input(encrypted, encryptedLength)
            guard input.count == decrypting.length else { throw ReturnValue(CKR_ENCRYPTED_DATA_LEN_RANGE) }
            guard let data else {
                dataLength.pointee = CK_ULONG(decrypting.length)
                ended = false
                return
            }
            let pair = try slot.privateKey(decrypting.key, for: .decrypt, mechanism: nil)
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
            let index = try Self.slotIndex(session: handle, in: state)
            _ = try state.slots[index].session(handle)
            guard let mechanism, let made else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            let pair = try state.slots[index].privateKey(base, for: .derive, mechanism: mechanism.pointee.mechanism)
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
            // Handles of derived secrets are the module's, so one never names another slot's.
            let object = state.nextSecret
            state.nextSecret += 1
            state.slots[index].secrets[object] = SessionObject(owner: handle, secret: secret)
            made.pointee = object
        }
    }

    // MARK: - Random numbers

    func generateRandom(_ handle: CK_SESSION_HANDLE, _ output: UnsafeMutablePointer<UInt8>?, _ length: CK_ULONG)
        -> CK_RV
    {
        call(session: handle) { slot, _ in
            guard length == 0 || output != nil, length <= 1 << 20 else { throw ReturnValue(CKR_ARGUMENTS_BAD) }
            guard length > 0, let output else { return }
            let random = try Digests.random(Int(length))
            random.withUnsafeBytes {
                UnsafeMutableRawBufferPointer(start: output, count: $0.count).copyMemory(from: $0)
            }
        }
    }

    func seedRandom(_ handle: CK_SESSION_HANDLE) -> CK_RV {
        call(session: handle) { slot, _ in
            throw ReturnValue(CKR_RANDOM_SEED_NOT_SUPPORTED)
        }
    }

    /// What every function the token does not offer answers: `CKR_FUNCTION_NOT_SUPPORTED`, after
    /// the checks every call makes.
    func notSupported() -> CK_RV {
        call { _ in throw ReturnValue(CKR_FUNCTION_NOT_SUPPORTED) }
    }

    // MARK: - Inside

    /// Looks for apps set up since the last look and gives each a slot, after the others (their
    /// ids are fixed for the initialization). Nothing is looked for when `DCCLIENT_APP` pinned one.
    static func discover(_ state: inout State) {
        guard let apps = state.discovery else { return }
        let known = Set(state.slots.map(\.client.app))
        for id in (try? apps.list()) ?? [] where !known.contains(id) {
            state.slots.append(Slot(id: CK_SLOT_ID(state.slots.count + 1), client: apps.client(id)))
        }
    }

    /// The place in ``State/slots`` of the slot `id`; `CKR_SLOT_ID_INVALID` when there is none.
    static func slotIndex(_ id: CK_SLOT_ID, in state: State) throws -> Int {
        guard id >= 1, id <= CK_SLOT_ID(state.slots.count) else { throw ReturnValue(CKR_SLOT_ID_INVALID) }
        return Int(id - 1)
    }

    /// The place in ``State/slots`` of the slot the session `handle` belongs to.
    static func slotIndex(session handle: CK_SESSION_HANDLE, in state: State) throws -> Int {
        guard let index = state.slots.firstIndex(where: { $0.sessions[handle] != nil }) else {
            throw ReturnValue(CKR_SESSION_HANDLE_INVALID)
        }
        return index
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
