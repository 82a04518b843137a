internal import CP11Kit
import DerivedCredentials
import Foundation

/// A failed PKCS#11 call: the function and its `CKR_` value (as Rust `cryptoki` keeps them).
public struct PKCS11Error: Error, Sendable, CustomStringConvertible {
    /// The PKCS#11 function that failed, such as `C_Login`.
    public var function: String
    /// The `CK_RV` it returned, such as 0xA0 (`CKR_PIN_INCORRECT`).
    public var returnValue: UInt

    /// `C_Login returned CKR_PIN_INCORRECT`; unknown values as `CKR_0x…`.
    public var description: String { "\(function) returned \(Self.name(returnValue))" }

    static func name(_ value: UInt) -> String {
        let names: [UInt: String] = [
            0x00: "CKR_OK", 0x03: "CKR_SLOT_ID_INVALID", 0x05: "CKR_GENERAL_ERROR", 0x06: "CKR_FUNCTION_FAILED",
            0x07: "CKR_ARGUMENTS_BAD", 0x11: "CKR_ATTRIBUTE_SENSITIVE", 0x12: "CKR_ATTRIBUTE_TYPE_INVALID",
            0x30: "CKR_DEVICE_ERROR", 0x31: "CKR_DEVICE_MEMORY", 0x32: "CKR_DEVICE_REMOVED",
            0x6A: "CKR_KEY_UNEXTRACTABLE", 0x82: "CKR_OBJECT_HANDLE_INVALID",
            0xA0: "CKR_PIN_INCORRECT", 0xA4: "CKR_PIN_LOCKED", 0xB3: "CKR_SESSION_HANDLE_INVALID",
            0xE0: "CKR_TOKEN_NOT_PRESENT", 0xB0: "CKR_SESSION_CLOSED", 0x150: "CKR_BUFFER_TOO_SMALL",
            0x100: "CKR_USER_ALREADY_LOGGED_IN", 0x101: "CKR_USER_NOT_LOGGED_IN",
            0x190: "CKR_CRYPTOKI_NOT_INITIALIZED", 0x191: "CKR_CRYPTOKI_ALREADY_INITIALIZED",
        ]
        return names[value] ?? String(format: "CKR_0x%lX", value)
    }
}

/// A PKCS#11 module loaded through p11-kit, once per process, and initialised for
/// multi-threaded use (p11-kit passes `CKF_OS_LOCKING_OK`). Modules stay loaded for the life of
/// the process, as p11-kit recommends for modules other code may share.
final class LoadedModule: @unchecked Sendable {
    // The function list is immutable after initialisation and PKCS#11 modules initialised with
    // OS locking are safe to call from several threads.
    let functions: UnsafeMutablePointer<CK_FUNCTION_LIST>
    let name: String

    init(functions: UnsafeMutablePointer<CK_FUNCTION_LIST>, name: String) {
        self.functions = functions
        self.name = name
    }

    func call(_ function: String, _ body: (CK_FUNCTION_LIST) -> CK_RV) throws {
        let result = body(functions.pointee)
        guard result == CKR_OK else { throw failure(function, result) }
    }

    /// The error for a failed call. A card pulled out and a session closed under us (the card
    /// reset, or another program closed every session) say so, since the user can act on them.
    func failure(_ function: String, _ result: CK_RV, subject: String? = nil) -> DCError {
        let underlying = PKCS11Error(function: function, returnValue: UInt(result))
        switch result {
        case CK_RV(CKR_DEVICE_REMOVED), CK_RV(CKR_TOKEN_NOT_PRESENT):
            return DCError(
                .cardRemoved, "the card was removed during \(function)", subject: subject ?? name,
                hint: "put it back and run the command again; nothing was written", underlying: underlying)
        case CK_RV(CKR_SESSION_HANDLE_INVALID), CK_RV(CKR_SESSION_CLOSED):
            return DCError(
                .cardRemoved,
                "the token ended the session during \(function) (card reset or reinserted, or another program closed it)",
                subject: subject ?? name, hint: "run the command again; nothing was written", underlying: underlying)
        default:
            return DCError(
                .pkcs11Failure, "the token refused \(function)", subject: subject ?? name, underlying: underlying)
        }
    }
}

/// Loading modules by p11-kit name (`softhsm2`, `opensc-pkcs11`), by absolute path, or all
/// registered ones; each at most once per process.
enum ModuleLoader {
    private static let lock = NSLock()
    // Both guarded by `lock`.
    nonisolated(unsafe) private static var loaded: [String: LoadedModule] = [:]
    nonisolated(unsafe) private static var registered: UnsafeMutablePointer<UnsafeMutablePointer<CK_FUNCTION_LIST>?>?

    /// A module by p11-kit name or absolute path.
    static func module(_ spec: String) throws -> LoadedModule {
        try lock.withLock {
            if let module = loaded[spec] { return module }
            let functions: UnsafeMutablePointer<CK_FUNCTION_LIST>
            if spec.hasPrefix("/") {
                guard let module = p11_kit_module_load(spec, 0) else {
                    throw DCError(.fileNotFound, "cannot load the PKCS#11 module", subject: spec)
                }
                functions = module
            } else {
                if registered == nil { registered = p11_kit_modules_load(nil, 0) }
                guard let list = registered, let module = p11_kit_module_for_name(list, spec) else {
                    throw DCError(
                        .fileNotFound, "no PKCS#11 module named '\(spec)' is registered with p11-kit", subject: spec,
                        hint: "see /usr/share/p11-kit/modules, or give the module's absolute path")
                }
                functions = module
            }
            let result = p11_kit_module_initialize(functions)
            guard result == CKR_OK || result == CKR_CRYPTOKI_ALREADY_INITIALIZED else {
                throw DCError(
                    .pkcs11Failure, "cannot initialise the PKCS#11 module", subject: spec,
                    underlying: PKCS11Error(function: "C_Initialize", returnValue: UInt(result)))
            }
            let module = LoadedModule(functions: functions, name: spec)
            loaded[spec] = module
            return module
        }
    }

    /// The names of the modules registered with p11-kit.
    static func registeredNames() -> [String] {
        lock.withLock {
            if registered == nil { registered = p11_kit_modules_load(nil, 0) }
            var names: [String] = []
            var cursor = registered
            while let module = cursor?.pointee {
                if let name = p11_kit_module_get_name(module) {
                    names.append(String(cString: name))
                    free(name)
                }
                cursor = cursor?.advanced(by: 1)
            }
            return names.sorted()
        }
    }
}

/// An open session, alive only inside ``withSession(_:slot:_:)``.
struct Session {
    let module: LoadedModule
    let handle: CK_SESSION_HANDLE

    /// Opens a read-only session on `slot`, runs `body`, and closes it whatever happens.
    static func withSession<R>(_ module: LoadedModule, slot: CK_SLOT_ID, _ body: (Session) throws -> R) throws -> R {
        var handle: CK_SESSION_HANDLE = 0
        try module.call("C_OpenSession") { $0.C_OpenSession(slot, CK_FLAGS(CKF_SERIAL_SESSION), nil, nil, &handle) }
        defer { _ = module.functions.pointee.C_CloseSession(handle) }
        return try body(Session(module: module, handle: handle))
    }

    /// The handles of the objects matching `template`.
    func find(_ template: [(CK_ATTRIBUTE_TYPE, [UInt8])]) throws -> [CK_OBJECT_HANDLE] {
        try withAttributes(template) { attributes in
            try module.call("C_FindObjectsInit") {
                $0.C_FindObjectsInit(handle, &attributes, CK_ULONG(attributes.count))
            }
            defer { _ = module.functions.pointee.C_FindObjectsFinal(handle) }
            var found: [CK_OBJECT_HANDLE] = []
            var batch = [CK_OBJECT_HANDLE](repeating: 0, count: 64)
            while true {
                var count: CK_ULONG = 0
                try module.call("C_FindObjects") { $0.C_FindObjects(handle, &batch, CK_ULONG(batch.count), &count) }
                if count == 0 { break }
                found += batch.prefix(Int(count))
            }
            return found
        }
    }

    /// Attribute values (absent where the token has none or will not say, e.g. sensitive values),
    /// usually in one call whatever their number: buffers sized by a guess are offered first, and
    /// only when one is too small are the lengths asked for and the values read again. A real card
    /// costs milliseconds per call. Every buffer is wiped after its value is copied out (some of
    /// them hold private key components).
    func attributes(_ object: CK_OBJECT_HANDLE, _ types: [CK_ATTRIBUTE_TYPE]) throws -> [CK_ATTRIBUTE_TYPE: [UInt8]] {
        let guessed = types.map { CK_ATTRIBUTE(type: $0, pValue: nil, ulValueLen: CK_ULONG(Self.guessedLength($0))) }
        let first = try read(object, guessed)
        if let values = first { return values }
        // A guess was too small: ask for the lengths (CKR_ATTRIBUTE_SENSITIVE / _TYPE_INVALID still
        // fill in the others, marking those with CK_UNAVAILABLE_INFORMATION), then read exactly.
        var template = types.map { CK_ATTRIBUTE(type: $0, pValue: nil, ulValueLen: 0) }
        let sized = module.functions.pointee.C_GetAttributeValue(handle, object, &template, CK_ULONG(template.count))
        guard sized == CKR_OK || sized == CKR_ATTRIBUTE_SENSITIVE || sized == CKR_ATTRIBUTE_TYPE_INVALID else {
            throw module.failure("C_GetAttributeValue", sized)
        }
        let available = template.filter { $0.ulValueLen != CK_ULONG.max }
        guard !available.isEmpty else { return [:] }
        guard let values = try read(object, available) else {
            throw module.failure("C_GetAttributeValue", CK_RV(CKR_BUFFER_TOO_SMALL))
        }
        return values
    }

    /// One C_GetAttributeValue into buffers of the template's lengths; nil when one was too small.
    private func read(_ object: CK_OBJECT_HANDLE, _ template: [CK_ATTRIBUTE]) throws -> [CK_ATTRIBUTE_TYPE: [UInt8]]? {
        // One arena for every value: the pointers the token writes through are valid only inside
        // the one closure that makes them, which also encloses the call.
        let lengths = template.map { Int($0.ulValueLen) }
        // offsets[i] is where value i starts; the last one is the arena's length.
        let offsets = lengths.reduce(into: [0]) { $0.append($0[$0.count - 1] + $1) }
        var arena = [UInt8](repeating: 0, count: offsets[offsets.count - 1])
        defer { arena.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        var request = template
        let result = arena.withUnsafeMutableBytes { raw -> CK_RV in
            for index in request.indices { request[index].pValue = raw.baseAddress.map { $0 + offsets[index] } }
            defer { for index in request.indices { request[index].pValue = nil } }
            return module.functions.pointee.C_GetAttributeValue(handle, object, &request, CK_ULONG(request.count))
        }
        if result == CKR_BUFFER_TOO_SMALL { return nil }
        guard result == CKR_OK || result == CKR_ATTRIBUTE_SENSITIVE || result == CKR_ATTRIBUTE_TYPE_INVALID else {
            throw module.failure("C_GetAttributeValue", result)
        }
        var values: [CK_ATTRIBUTE_TYPE: [UInt8]] = [:]
        for (index, attribute) in request.enumerated() where attribute.ulValueLen != CK_ULONG.max {
            // A token that claims more than the buffer it was given is not believed.
            let length = min(Int(attribute.ulValueLen), lengths[index])
            values[attribute.type] = Array(arena[offsets[index]..<offsets[index] + length])
        }
        return values
    }

    /// A first guess at an attribute's length: enough for a typical certificate, a 4096-bit RSA
    /// component, an EC point or a label.
    static func guessedLength(_ type: CK_ATTRIBUTE_TYPE) -> Int {
        switch Int(type) {
        case Int(CKA_VALUE): 4096
        case Int(CKA_CLASS), Int(CKA_KEY_TYPE), Int(CKA_MODULUS_BITS), Int(CKA_CERTIFICATE_TYPE):
            MemoryLayout<CK_ULONG>.size
        case Int(CKA_SENSITIVE), Int(CKA_EXTRACTABLE), Int(CKA_TOKEN), Int(CKA_PRIVATE): 1
        default: 512
        }
    }
}

/// `template` as CK_ATTRIBUTE values pointing into one copy of its bytes that lives while `body`
/// runs (and no longer: `body` must not keep the attributes).
func withAttributes<R>(_ template: [(CK_ATTRIBUTE_TYPE, [UInt8])], _ body: (inout [CK_ATTRIBUTE]) throws -> R) rethrows
    -> R
{
    var arena = template.flatMap { $0.1 }
    let offsets = template.reduce(into: [0]) { $0.append($0[$0.count - 1] + $1.1.count) }
    return try arena.withUnsafeMutableBytes { raw in
        var attributes = template.indices.map { index in
            CK_ATTRIBUTE(
                type: template[index].0, pValue: raw.baseAddress.map { $0 + offsets[index] },
                ulValueLen: CK_ULONG(template[index].1.count))
        }
        return try body(&attributes)
    }
}

/// CK_ULONG as little-endian bytes of the platform's width, for attribute templates.
func ulongBytes(_ value: CK_ULONG) -> [UInt8] { withUnsafeBytes(of: value) { Array($0) } }
func ulong(_ bytes: [UInt8]?) -> CK_ULONG? {
    guard let bytes, bytes.count == MemoryLayout<CK_ULONG>.size else { return nil }
    return bytes.withUnsafeBytes { $0.load(as: CK_ULONG.self) }
}
func bool(_ bytes: [UInt8]?) -> Bool? { bytes.flatMap { $0.count == 1 ? $0[0] != 0 : nil } }
func fixedString<T>(_ field: T) -> String {
    withUnsafeBytes(of: field) { String(decoding: $0, as: UTF8.self) }.trimmingCharacters(
        in: .whitespaces.union(.controlCharacters))
}
