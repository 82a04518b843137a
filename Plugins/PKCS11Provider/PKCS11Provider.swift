internal import CP11Kit
import CredentialCoding
import DerivedCredentials
import Foundation
import SystemSupport

/// Certificates and keys from a PKCS#11 token (id `pkcs11`): a smart card through OpenSC, or
/// SoftHSM2 in tests, loaded through p11-kit. The PIN comes from the request's passphrase source.
///
/// Certificates are chosen by tag: `tag` options `TAG=ID` (CKA_ID in hex) or `TAG=pkcs11:…` (an
/// RFC 7512 object URI, e.g. `pkcs11:object=Certificate%20for%20PIV%20Authentication`), or
/// `layout=piv` for the PIV layout (`PIVLayout`: OpenSC ids 01 authentication, 02 signing, 03 key
/// management → encryption, the 20 retired key management slots → escrow and its key history).
/// Each certificate's key
/// is the private key with the same CKA_ID.
///
/// A key is exported as PKCS#8 only where the token allows it (see `exportPrivateKey`); a PIV
/// card's keys normally cannot leave it — then ``prove(_:challenge:)`` lets a CA derive a
/// credential instead (SP 800-157, the `derive` provider).
public struct PKCS11Provider: PossessionProvider {
    /// The provider; it has no state. Modules are loaded on first use, once per process.
    public init() {}

    /// Id `pkcs11`: the required `uri`, and `module`, `layout`, `tag` and `allow-final-pin-try`.
    public let descriptor = ProviderDescriptor(
        id: "pkcs11", displayName: "PKCS#11 token (smart card) through p11-kit", version: "1",
        options: [
            ProviderOption(name: "uri", summary: "the token, as an RFC 7512 URI (pkcs11:token=…)", required: true),
            ProviderOption(
                name: "module", summary: "a module by p11-kit name or absolute path (default: all registered)",
                repeatable: true),
            ProviderOption(
                name: "layout", summary: "piv: 01 authentication, 02 signing, 03 encryption, 05-09 and 10-24 escrow"),
            ProviderOption(
                name: "tag", summary: "TAG=ID (hex) or TAG=pkcs11:URI: the certificate for a tag", repeatable: true),
            ProviderOption(
                name: "allow-final-pin-try",
                summary: "true: try the PIN even when one more wrong PIN would lock the token"),
        ])

    /// Reads the selected certificates and exports each one's private key as PKCS#8; suggests the
    /// first certificate's common name and serial number, and the earliest non-escrow expiry. Throws
    /// `DCError/Code/keyNotExtractable` when a key cannot leave the token.
    public func provide(_ request: ProviderRequest) async throws -> ProvidedCredential {
        try request.check(against: descriptor)
        try Task.checkCancellation()
        // The login may wait for a person at a PIN pad: not on a thread of the concurrency pool.
        let entries = try await TokenThread.run {
            try TokenReading(request).withSelectedCertificates { session, found in
                try CredentialTag.allCases.compactMap { tag -> CredentialEntry? in
                    let group = found.filter { $0.tag == tag }
                    guard let current = group.first else { return nil }
                    let pairs = try group.map { item in
                        CertifiedKey(
                            certificate: item.certificate,
                            privateKey: try session.exportPrivateKey(
                                try session.privateKey(id: item.id, name: item.name), certificate: item.certificate,
                                name: item.name))
                    }
                    return try CredentialEntry(
                        tag: tag, certificate: current.certificate, privateKey: pairs[0].privateKey,
                        keyHistory: Array(pairs.dropFirst()))
                }
            }
        }
        let details = try entries.map { try CertificateDetails($0.certificate) }
        return ProvidedCredential(
            entries: entries, suggestedName: details.first?.commonName,
            suggestedSerialNumber: details.first?.serialNumber,
            suggestedExpirationDate: zip(entries, details).filter { $0.0.tag != .escrow }.compactMap { $0.1.notAfter }
                .min())
    }

    /// Signs `challenge` on the token with the authentication key (one `C_Sign`) and returns the
    /// selected certificates (escrow: the newest) with the proof. Nothing is exported.
    public func prove(_ request: ProviderRequest, challenge: [UInt8]) async throws -> (
        certificates: [CredentialTag: Certificate], proof: PossessionProof
    ) {
        try request.check(against: descriptor)
        try Task.checkCancellation()
        // The login and the sign may wait for a person: not on a thread of the concurrency pool.
        return try await TokenThread.run {
            try TokenReading(request).withSelectedCertificates { session, found in
                guard let authentication = found.first(where: { $0.tag == .authentication }) else {
                    throw DCError(
                        .usage, "proving possession needs the authentication certificate",
                        hint: "use layout=piv or tag=authentication=ID")
                }
                let key = try session.privateKey(id: authentication.id, name: authentication.name)
                request.report("signing the CA's challenge on the card")
                let signature = try session.signSHA256(key, message: challenge, name: authentication.name)
                var certificates: [CredentialTag: Certificate] = [:]
                for item in found where certificates[item.tag] == nil { certificates[item.tag] = item.certificate }
                return (
                    certificates,
                    PossessionProof(certificate: authentication.certificate, challenge: challenge, signature: signature)
                )
            }
        }
    }

    /// An object id written in hex (either case); nil for none or anything else.
    static func hex(_ text: String) -> [UInt8]? {
        text.isEmpty ? nil : Digests.bytes(hex: text)
    }
}

/// One read of a token: the token the URI names, logged in once, and the certificates the tag
/// selectors choose, found with one object search.
struct TokenReading {
    /// How a tag's certificate is chosen.
    struct Selector {
        enum Match {
            case id([UInt8])
            case uri(PKCS11URI)
        }
        var tag: CredentialTag
        var match: Match
        var name: String
        /// Layout slots may be empty; a certificate asked for by name must be there.
        var required: Bool
    }

    /// A chosen certificate. Escrow may have several, newest first.
    struct Found {
        var tag: CredentialTag
        var id: [UInt8]
        var certificate: Certificate
        var name: String
    }

    let uri: PKCS11URI
    let modules: [String]?
    let policy: LoginPolicy
    let selectors: [Selector]
    /// Where the steps go (the request's progress), for a person watching a slow card.
    let report: @Sendable (String) -> Void

    init(_ request: ProviderRequest) throws {
        let progress = request.progress
        report = { progress?(ProviderProgress($0)) }
        let uriText = try request.requiredValue("uri")
        uri = try PKCS11URI(uriText)
        let idName = { (id: [UInt8]) in "\(uriText);id=%" + Digests.hex(id, separator: "%")
        }
        var selectors: [Selector] = []
        if let layout = try request.value("layout") {
            guard layout == "piv" else {
                throw DCError(.usage, "unknown layout '\(layout)'", hint: "the layout is piv")
            }
            // SP 800-73 slots as OpenSC numbers them (`PIVLayout`); card authentication (9E) carries no tag.
            selectors = PIVLayout.slots.compactMap { slot in
                slot.tag.map {
                    Selector(tag: $0, match: .id([slot.id]), name: idName([slot.id]), required: $0 == .authentication)
                }
            }
        }
        var explicit: Set<CredentialTag> = []
        for argument in request.values("tag") {
            // Before any error that would print the argument back.
            try PKCS11URI.refusePIN(in: argument)
            let parts = argument.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2, let tag = CredentialTag(wireName: parts[0]) else {
                throw DCError(
                    .usage, "expected TAG=ID (hex) or TAG=pkcs11:URI", subject: argument.escapingControlCharacters)
            }
            if explicit.contains(tag) && tag != .escrow {
                throw DCError(
                    .usage, "tag '\(tag)' is given more than once", hint: "only escrow takes several (its key history)")
            }
            if !explicit.contains(tag) { selectors.removeAll { $0.tag == tag } }
            explicit.insert(tag)
            if parts[1].hasPrefix("pkcs11:") {
                selectors.append(
                    Selector(tag: tag, match: .uri(try PKCS11URI(parts[1])), name: parts[1], required: true))
            } else if let id = PKCS11Provider.hex(parts[1]) {
                selectors.append(Selector(tag: tag, match: .id(id), name: idName(id), required: true))
            } else {
                throw DCError(
                    .usage, "expected TAG=ID (hex) or TAG=pkcs11:URI", subject: argument.escapingControlCharacters)
            }
        }
        guard !selectors.isEmpty else {
            throw DCError(.usage, "say which certificates to use: layout=piv or tag=TAG=ID")
        }
        self.selectors = selectors
        modules = request.values("module").isEmpty ? nil : request.values("module")
        policy = LoginPolicy(
            pin: request.passphrase, allowFinalPINTry: try request.value("allow-final-pin-try") == "true"
        ) {
            TerminalLine.makeRoom()
            FileHandle.standardError.write(Data("warning: \($0)\n".utf8))
        } inform: {
            TerminalLine.makeRoom()
            FileHandle.standardError.write(Data("card: \($0)\n".utf8))
        }
    }

    /// Finds the one token the URI names, logs in, chooses the certificates and runs `body`.
    func withSelectedCertificates<R>(_ body: (Session, [Found]) throws -> R) throws -> R {
        let tokens = try PKCS11Discovery.slots(uri.modules(narrowing: modules), matching: uri, progress: report).filter
        {
            $0.2.flags & CK_FLAGS(CKF_TOKEN_INITIALIZED) != 0
        }
        guard let (module, slot, token) = tokens.first else {
            throw DCError(
                .noSuchObject, "no token matches the URI", subject: uri.text.escapingControlCharacters,
                remedy: .listTokensOnly)
        }
        guard tokens.count == 1 else {
            throw DCError(
                .multipleObjects, "\(tokens.count) tokens match the URI", subject: uri.text.escapingControlCharacters,
                hint: "add token= or serial=")
        }
        for selector in selectors {
            if case .uri(let objectURI) = selector.match, !objectURI.matches(token) {
                throw DCError(
                    .noSuchObject, "the object URI names another token than --pkcs11",
                    subject: selector.name.escapingControlCharacters)
            }
        }
        report("logging in to \(fixedString(token.label))")
        return try Session.withLoggedInSession(module, slot: slot, policy: policy) { session in
            report("reading the certificates")
            let certificates = try session.certificates()
            var found: [Found] = []
            for selector in selectors {
                let matches = certificates.filter { selector.matches($0.attributes) }
                guard let match = matches.first else {
                    if selector.required {
                        throw DCError(
                            .noSuchObject, "no certificate on the token matches",
                            subject: selector.name.escapingControlCharacters)
                    }
                    continue
                }
                guard matches.count == 1 else {
                    throw DCError(
                        .multipleObjects, "\(matches.count) certificates match",
                        subject: selector.name.escapingControlCharacters, hint: "add id= or object= to the URI")
                }
                let id = match.attributes[CK_ATTRIBUTE_TYPE(CKA_ID)] ?? []
                let certificate = try CredentialReader().certificate(der: match.value, source: selector.name)
                found.append(Found(tag: selector.tag, id: id, certificate: certificate, name: selector.name))
            }
            // Escrow's history is ordered by validity, newest first (as for files); ties keep the
            // selectors' order.
            let escrow = try found.filter { $0.tag == .escrow }.map { item in
                let details = try CertificateDetails(item.certificate)
                return (item: item, validity: (details.notBefore ?? .distantPast, details.notAfter ?? .distantPast))
            }
            let newestFirst = escrow.enumerated().sorted { a, b in
                a.element.validity != b.element.validity ? a.element.validity > b.element.validity : a.offset < b.offset
            }
            return try body(session, found.filter { $0.tag != .escrow } + newestFirst.map(\.element.item))
        }
    }
}

extension TokenReading.Selector {
    func matches(_ attributes: [CK_ATTRIBUTE_TYPE: [UInt8]]) -> Bool {
        switch match {
        case .id(let id): return attributes[CK_ATTRIBUTE_TYPE(CKA_ID)] == id
        case .uri(let uri):
            return withAttributes(attributes.map { ($0.key, $0.value) }) { uri.matches(&$0) }
        }
    }
}

extension Session {
    /// Every certificate on the token with its CKA_CLASS, CKA_ID, CKA_LABEL and DER: one search,
    /// then one batched attribute read per certificate.
    func certificates() throws -> [(attributes: [CK_ATTRIBUTE_TYPE: [UInt8]], value: [UInt8])] {
        let types = [CKA_CLASS, CKA_ID, CKA_LABEL, CKA_VALUE].map { CK_ATTRIBUTE_TYPE($0) }
        return try find([(CK_ATTRIBUTE_TYPE(CKA_CLASS), ulongBytes(CK_OBJECT_CLASS(CKO_CERTIFICATE)))]).compactMap {
            handle in
            var attributes = try self.attributes(handle, types)
            guard let value = attributes.removeValue(forKey: CK_ATTRIBUTE_TYPE(CKA_VALUE)) else { return nil }
            return (attributes, value)
        }
    }

    /// The one private key with CKA_ID `id`: none and several are distinct errors naming it.
    func privateKey(id: [UInt8], name: String) throws -> CK_OBJECT_HANDLE {
        let found = try find([
            (CK_ATTRIBUTE_TYPE(CKA_CLASS), ulongBytes(CK_OBJECT_CLASS(CKO_PRIVATE_KEY))),
            (CK_ATTRIBUTE_TYPE(CKA_ID), id),
        ])
        guard let first = found.first else {
            throw DCError(.noSuchObject, "no private key with the certificate's id on the token", subject: name)
        }
        guard found.count == 1 else {
            throw DCError(.multipleObjects, "\(found.count) private keys have the certificate's id", subject: name)
        }
        return first
    }
}
