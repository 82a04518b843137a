// A PKCS#11 consumer for the module's tests: it loads a module with dlopen, as every consumer
// does, and runs the steps its arguments name in one process, so that a test can change the
// client between two calls of one session (lock it, unauthorize it) and see what the next call
// returns. It prints one line per step: `step<TAB>value`, where the value is a CKR_ name, a count or
// a hex string. It is a test program: it never prints a key.
//
//   PKCS11Probe MODULE STEP...
//
// Steps: init, init-reserved:TEXT (pReserved the C string TEXT), init-bad-locking, finalize,
// slot-count (every slot), token-label (the current slot's), open, close, login:PIN, logout, count-objects, sign:ID
// (32 bytes with the key whose CKA_ID is the hex ID, CKM_ECDSA or CKM_RSA_PKCS by key type),
// sign-again (the same key handle again), session-state,
// slots-present, wait-nonblock, wait-block, event (a blocking C_WaitForSlotEvent that prints the
// slot too), slot:N (the steps after it use slot N, with that slot's own session and key; slot 1
// until one is named), pause:READY:GO (creates READY, waits for GO),
// derive:ID (ECDH into a session secret), read-derived (its value's and label's lengths),
// finalize-while-waiting (C_Finalize while another thread waits for a slot event, five times), and
// conformance (a battery of bad-argument calls, one line each: `conformance.NAME value`).
import CP11Kit
import Foundation

nonisolated(unsafe) let names: [CK_RV: String] = [
    0x00: "CKR_OK", 0x03: "CKR_SLOT_ID_INVALID", 0x05: "CKR_GENERAL_ERROR", 0x06: "CKR_FUNCTION_FAILED",
    0x07: "CKR_ARGUMENTS_BAD", 0x08: "CKR_NO_EVENT", 0x0A: "CKR_CANT_LOCK", 0x11: "CKR_ATTRIBUTE_SENSITIVE",
    0x12: "CKR_ATTRIBUTE_TYPE_INVALID", 0x1B: "CKR_ACTION_PROHIBITED", 0x21: "CKR_DATA_LEN_RANGE",
    0x32: "CKR_DEVICE_REMOVED", 0x40: "CKR_ENCRYPTED_DATA_INVALID", 0x41: "CKR_ENCRYPTED_DATA_LEN_RANGE",
    0x54: "CKR_FUNCTION_NOT_SUPPORTED", 0x60: "CKR_KEY_HANDLE_INVALID", 0x63: "CKR_KEY_TYPE_INCONSISTENT",
    0x68: "CKR_KEY_FUNCTION_NOT_PERMITTED", 0x70: "CKR_MECHANISM_INVALID", 0x71: "CKR_MECHANISM_PARAM_INVALID",
    0x82: "CKR_OBJECT_HANDLE_INVALID", 0x90: "CKR_OPERATION_ACTIVE", 0x91: "CKR_OPERATION_NOT_INITIALIZED",
    0xA0: "CKR_PIN_INCORRECT", 0xA2: "CKR_PIN_LEN_RANGE", 0xB3: "CKR_SESSION_HANDLE_INVALID",
    0xB4: "CKR_SESSION_PARALLEL_NOT_SUPPORTED", 0xD1: "CKR_TEMPLATE_INCONSISTENT", 0xE0: "CKR_TOKEN_NOT_PRESENT",
    0x100: "CKR_USER_ALREADY_LOGGED_IN", 0x101: "CKR_USER_NOT_LOGGED_IN", 0x103: "CKR_USER_TYPE_INVALID",
    0x120: "CKR_RANDOM_SEED_NOT_SUPPORTED", 0x150: "CKR_BUFFER_TOO_SMALL", 0x190: "CKR_CRYPTOKI_NOT_INITIALIZED",
    0x191: "CKR_CRYPTOKI_ALREADY_INITIALIZED",
]
func name(_ value: CK_RV) -> String { names[value] ?? String(format: "CKR_0x%lX", value) }
func say(_ step: String, _ value: String) {
    print(step + "\t" + value)
    fflush(nil)
}

let arguments = CommandLine.arguments
/// The module's function table.
nonisolated(unsafe) let p11: CK_FUNCTION_LIST = {
    guard arguments.count >= 2, let library = dlopen(arguments[1], RTLD_NOW | RTLD_LOCAL),
        let symbol = dlsym(library, "C_GetFunctionList")
    else {
        FileHandle.standardError.write(Data("PKCS11Probe: cannot load \(arguments.dropFirst().first ?? "")\n".utf8))
        exit(2)
    }
    typealias GetFunctionList = @convention(c) (UnsafeMutablePointer<UnsafeMutablePointer<CK_FUNCTION_LIST>?>?) -> CK_RV
    let getFunctionList = unsafeBitCast(symbol, to: GetFunctionList.self)
    var listPointer: UnsafeMutablePointer<CK_FUNCTION_LIST>?
    guard getFunctionList(&listPointer) == CKR_OK, let list = listPointer?.pointee else { exit(2) }
    return list
}()

nonisolated(unsafe) var session: CK_SESSION_HANDLE = 0
nonisolated(unsafe) var remembered: CK_OBJECT_HANDLE = 0
nonisolated(unsafe) var rememberedType: CK_KEY_TYPE?
nonisolated(unsafe) var derived: CK_OBJECT_HANDLE = 0
/// The slot the steps use; the session and key of every other slot wait here (`slot:N`).
nonisolated(unsafe) var currentSlot: CK_SLOT_ID = 1
nonisolated(unsafe) var parked: [CK_SLOT_ID: (CK_SESSION_HANDLE, CK_OBJECT_HANDLE, CK_KEY_TYPE?)] = [:]

/// What another thread's call returned, once it has.
final class Returned: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: CK_RV?
    var value: CK_RV? { lock.withLock { stored } }
    func set(_ value: CK_RV) { lock.withLock { stored = value } }
}

/// The handles of objects of `objectClass`, with CKA_ID `id` when given.
func find(_ objectClass: CK_OBJECT_CLASS, id: [UInt8]? = nil) -> [CK_OBJECT_HANDLE] {
    var classValue = objectClass
    var idValue = id ?? []
    let found: [CK_OBJECT_HANDLE] = withUnsafeMutableBytes(of: &classValue) { classBytes in
        idValue.withUnsafeMutableBytes { idBytes in
            var template = [
                CK_ATTRIBUTE(type: CKA_CLASS, pValue: classBytes.baseAddress, ulValueLen: CK_ULONG(classBytes.count))
            ]
            if id != nil {
                template.append(
                    CK_ATTRIBUTE(type: CKA_ID, pValue: idBytes.baseAddress, ulValueLen: CK_ULONG(idBytes.count)))
            }
            guard p11.C_FindObjectsInit(session, &template, CK_ULONG(template.count)) == CKR_OK else { return [] }
            var handles = [CK_OBJECT_HANDLE](repeating: 0, count: 64)
            var count: CK_ULONG = 0
            _ = p11.C_FindObjects(session, &handles, 64, &count)
            _ = p11.C_FindObjectsFinal(session)
            return Array(handles.prefix(Int(count)))
        }
    }
    return found
}

func keyType(_ key: CK_OBJECT_HANDLE) -> CK_KEY_TYPE? {
    var value: CK_KEY_TYPE = 0
    let rv = withUnsafeMutableBytes(of: &value) { bytes in
        var template = [CK_ATTRIBUTE(type: CKA_KEY_TYPE, pValue: bytes.baseAddress, ulValueLen: CK_ULONG(bytes.count))]
        return p11.C_GetAttributeValue(session, key, &template, 1)
    }
    return rv == CKR_OK ? value : nil
}

/// Signs 32 bytes with `key`: the first call into the module is C_SignInit (the key's type was
/// read when the key was found).
func signResult(_ key: CK_OBJECT_HANDLE, type: CK_KEY_TYPE?) -> CK_RV {
    var mechanism = CK_MECHANISM(
        mechanism: type == CKK_RSA ? CKM_RSA_PKCS : CKM_ECDSA, pParameter: nil, ulParameterLen: 0)
    var rv = p11.C_SignInit(session, &mechanism, key)
    guard rv == CKR_OK else { return rv }
    var data = [UInt8](repeating: 0x5A, count: 32)
    var signature = [UInt8](repeating: 0, count: 1024)
    var length = CK_ULONG(signature.count)
    rv = p11.C_Sign(session, &data, CK_ULONG(data.count), &signature, &length)
    return rv
}

func hex(_ text: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var index = text.startIndex
    while index < text.endIndex, let next = text.index(index, offsetBy: 2, limitedBy: text.endIndex) {
        bytes.append(UInt8(text[index..<next], radix: 16) ?? 0)
        index = next
    }
    return bytes
}

/// Bad arguments and conventions, each answered as PKCS#11 says (the module is initialized,
/// `session` is open and logged in, the token holds a credential whose signing key has CKA_ID 02
/// and encryption key CKA_ID 03).
func conformance() {
    func check(_ label: String, _ value: CK_RV) { say("conformance." + label, name(value)) }
    check("GetFunctionList(null)", p11.C_GetFunctionList(nil))
    check("Initialize(again)", p11.C_Initialize(nil))
    check("GetInfo(null)", p11.C_GetInfo(nil))
    check("GetSlotList(null count)", p11.C_GetSlotList(0, nil, nil))
    var slots = [CK_SLOT_ID](repeating: 0, count: 4)
    var count: CK_ULONG = 0
    let small = p11.C_GetSlotList(0, &slots, &count)
    say("conformance.GetSlotList(short)", "\(name(small)) \(count)")
    check("GetSlotInfo(bad slot)", p11.C_GetSlotInfo(99, nil))
    check("GetTokenInfo(null)", p11.C_GetTokenInfo(1, nil))
    var other: CK_SESSION_HANDLE = 0
    check("OpenSession(not serial)", p11.C_OpenSession(1, 0, nil, nil, &other))
    check("OpenSession(null handle)", p11.C_OpenSession(1, CKF_SERIAL_SESSION, nil, nil, nil))
    check("CloseSession(unknown)", p11.C_CloseSession(0xDEAD))
    check("Login(again)", p11.C_Login(session, CKU_USER, nil, 0))
    check("Login(SO)", p11.C_Login(session, CKU_SO, nil, 0))
    check("Logout(unknown session)", p11.C_Logout(0xDEAD))
    check("FindObjects(not initialized)", p11.C_FindObjects(session, nil, 0, &count))
    check("FindObjectsInit(null template)", p11.C_FindObjectsInit(session, nil, 3))
    check("Sign(not initialized)", p11.C_Sign(session, nil, 0, nil, &count))

    let signing = find(CKO_PRIVATE_KEY, id: [0x02]).first ?? 0
    let encryption = find(CKO_PRIVATE_KEY, id: [0x03]).first ?? 0
    let certificate = find(CKO_CERTIFICATE, id: [0x02]).first ?? 0
    let publicKey = find(CKO_PUBLIC_KEY, id: [0x02]).first ?? 0
    var ecdsa = CK_MECHANISM(mechanism: CKM_ECDSA, pParameter: nil, ulParameterLen: 0)
    var rsa = CK_MECHANISM(mechanism: CKM_RSA_PKCS, pParameter: nil, ulParameterLen: 0)
    var bogus = CK_MECHANISM(mechanism: CKM_ECDSA, pParameter: &count, ulParameterLen: 8)
    var unknown = CK_MECHANISM(mechanism: 0x7FFF_FFFF, pParameter: nil, ulParameterLen: 0)
    check("SignInit(null mechanism)", p11.C_SignInit(session, nil, signing))
    check("SignInit(unknown key)", p11.C_SignInit(session, &ecdsa, 0xBEEF))
    check("SignInit(certificate)", p11.C_SignInit(session, &ecdsa, certificate))
    check("SignInit(public key)", p11.C_SignInit(session, &ecdsa, publicKey))
    check("SignInit(encryption key)", p11.C_SignInit(session, &ecdsa, encryption))
    check("SignInit(RSA mechanism, EC key)", p11.C_SignInit(session, &rsa, signing))
    check("SignInit(unknown mechanism)", p11.C_SignInit(session, &unknown, signing))
    check("SignInit(parameter where none belongs)", p11.C_SignInit(session, &bogus, signing))
    check("DecryptInit(signing key)", p11.C_DecryptInit(session, &rsa, signing))
    check("SignInit", p11.C_SignInit(session, &ecdsa, signing))
    check("SignInit(active)", p11.C_SignInit(session, &ecdsa, signing))
    var data = [UInt8](repeating: 1, count: 32)
    var length: CK_ULONG = 0
    let query = p11.C_Sign(session, &data, 32, nil, &length)
    say("conformance.Sign(size query)", "\(name(query)) \(length)")
    var signature = [UInt8](repeating: 0, count: 128)
    length = 10
    let short = p11.C_Sign(session, &data, 32, &signature, &length)
    say("conformance.Sign(short buffer)", "\(name(short)) \(length)")
    length = 128
    let signed = p11.C_Sign(session, &data, 32, &signature, &length)
    say("conformance.Sign", "\(name(signed)) \(length)")
    check("Sign(after the end)", p11.C_Sign(session, &data, 32, &signature, &length))
    // Multi-part signing: only for the hashing mechanisms, ended by C_SignFinal, never by C_Sign.
    check("SignInit(raw ECDSA)", p11.C_SignInit(session, &ecdsa, signing))
    check("SignUpdate(raw ECDSA)", p11.C_SignUpdate(session, &data, 32))
    check("Sign(raw ECDSA, after a refused update)", p11.C_Sign(session, &data, 32, &signature, &length))
    var hashing = CK_MECHANISM(mechanism: CKM_ECDSA_SHA256, pParameter: nil, ulParameterLen: 0)
    check("SignInit(ECDSA_SHA256)", p11.C_SignInit(session, &hashing, signing))
    check("SignUpdate(ECDSA_SHA256)", p11.C_SignUpdate(session, &data, 32))
    length = 128
    check("Sign(after SignUpdate)", p11.C_Sign(session, &data, 32, &signature, &length))
    check("SignInit(ECDSA_SHA256, again)", p11.C_SignInit(session, &hashing, signing))
    _ = p11.C_SignUpdate(session, &data, 16)
    _ = p11.C_SignUpdate(session, &data, 16)
    length = 128
    let final = p11.C_SignFinal(session, &signature, &length)
    say("conformance.SignFinal(two parts)", "\(name(final)) \(length)")
    check("SignInit(ECDSA_SHA256, no parts)", p11.C_SignInit(session, &hashing, signing))
    length = 128
    let empty = p11.C_SignFinal(session, &signature, &length)
    say("conformance.SignFinal(no parts)", "\(name(empty)) \(length)")

    // Attributes: a sensitive one, an unknown one and a short buffer, in one call; the rest answered.
    var value = [UInt8](repeating: 0, count: 64)
    var label = [UInt8](repeating: 0, count: 2)
    var sensitive = 1 as CK_BBOOL
    let attributes = value.withUnsafeMutableBytes { valueBytes in
        label.withUnsafeMutableBytes { labelBytes in
            withUnsafeMutableBytes(of: &sensitive) { sensitiveBytes -> (CK_RV, [CK_ULONG]) in
                var template = [
                    CK_ATTRIBUTE(type: CKA_VALUE, pValue: valueBytes.baseAddress, ulValueLen: 64),
                    CK_ATTRIBUTE(type: 0x7FFF_0000, pValue: valueBytes.baseAddress, ulValueLen: 64),
                    CK_ATTRIBUTE(type: CKA_LABEL, pValue: labelBytes.baseAddress, ulValueLen: 2),
                    CK_ATTRIBUTE(type: CKA_SENSITIVE, pValue: sensitiveBytes.baseAddress, ulValueLen: 1),
                ]
                let rv = p11.C_GetAttributeValue(session, signing, &template, 4)
                return (rv, template.map(\.ulValueLen))
            }
        }
    }
    let lengths = attributes.1.map { $0 == CK_ULONG.max ? "unavailable" : String($0) }.joined(separator: ",")
    say("conformance.GetAttributeValue(mixed)", "\(name(attributes.0)) \(lengths) sensitive=\(sensitive)")
    check("GetAttributeValue(unknown object)", p11.C_GetAttributeValue(session, 0xBEEF, nil, 0))
    check("DestroyObject(token object)", p11.C_DestroyObject(session, certificate))
    check("GenerateRandom(null)", p11.C_GenerateRandom(session, nil, 16))
    check("SeedRandom", p11.C_SeedRandom(session, &data, 4))
    var event: CK_SLOT_ID = 0
    check("WaitForSlotEvent(null slot)", p11.C_WaitForSlotEvent(CKF_DONT_BLOCK, nil, nil))
    check("WaitForSlotEvent(reserved)", p11.C_WaitForSlotEvent(CKF_DONT_BLOCK, &event, &data))
    check("Finalize(reserved)", p11.C_Finalize(&data))
}

for step in arguments.dropFirst(2) {
    let parts = step.split(separator: ":", maxSplits: 2).map(String.init)
    switch parts[0] {
    case "init-bad-locking":
        var arguments = CK_C_INITIALIZE_ARGS()
        arguments.CreateMutex = { _ in CKR_OK }
        arguments.DestroyMutex = { _ in CKR_OK }
        arguments.LockMutex = { _ in CKR_OK }
        arguments.UnlockMutex = { _ in CKR_OK }
        say(step, name(p11.C_Initialize(&arguments)))
    case "init":
        var arguments = CK_C_INITIALIZE_ARGS()
        arguments.flags = CKF_OS_LOCKING_OK
        say(step, name(p11.C_Initialize(&arguments)))
    case "init-reserved":
        // pReserved as p11-kit passes a module configuration's x-init-reserved: a C string.
        var arguments = CK_C_INITIALIZE_ARGS()
        arguments.flags = CKF_OS_LOCKING_OK
        let text = parts.dropFirst().joined(separator: ":")
        let rv = text.withCString { reserved in
            arguments.pReserved = UnsafeMutableRawPointer(mutating: reserved)
            return p11.C_Initialize(&arguments)
        }
        say(parts[0], name(rv))
    case "slot-count":
        var count: CK_ULONG = 0
        let rv = p11.C_GetSlotList(0, nil, &count)
        say(step, rv == CKR_OK ? String(count) : name(rv))
    case "token-label":
        var info = CK_TOKEN_INFO()
        let rv = p11.C_GetTokenInfo(currentSlot, &info)
        let label = withUnsafeBytes(of: info.label) { String(decoding: $0, as: UTF8.self) }
        say(step, rv == CKR_OK ? label.trimmingCharacters(in: .whitespaces) : name(rv))
    case "finalize": say(step, name(p11.C_Finalize(nil)))
    case "open": say(step, name(p11.C_OpenSession(currentSlot, CKF_SERIAL_SESSION, nil, nil, &session)))
    case "slot":
        parked[currentSlot] = (session, remembered, rememberedType)
        currentSlot = CK_SLOT_ID(parts.count > 1 ? parts[1] : "") ?? 0
        (session, remembered, rememberedType) = parked[currentSlot] ?? (0, 0, nil)
        say("slot", String(currentSlot))
    case "close": say(step, name(p11.C_CloseSession(session)))
    case "login":
        var pin = Array((parts.count > 1 ? parts[1] : "").utf8)
        say("login", name(p11.C_Login(session, CKU_USER, &pin, CK_ULONG(pin.count))))
    case "logout": say(step, name(p11.C_Logout(session)))
    case "count-objects":
        let all = [CKO_CERTIFICATE, CKO_PUBLIC_KEY, CKO_PRIVATE_KEY].map { find($0).count }
        say(step, all.map(String.init).joined(separator: ","))
    case "sign":
        let keys = find(CKO_PRIVATE_KEY, id: hex(parts.count > 1 ? parts[1] : ""))
        remembered = keys.first ?? 0
        rememberedType = keys.first.flatMap(keyType)
        say(step, keys.isEmpty ? "no-key" : name(signResult(remembered, type: rememberedType)))
    case "sign-again":
        // The key the last sign:ID step found, used again after the client changed.
        say(step, name(signResult(remembered, type: rememberedType)))
    case "session-state":
        var info = CK_SESSION_INFO()
        let rv = p11.C_GetSessionInfo(session, &info)
        say(step, rv == CKR_OK ? "state=\(info.state)" : name(rv))
    case "slots-present":
        var count: CK_ULONG = 0
        let rv = p11.C_GetSlotList(1, nil, &count)
        say(step, rv == CKR_OK ? String(count) : name(rv))
    case "wait-nonblock":
        var slot: CK_SLOT_ID = 0
        say(step, name(p11.C_WaitForSlotEvent(CKF_DONT_BLOCK, &slot, nil)))
    case "wait-block":
        var slot: CK_SLOT_ID = 0
        say(step, name(p11.C_WaitForSlotEvent(0, &slot, nil)))
    case "event":
        var slot: CK_SLOT_ID = 0
        let rv = p11.C_WaitForSlotEvent(0, &slot, nil)
        say(step, rv == CKR_OK ? "slot \(slot)" : name(rv))
    case "pause":
        FileManager.default.createFile(atPath: parts[1], contents: Data())
        for _ in 0..<2400 where !FileManager.default.fileExists(atPath: parts[2]) { usleep(50_000) }
        say("pause", FileManager.default.fileExists(atPath: parts[2]) ? "resumed" : "timed-out")
    case "conformance": conformance()
    case "derive":
        // ECDH with the key whose CKA_ID is the hex ID and P-256's generator as the peer's point,
        // into a secret with no label.
        let key = find(CKO_PRIVATE_KEY, id: hex(parts.count > 1 ? parts[1] : "")).first ?? 0
        var point = hex(
            "046B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296"
                + "4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5")
        var secretClass = CKO_SECRET_KEY
        var secretType = CKK_GENERIC_SECRET
        var no: CK_BBOOL = 0
        var yes: CK_BBOOL = 1
        let rv = point.withUnsafeMutableBytes { pointBytes in
            var parameters = CK_ECDH1_DERIVE_PARAMS(
                kdf: CKD_NULL, ulSharedDataLen: 0, pSharedData: nil,
                ulPublicDataLen: CK_ULONG(pointBytes.count),
                pPublicData: pointBytes.baseAddress?.assumingMemoryBound(to: UInt8.self))
            return withUnsafeMutableBytes(of: &parameters) { parameterBytes in
                var mechanism = CK_MECHANISM(
                    mechanism: CKM_ECDH1_DERIVE, pParameter: parameterBytes.baseAddress,
                    ulParameterLen: CK_ULONG(parameterBytes.count))
                var template = [
                    CK_ATTRIBUTE(
                        type: CKA_CLASS, pValue: &secretClass, ulValueLen: CK_ULONG(MemoryLayout<CK_ULONG>.size)),
                    CK_ATTRIBUTE(
                        type: CKA_KEY_TYPE, pValue: &secretType, ulValueLen: CK_ULONG(MemoryLayout<CK_ULONG>.size)),
                    CK_ATTRIBUTE(type: CKA_TOKEN, pValue: &no, ulValueLen: 1),
                    CK_ATTRIBUTE(type: CKA_SENSITIVE, pValue: &no, ulValueLen: 1),
                    CK_ATTRIBUTE(type: CKA_EXTRACTABLE, pValue: &yes, ulValueLen: 1),
                ]
                return p11.C_DeriveKey(session, &mechanism, key, &template, CK_ULONG(template.count), &derived)
            }
        }
        say(step, name(rv))
    case "read-derived":
        // The derived secret's value and (empty) label, each into a buffer: their lengths.
        var value = [UInt8](repeating: 0, count: 64)
        var label = [UInt8](repeating: 0, count: 16)
        let (rv, lengths) = value.withUnsafeMutableBytes { valueBytes in
            label.withUnsafeMutableBytes { labelBytes in
                var template = [
                    CK_ATTRIBUTE(type: CKA_VALUE, pValue: valueBytes.baseAddress, ulValueLen: 64),
                    CK_ATTRIBUTE(type: CKA_LABEL, pValue: labelBytes.baseAddress, ulValueLen: 16),
                ]
                let rv = p11.C_GetAttributeValue(session, derived, &template, 2)
                return (rv, template.map { String($0.ulValueLen) })
            }
        }
        say(step, rv == CKR_OK ? "\(name(rv)) \(lengths.joined(separator: ","))" : name(rv))
    case "finalize-while-waiting":
        // Five rounds of: a thread blocks in C_WaitForSlotEvent, this one calls C_Finalize. The
        // waiter must have left the module by the time C_Finalize returns (the application may
        // unload the module then): `left` counts the rounds where it had.
        var left = 0
        var results: [String] = []
        for _ in 0..<5 {
            var arguments = CK_C_INITIALIZE_ARGS()
            arguments.flags = CKF_OS_LOCKING_OK
            _ = p11.C_Initialize(&arguments)
            let returned = Returned()
            let waiter = Thread {
                var slot: CK_SLOT_ID = 0
                returned.set(p11.C_WaitForSlotEvent(0, &slot, nil))
            }
            waiter.start()
            usleep(100_000)
            results.append(name(p11.C_Finalize(nil)))
            // The waiter's store after its call returned, not the module's work: 2 ms is plenty.
            for _ in 0..<20 where returned.value == nil { usleep(100) }
            if returned.value == CKR_CRYPTOKI_NOT_INITIALIZED { left += 1 }
            while returned.value == nil { usleep(1_000) }
        }
        say(step, "\(Set(results).sorted().joined(separator: ",")) left=\(left)/5")
    default:
        say(step, "unknown-step")
    }
}
