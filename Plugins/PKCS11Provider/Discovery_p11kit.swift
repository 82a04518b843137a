internal import CP11Kit
import CredentialCoding
import DerivedCredentials
import Foundation
import SystemSupport

/// A token in a slot, as `dcprovision tokens` shows it.
public struct TokenInfo: Sendable, Codable, Hashable {
    /// The module holding the token, as it was named: a p11-kit name or an absolute path.
    public var module: String
    /// The PKCS#11 slot id within that module.
    public var slot: UInt
    /// The token label (CK_TOKEN_INFO), trailing padding removed.
    public var label: String
    /// The token's manufacturer id, trailing padding removed.
    public var manufacturer: String
    /// The token's model, trailing padding removed.
    public var model: String
    /// The token's serial number as the token reports it, trailing padding removed.
    public var serialNumber: String
    /// False for an empty slot waiting for `C_InitToken` (SoftHSM's free slot).
    public var initialized: Bool
    /// CKF_LOGIN_REQUIRED: private objects need a PIN (or the PIN pad).
    public var loginRequired: Bool
    /// The token has its own PIN pad: log in with no PIN.
    public var protectedAuthenticationPath: Bool
    /// CKF_USER_PIN_COUNT_LOW: a wrong user PIN was entered since the last successful login.
    public var userPINCountLow: Bool
    /// CKF_USER_PIN_FINAL_TRY: one more wrong PIN locks the token; logging in then needs explicit consent.
    public var userPINFinalTry: Bool
    /// CKF_USER_PIN_LOCKED: the user PIN is locked and no login is tried.
    public var userPINLocked: Bool
    /// The RFC 7512 URI of the token.
    public var uri: String
}

/// An object on a token, as `dcprovision objects` shows it. Without logging in, only public
/// objects (certificates, public keys) are visible.
public struct TokenObject: Sendable, Codable, Hashable {
    /// `certificate`, `private-key`, `public-key`, `secret-key` or `data`.
    public var kind: String
    /// CKA_ID in lowercase hex (PIV: 01 authentication, 02 signing, 03 key management).
    public var id: String
    /// CKA_LABEL as UTF-8; may be empty.
    public var label: String
    /// `EC` or `RSA` for keys; the key algorithm of a certificate.
    public var keyType: String?
    /// The key size in bits: the RSA modulus, or the curve size (256 for P-256); nil for EC key objects,
    /// which carry no size attribute, and for objects that are not keys or certificates.
    public var keyBits: Int?
    /// CKA_SENSITIVE of a key: its value cannot be read in plain; nil for other objects.
    public var sensitive: Bool?
    /// CKA_EXTRACTABLE of a key: it may leave the token (wrapped); nil for other objects.
    public var extractable: Bool?
    /// For certificates: the subject, RFC 4514.
    public var subject: String?
    /// The RFC 7512 URI of the object (token, type, id and label): what `tag=` and `objects` take.
    public var uri: String
}

/// A parsed RFC 7512 `pkcs11:` URI (p11-kit's parser).
final class PKCS11URI {
    let pointer: OpaquePointer
    let text: String

    /// The path attributes' names, as written (each at most once).
    let pathNames: Set<String>

    init(_ text: String) throws {
        pathNames = try Self.checkGrammar(text)
        guard let uri = p11_kit_uri_new() else { throw DCError(.cryptoFailure, "p11_kit_uri_new failed") }
        let result = p11_kit_uri_parse(text, P11_KIT_URI_FOR_ANY, uri)
        guard result == P11_KIT_URI_OK.rawValue else {
            p11_kit_uri_free(uri)
            let reason = p11_kit_uri_message(result).map { String(cString: $0) } ?? "invalid"
            throw DCError(
                .usage, "not a PKCS#11 URI: \(reason)", subject: text.escapingControlCharacters,
                hint: "see RFC 7512, e.g. pkcs11:token=Card;id=%01")
        }
        pointer = uri
        self.text = text
        if p11_kit_uri_get_pin_value(uri) != nil || p11_kit_uri_get_pin_source(uri) != nil { throw Self.pinRefusal }
        if p11_kit_uri_any_unrecognized(uri) != 0 {
            let unknown = Self.unrecognizedAttributes(text)
            throw DCError(
                .usage,
                "the URI has path attributes this toolkit does not understand"
                    + (unknown.isEmpty ? "" : ": " + unknown.joined(separator: ", ").escapingControlCharacters),
                subject: text.escapingControlCharacters,
                hint:
                    "remove or correct them (RFC 7512: an unknown path attribute, x-… included, matches nothing); its path attributes are \(Self.pathAttributes.joined(separator: ", "))"
            )
        }
    }

    deinit { p11_kit_uri_free(pointer) }

    /// A URI with `pin-value` or `pin-source`, refused without echoing it.
    static var pinRefusal: DCError {
        DCError(
            .usage, "the URI carries a PIN (pin-value / pin-source); URIs are visible to every user",
            remedy: .givePINSafely)
    }

    /// Throws `pinRefusal` when `text` (a URI, or an argument that holds one) names `pin-value`
    /// or `pin-source` anywhere, in any case: checked before any other rule, so that no error
    /// echoes a value that carries a PIN.
    static func refusePIN(in text: String) throws {
        let lowercased = text.lowercased()
        if lowercased.contains("pin-value") || lowercased.contains("pin-source") { throw pinRefusal }
    }

    /// The path attributes of RFC 7512 (section 2.3).
    static let pathAttributes = [
        "token", "manufacturer", "serial", "model", "library-manufacturer", "library-description",
        "library-version", "slot-manufacturer", "slot-description", "slot-id", "object", "type", "id",
    ]
    /// The query attributes of RFC 7512 (section 2.3).
    static let queryAttributes = ["module-name", "module-path", "pin-source", "pin-value"]

    /// Checks `text` against RFC 7512's grammar before p11-kit reads it (p11-kit takes characters
    /// the grammar does not allow, such as a raw space, and keeps the last of two `module-name`s):
    /// the scheme; attributes as `name=value`, `;`-separated in the path and `&`-separated in the
    /// query; values of the allowed characters or percent-encoded; no path attribute twice and no
    /// standard query attribute twice (vendor ones, `x-…`, may repeat in the query); a standard
    /// attribute on its own side (a path attribute in the query would be ignored, widening the
    /// selection, so it is refused); `slot-id` digits, `library-version` `M[.N]`. Unknown query
    /// attributes are ignored, as section 2.4 says; unknown path attributes, vendor ones included,
    /// are refused after parsing (section 2.4: they match nothing). Returns the path's names.
    static func checkGrammar(_ text: String) throws -> Set<String> {
        func refuse(_ reason: String) -> DCError {
            DCError(
                .usage, "not a PKCS#11 URI: \(reason)", subject: text.escapingControlCharacters,
                hint: "see RFC 7512, e.g. pkcs11:token=Card;id=%01")
        }
        // A PIN first, wherever it is: no other error may echo the text that carries it.
        try refusePIN(in: text)
        guard text.prefix(7).lowercased() == "pkcs11:" else { throw refuse("it does not start with pkcs11:") }
        let body = text.dropFirst(7)
        let split = body.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        let reserved = Set(":[]@!$'()*+,=")
        let allowed = (path: unreserved.union(reserved).union("&"), query: unreserved.union(reserved).union("/?|"))
        func attributes(_ part: Substring, separator: Character, characters: Set<Character>) throws -> [(
            String, Substring
        )] {
            guard !part.isEmpty else { return [] }
            return try part.split(separator: separator, omittingEmptySubsequences: false).map { attribute in
                guard let equals = attribute.firstIndex(of: "="), equals != attribute.startIndex else {
                    throw refuse("'\(attribute)' is not name=value")
                }
                let name = String(attribute[..<equals])
                let nameCharacters = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
                guard name.allSatisfy({ nameCharacters.contains($0) }) else {
                    throw refuse("'\(name)' is not an attribute name")
                }
                let value = attribute[attribute.index(after: equals)...]
                var index = value.startIndex
                while index < value.endIndex {
                    let character = value[index]
                    if character == "%" {
                        let digits = value[value.index(after: index)...].prefix(2)
                        guard digits.count == 2, digits.allSatisfy(\.isHexDigit) else {
                            throw refuse("a % in \(name) that is not followed by two hex digits")
                        }
                        index = value.index(index, offsetBy: 3)
                        continue
                    }
                    guard characters.contains(character) else {
                        throw refuse("\(name) has a character that must be percent-encoded")
                    }
                    index = value.index(after: index)
                }
                return (name, value)
            }
        }
        let path = try attributes(split[0], separator: ";", characters: allowed.path)
        let query = split.count > 1 ? try attributes(split[1], separator: "&", characters: allowed.query) : []
        var seen = Set<String>()
        for (name, _) in path {
            guard seen.insert(name).inserted else { throw refuse("\(name) appears twice in the path") }
            if queryAttributes.contains(name) { throw refuse("\(name) belongs in the query: ?\(name)=…") }
        }
        var seenInQuery = Set<String>()
        for (name, _) in query {
            if pathAttributes.contains(name) { throw refuse("\(name) belongs in the path, before any ?") }
            guard !queryAttributes.contains(name) || seenInQuery.insert(name).inserted else {
                throw refuse("\(name) appears twice in the query")
            }
        }
        for (name, value) in path {
            if name == "slot-id", value.isEmpty || !value.allSatisfy(\.isASCII) || !value.allSatisfy(\.isNumber) {
                throw refuse("slot-id is a decimal number")
            }
            let parts = value.split(separator: ".", omittingEmptySubsequences: false)
            if name == "library-version",
                !(1...2).contains(parts.count)
                    || !parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy { $0.isASCII && $0.isNumber } })
            {
                throw refuse("library-version is MAJOR or MAJOR.MINOR")
            }
        }
        return seen
    }

    /// The path's attributes that neither RFC 7512 nor p11-kit knows (vendor ones, `x-…`, included),
    /// which p11-kit counts as unrecognized without naming them.
    static func unrecognizedAttributes(_ text: String) -> [String] {
        guard text.lowercased().hasPrefix("pkcs11:") else { return [] }
        let path = text.dropFirst("pkcs11:".count).prefix { $0 != "?" }.split(separator: ";")
        let names = path.map { String($0.prefix { $0 != "=" }) }
        var seen = Set<String>()
        return names.filter { !$0.isEmpty && !pathAttributes.contains($0) && seen.insert($0).inserted }
    }

    /// The modules the URI names (module-name / module-path), or nil for any.
    var modules: [String]? {
        if let path = p11_kit_uri_get_module_path(pointer) { return [String(cString: path)] }
        if let name = p11_kit_uri_get_module_name(pointer) { return [String(cString: name)] }
        return nil
    }

    /// The modules to search: those given (`--module`, the provider's `module` option; all
    /// registered when none), narrowed to the one the URI names by `module-name` or `module-path`.
    /// Both must then spell the module the same way (a p11-kit name, or an absolute path).
    func modules(narrowing given: [String]?) -> [String]? {
        guard let named = modules else { return given }
        return given.map { $0.filter(named.contains) } ?? named
    }

    /// The slot the URI names by `slot-id`, or nil.
    var slotID: CK_SLOT_ID? {
        guard pathNames.contains("slot-id") else { return nil }
        return p11_kit_uri_get_slot_id(pointer)
    }

    /// Whether the URI has an attribute of the slot (`slot-description`, `slot-manufacturer`).
    var namesSlotInfo: Bool { pathNames.contains("slot-description") || pathNames.contains("slot-manufacturer") }

    /// Whether the URI has an attribute of the module (`library-…`).
    var namesModuleInfo: Bool { pathNames.contains { $0.hasPrefix("library-") } }

    func matches(_ token: CK_TOKEN_INFO) -> Bool {
        var info = token
        return p11_kit_uri_match_token_info(pointer, &info) == 1
    }

    func matches(_ slot: CK_SLOT_INFO) -> Bool {
        var info = slot
        return p11_kit_uri_match_slot_info(pointer, &info) == 1
    }

    func matches(_ module: CK_INFO) -> Bool {
        var info = module
        return p11_kit_uri_match_module_info(pointer, &info) == 1
    }

    /// The URI's object attributes (class, id, label) as a search template, so the token filters.
    var template: [(CK_ATTRIBUTE_TYPE, [UInt8])] {
        var count: CK_ULONG = 0
        guard let attributes = p11_kit_uri_get_attributes(pointer, &count) else { return [] }
        return (0..<Int(count)).map { index in
            let attribute = attributes[index]
            let bytes =
                attribute.pValue.map { Array(UnsafeRawBufferPointer(start: $0, count: Int(attribute.ulValueLen))) }
                ?? []
            return (attribute.type, bytes)
        }
    }

    func matches(_ attributes: inout [CK_ATTRIBUTE]) -> Bool {
        p11_kit_uri_match_attributes(pointer, &attributes, CK_ULONG(attributes.count)) == 1
    }

    /// A URI for a token, or an object on it.
    static func format(token: CK_TOKEN_INFO, object: [(CK_ATTRIBUTE_TYPE, [UInt8])] = []) -> String {
        guard let uri = p11_kit_uri_new() else { return "pkcs11:" }
        defer { p11_kit_uri_free(uri) }
        p11_kit_uri_get_token_info(uri).pointee = token
        var storage = object.map(\.1)
        for index in object.indices {
            storage[index].withUnsafeMutableBytes { buffer in
                var attribute = CK_ATTRIBUTE(
                    type: object[index].0, pValue: buffer.baseAddress, ulValueLen: CK_ULONG(buffer.count))
                _ = p11_kit_uri_set_attribute(uri, &attribute)
            }
        }
        var text: UnsafeMutablePointer<CChar>?
        let kind = object.isEmpty ? P11_KIT_URI_FOR_TOKEN : P11_KIT_URI_FOR_OBJECT_ON_TOKEN
        guard p11_kit_uri_format(uri, kind, &text) == P11_KIT_URI_OK.rawValue, let text else { return "pkcs11:" }
        defer { free(text) }
        return String(cString: text)
    }
}

/// Token and object discovery through p11-kit.
public enum PKCS11Discovery {
    /// Tokens in every registered module (or in `modules`: p11-kit names or absolute paths).
    /// `progress` hears each module and slot as it is asked (a card reader can take seconds).
    public static func tokens(modules: [String]? = nil, progress: ((String) -> Void)? = nil) throws -> [TokenInfo] {
        try slots(modules, progress: progress).map { module, slot, info in
            let flags = info.flags
            func has<T: BinaryInteger>(_ flag: T) -> Bool { flags & CK_FLAGS(flag) != 0 }
            return TokenInfo(
                module: module.name, slot: UInt(slot), label: fixedString(info.label),
                manufacturer: fixedString(info.manufacturerID),
                model: fixedString(info.model), serialNumber: fixedString(info.serialNumber),
                initialized: has(CKF_TOKEN_INITIALIZED),
                loginRequired: has(CKF_LOGIN_REQUIRED),
                protectedAuthenticationPath: has(CKF_PROTECTED_AUTHENTICATION_PATH),
                userPINCountLow: has(CKF_USER_PIN_COUNT_LOW),
                userPINFinalTry: has(CKF_USER_PIN_FINAL_TRY), userPINLocked: has(CKF_USER_PIN_LOCKED),
                uri: PKCS11URI.format(token: info))
        }
    }

    /// The modules named, or every module registered with p11-kit. A named module that cannot be
    /// loaded or initialised is an error; a registered one is left out with a warning on standard
    /// error, so that one broken registration (SoftHSM2 with a token directory this user cannot
    /// read) does not hide every other token.
    static func loadModules(_ modules: [String]?) throws -> [LoadedModule] {
        guard modules == nil else { return try modules?.map { try ModuleLoader.module($0) } ?? [] }
        return ModuleLoader.registeredNames().compactMap { name in
            do {
                return try ModuleLoader.module(name)
            } catch {
                let why =
                    (error as? DCError).map { error in
                        error.message + (error.underlying.map { " (\($0))" } ?? "")
                    } ?? "\(error)"
                TerminalLine.makeRoom()
                FileHandle.standardError.write(
                    Data("warning: PKCS#11 module \(name.escapingControlCharacters) left out: \(why)\n".utf8))
                return nil
            }
        }
    }

    /// The card readers with no card in them, by module: a module's hardware slots for removable
    /// devices that hold no token (OpenSC shows each reader as one), each reader once.
    public static func emptyReaders(modules: [String]? = nil) throws -> [(module: String, reader: String)] {
        var found: [(module: String, reader: String)] = []
        for module in try loadModules(modules) {
            let name = module.name
            let occupied = Set(try slotList(module, tokenPresent: true))
            for slot in try slotList(module, tokenPresent: false) where !occupied.contains(slot) {
                var info = CK_SLOT_INFO()
                guard module.functions.pointee.C_GetSlotInfo(slot, &info) == CK_RV(CKR_OK),
                    info.flags & CK_FLAGS(CKF_HW_SLOT) != 0, info.flags & CK_FLAGS(CKF_REMOVABLE_DEVICE) != 0
                else { continue }
                let reader = fixedString(info.slotDescription)
                if !found.contains(where: { $0.module == name && $0.reader == reader }) {
                    found.append((name, reader))
                }
            }
        }
        return found
    }

    /// The objects matching `uri`: the public ones, or with `login` all the user may see
    /// (private keys too — their values are never read here).
    public static func objects(matching uri: String, modules: [String]? = nil, login: LoginPolicy? = nil) throws
        -> [TokenObject]
    {
        try matchingObjects(uri, modules: modules, login: login).map(\.object)
    }

    /// The certificates matching `uri`, with their DER: those that parse as X.509 certificates.
    public static func certificates(matching uri: String, modules: [String]? = nil) throws -> [(
        object: TokenObject, certificate: Certificate
    )] {
        try matchingObjects(uri, modules: modules).compactMap { item in
            item.value.flatMap { (try? CertificateDetails($0)) == nil ? nil : (item.object, $0) }
        }
    }

    /// The tokens of `modules` (all registered when nil) that `uri` selects: by its module
    /// (`library-…`), slot (`slot-id`, `slot-description`, `slot-manufacturer`) and token
    /// attributes; every token when `uri` is nil. A slot named by `slot-id` that holds no token is
    /// an error naming it, not an empty answer.
    static func slots(
        _ modules: [String]?, matching uri: PKCS11URI? = nil, progress: ((String) -> Void)? = nil
    ) throws -> [(LoadedModule, CK_SLOT_ID, CK_TOKEN_INFO)] {
        var found: [(LoadedModule, CK_SLOT_ID, CK_TOKEN_INFO)] = []
        progress?("loading the modules")
        for module in try loadModules(modules) {
            progress?("asking \(module.name) for its slots")
            if let uri, uri.namesModuleInfo {
                var info = CK_INFO()
                try module.call("C_GetInfo") { $0.C_GetInfo(&info) }
                if !uri.matches(info) { continue }
            }
            let slots = try slotList(module, tokenPresent: true)
            if let wanted = uri?.slotID, !slots.contains(wanted),
                try slotList(module, tokenPresent: false).contains(wanted)
            {
                throw DCError(
                    .noSuchObject, "slot-id=\(wanted) of module \(module.name) has no token in it (no card inserted)",
                    subject: uri?.text.escapingControlCharacters, remedy: .insertCard)
            }
            for slot in slots {
                if let wanted = uri?.slotID, slot != wanted { continue }
                if let uri, uri.namesSlotInfo {
                    var info = CK_SLOT_INFO()
                    try module.call("C_GetSlotInfo") { $0.C_GetSlotInfo(slot, &info) }
                    if !uri.matches(info) { continue }
                }
                progress?("reading the token in slot \(slot) of \(module.name)")
                var info = CK_TOKEN_INFO()
                try module.call("C_GetTokenInfo") { $0.C_GetTokenInfo(slot, &info) }
                if let uri, !uri.matches(info) { continue }
                found.append((module, slot, info))
            }
        }
        return found
    }

    /// The module's slots: those with a token, or all of them.
    static func slotList(_ module: LoadedModule, tokenPresent: Bool) throws -> [CK_SLOT_ID] {
        let present = CK_BBOOL(tokenPresent ? CK_TRUE : CK_FALSE)
        var count: CK_ULONG = 0
        try module.call("C_GetSlotList") { $0.C_GetSlotList(present, nil, &count) }
        var slots = [CK_SLOT_ID](repeating: 0, count: Int(count))
        try module.call("C_GetSlotList") { $0.C_GetSlotList(present, &slots, &count) }
        return Array(slots.prefix(Int(count)))
    }

    static func matchingObjects(_ text: String, modules: [String]?, login: LoginPolicy? = nil) throws -> [(
        object: TokenObject, value: Certificate?
    )] {
        let uri = try PKCS11URI(text)
        var results: [(TokenObject, Certificate?)] = []
        // A token not yet initialised (SoftHSM's free slot) has no objects, and refuses sessions.
        for (module, slot, token) in try slots(uri.modules(narrowing: modules), matching: uri)
        where token.flags & CK_FLAGS(CKF_TOKEN_INITIALIZED) != 0 {
            let scope: (LoadedModule, CK_SLOT_ID, (Session) throws -> Void) throws -> Void = { module, slot, body in
                if let login {
                    try Session.withLoggedInSession(module, slot: slot, policy: login, body)
                } else {
                    try Session.withSession(module, slot: slot, body)
                }
            }
            try scope(module, slot) { session in
                // A handle found can turn invalid before it is read when another program changes
                // the token's objects meanwhile (SoftHSM rewrites a token's files at every login):
                // the search starts again in the same session (no second login), up to three
                // times, rather than failing the listing.
                var attempt = 1
                while true {
                    do {
                        var found: [(TokenObject, Certificate?)] = []
                        for handle in try session.find(uri.template) {
                            found.append(try describe(session, handle, try Self.listed(session, handle), token: token))
                        }
                        results += found
                        return
                    } catch let error as DCError
                        where attempt < 3
                        && (error.underlying as? PKCS11Error)?.returnValue == UInt(CKR_OBJECT_HANDLE_INVALID)
                    {
                        attempt += 1
                    }
                }
            }
        }
        return results
    }

    /// What `describe` needs of an object: one batch of ``wanted``. A token that fails that batch
    /// for a reason other than the card leaving (OpenSC fails the value of a PIV data object the
    /// card does not serve) is asked again without `CKA_VALUE`, which only a certificate's listing
    /// needs: then it is read alone.
    static func listed(_ session: Session, _ handle: CK_OBJECT_HANDLE) throws -> [CK_ATTRIBUTE_TYPE: [UInt8]] {
        do {
            return try session.attributes(handle, Self.wanted)
        } catch let error as DCError where error.code == .pkcs11Failure {
            var values = try session.attributes(handle, Self.wanted.filter { $0 != CK_ATTRIBUTE_TYPE(CKA_VALUE) })
            if ulong(values[CK_ATTRIBUTE_TYPE(CKA_CLASS)]) == CK_ULONG(CKO_CERTIFICATE) {
                values.merge(try session.attributes(handle, [CK_ATTRIBUTE_TYPE(CKA_VALUE)])) { $1 }
            }
            return values
        }
    }

    /// Every attribute `describe` needs, fetched in one batch per object.
    static let wanted: [CK_ATTRIBUTE_TYPE] = [
        CKA_CLASS, CKA_ID, CKA_LABEL, CKA_VALUE, CKA_KEY_TYPE, CKA_SENSITIVE, CKA_EXTRACTABLE, CKA_MODULUS_BITS,
    ].map { CK_ATTRIBUTE_TYPE($0) }

    static func describe(
        _ session: Session, _ handle: CK_OBJECT_HANDLE, _ values: [CK_ATTRIBUTE_TYPE: [UInt8]], token: CK_TOKEN_INFO
    ) throws -> (TokenObject, Certificate?) {
        let kindNames: [CK_ULONG: String] = [
            CK_ULONG(CKO_CERTIFICATE): "certificate", CK_ULONG(CKO_PRIVATE_KEY): "private-key",
            CK_ULONG(CKO_PUBLIC_KEY): "public-key", CK_ULONG(CKO_SECRET_KEY): "secret-key", CK_ULONG(CKO_DATA): "data",
        ]
        let objectClass = ulong(values[CK_ATTRIBUTE_TYPE(CKA_CLASS)])
        let id = values[CK_ATTRIBUTE_TYPE(CKA_ID)] ?? []
        var object = TokenObject(
            kind: objectClass.flatMap { kindNames[$0] } ?? "other", id: Digests.hex(id),
            label: String(decoding: values[CK_ATTRIBUTE_TYPE(CKA_LABEL)] ?? [], as: UTF8.self),
            uri: PKCS11URI.format(
                token: token,
                object: [
                    (CK_ATTRIBUTE_TYPE(CKA_CLASS), values[CK_ATTRIBUTE_TYPE(CKA_CLASS)] ?? []),
                    (CK_ATTRIBUTE_TYPE(CKA_ID), id),
                    (CK_ATTRIBUTE_TYPE(CKA_LABEL), values[CK_ATTRIBUTE_TYPE(CKA_LABEL)] ?? []),
                ]))
        var certificate: Certificate?
        if objectClass == CK_ULONG(CKO_CERTIFICATE), let der = values[CK_ATTRIBUTE_TYPE(CKA_VALUE)] {
            // The summary checks strict DER and reads the two fields shown, without the key
            // decoding a full parse costs (certificates(matching:) parses those it returns).
            let parsed = Certificate(derBytes: der)
            if let summary = try? CertificateSummary(parsed) {
                certificate = parsed
                object.subject = summary.subject
                let parts = summary.keyAlgorithm.split(separator: " ")
                object.keyType = parts.first.map(String.init)
                object.keyBits = parts.last.flatMap { Int($0) } ?? parts.last.flatMap { Int($0.dropFirst(2)) }
            }
        } else if objectClass == CK_ULONG(CKO_PRIVATE_KEY) || objectClass == CK_ULONG(CKO_PUBLIC_KEY) {
            let more = values
            switch ulong(more[CK_ATTRIBUTE_TYPE(CKA_KEY_TYPE)]) {
            case CK_ULONG(CKK_RSA): object.keyType = "RSA"
            case CK_ULONG(CKK_EC): object.keyType = "EC"
            default: break
            }
            object.keyBits = ulong(more[CK_ATTRIBUTE_TYPE(CKA_MODULUS_BITS)]).map { Int($0) }
            object.sensitive = bool(more[CK_ATTRIBUTE_TYPE(CKA_SENSITIVE)])
            object.extractable = bool(more[CK_ATTRIBUTE_TYPE(CKA_EXTRACTABLE)])
        }
        return (object, certificate)
    }
}
