internal import CP11Kit
import CredentialCoding
import DerivedCredentials
import Foundation

/// Certificates and keys from a PKCS#11 token (id `pkcs11`): a smart card through OpenSC, or
/// SoftHSM2 in tests, loaded through p11-kit. The PIN comes from the request's passphrase source.
///
/// Objects are chosen by tag: `tag` options `TAG=ID` (CKA_ID in hex), or `layout=piv` for the PIV
/// layout (OpenSC ids 01 authentication, 02 signing, 03 key management → encryption). A key is
/// exported as PKCS#8 only where the token allows it (see `exportPrivateKey`); a PIV card's keys
/// normally cannot leave it, which is an error naming the object.
public struct PKCS11Provider: CredentialProvider {
    public init() {}

    public let descriptor = ProviderDescriptor(
        id: "pkcs11", displayName: "PKCS#11 token (smart card) through p11-kit", version: "1",
        options: [
            ProviderOption(name: "uri", summary: "the token, as an RFC 7512 URI (pkcs11:token=…)", required: true),
            ProviderOption(name: "module", summary: "a module by p11-kit name or absolute path (default: all registered)", repeatable: true),
            ProviderOption(name: "layout", summary: "piv: 01 authentication, 02 signing, 03 encryption"),
            ProviderOption(name: "tag", summary: "TAG=ID: the object id (hex) for a tag", repeatable: true),
            ProviderOption(name: "allow-final-pin-try", summary: "true: try the PIN even when one more wrong PIN would lock the token"),
        ])

    public func provide(_ request: ProviderRequest) async throws -> ProvidedCredential {
        try request.check(against: descriptor)
        try Task.checkCancellation()
        var ids: [(CredentialTag, [UInt8])] = []
        if let layout = try request.value("layout") {
            guard layout == "piv" else { throw DCError(.usage, "unknown layout '\(layout)'", hint: "the layout is piv") }
            ids = [(.authentication, [0x01]), (.signing, [0x02]), (.encryption, [0x03])]
        }
        for argument in request.values("tag") {
            let parts = argument.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2, let tag = CredentialTag(wireName: parts[0]), let id = Self.hex(parts[1]) else {
                throw DCError(.usage, "expected TAG=ID (hex)", subject: argument)
            }
            ids.removeAll { $0.0 == tag }
            ids.append((tag, id))
        }
        guard !ids.isEmpty else { throw DCError(.usage, "say which objects to use: layout=piv or tag=TAG=ID") }
        let uriText = try request.value("uri")!
        let uri = try PKCS11URI(uriText)
        let policy = LoginPolicy(pin: request.passphrase, allowFinalPINTry: try request.value("allow-final-pin-try") == "true") {
            FileHandle.standardError.write(Data("warning: \($0)\n".utf8))
        }
        let modules = request.values("module").isEmpty ? nil : request.values("module")
        let tokens = try PKCS11Discovery.slots(modules ?? uri.modules).filter { uri.matches($0.2) }
        guard let (module, slot, _) = tokens.first else {
            throw DCError(.noSuchObject, "no token matches the URI", subject: uriText.escapingControlCharacters, hint: "see dcprovision tokens")
        }
        guard tokens.count == 1 else {
            throw DCError(.multipleObjects, "\(tokens.count) tokens match the URI", subject: uriText.escapingControlCharacters, hint: "add token= or serial=")
        }
        let entries = try Session.withLoggedInSession(module, slot: slot, policy: policy) { session in
            try ids.map { tag, id -> CredentialEntry in
                let name = "\(uriText);id=%" + id.map { String(format: "%02x", $0) }.joined(separator: "%")
                let certificateHandle = try session.exactlyOne(.certificate, id: id, name: name)
                guard let der = try session.attributes(certificateHandle, [CK_ATTRIBUTE_TYPE(CKA_VALUE)])[CK_ATTRIBUTE_TYPE(CKA_VALUE)] else {
                    throw DCError(.malformedInput, "the certificate has no value", subject: name)
                }
                let certificate = try CredentialReader().certificate(der: der, source: name)
                let key = try session.exportPrivateKey(try session.exactlyOne(.privateKey, id: id, name: name), certificate: certificate, name: name)
                return try CredentialEntry(tag: tag, certificate: certificate, privateKey: key)
            }
        }
        let authentication = try entries.first.map { try CertificateDetails($0.certificate) }
        return ProvidedCredential(
            entries: entries, suggestedName: authentication?.commonName, suggestedSerialNumber: authentication?.serialNumber,
            suggestedExpirationDate: try entries.compactMap { try CertificateDetails($0.certificate).notAfter }.min())
    }

    static func hex(_ text: String) -> [UInt8]? {
        let digits = Array(text.lowercased())
        guard !digits.isEmpty, digits.count % 2 == 0 else { return nil }
        return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(digits[$0...$0 + 1]), radix: 16) }.reduce(into: [UInt8]?([])) {
            guard let byte = $1 else { $0 = nil; return }
            $0?.append(byte)
        }
    }
}

extension Session {
    enum ObjectKind { case certificate, privateKey }

    /// The one object of `kind` with CKA_ID `id`: none and several are distinct errors naming it.
    func exactlyOne(_ kind: ObjectKind, id: [UInt8], name: String) throws -> CK_OBJECT_HANDLE {
        let objectClass = kind == .certificate ? CK_OBJECT_CLASS(CKO_CERTIFICATE) : CK_OBJECT_CLASS(CKO_PRIVATE_KEY)
        let found = try find([(CK_ATTRIBUTE_TYPE(CKA_CLASS), ulongBytes(objectClass)), (CK_ATTRIBUTE_TYPE(CKA_ID), id)])
        let what = kind == .certificate ? "certificate" : "private key"
        guard let first = found.first else { throw DCError(.noSuchObject, "no \(what) with this id on the token", subject: name) }
        guard found.count == 1 else { throw DCError(.multipleObjects, "\(found.count) \(what)s have this id", subject: name) }
        return first
    }
}
