import CredentialCoding
import DerivedCredentials

/// The key archive control of a certificate request (RFC 4211 6.4, `pkiArchiveOptions`, with
/// RFC 9480's `EncryptedKey`): the new private key, enveloped to the CA's key-archive certificate,
/// travels in the request's `controls` so that the CA can keep it for key recovery. OpenSSL 3.0
/// builds the request and the envelope (`OSSL_CMP_CTX_setup_CRM`, CMS) but has no setter for this
/// control, so the two tags around the envelope and the request's new `controls` are put together
/// here and checked by the strict DER reader; OpenSSL then parses the result back (it reads this
/// control's value as opaque ASN.1) and signs the proof of possession over it, control included.
enum ArchiveControl {
    /// The `AttributeTypeAndValue` of the control: `SEQUENCE { id-regCtrl-pkiArchiveOptions,
    /// encryptedPrivKey [0] { envelopedData [0] IMPLICIT EnvelopedData } }`. `identifier` is the
    /// DER of the OID, `envelope` a CMS `ContentInfo` of type `envelopedData`.
    static func control(identifier: [UInt8], envelope: [UInt8]) throws -> [UInt8] {
        let info = try DER.validate(envelope, what: "enveloped key")
        let fields = try DER.children(envelope, of: info)
        guard fields.count == 2, fields[1].identifier == 0xA0,
            let inner = try DER.children(envelope, of: fields[1]).first, inner.identifier == 0x30
        else { throw DCError(.malformedInput, "the enveloped key is not a CMS ContentInfo") }
        // EncryptedKey is a CHOICE, so its [0] in PKIArchiveOptions is explicit; EnvelopedData is
        // a SEQUENCE, whose tag the implicit [0] of envelopedData replaces.
        let envelopedData = DER.wrap(0xA0, Array(envelope[inner.content]))
        return DER.wrap(0x30, identifier + DER.wrap(0xA0, envelopedData))
    }

    /// `message`, a DER `CertReqMsg` that has no proof of possession yet, with `control` added
    /// after the controls its `CertRequest` already has (a `kur`'s oldCertID, say).
    static func insert(_ control: [UInt8], into message: [UInt8]) throws -> [UInt8] {
        let top = try DER.validate(message, what: "certificate request")
        let parts = try DER.children(message, of: top)
        guard let request = parts.first, request.identifier == 0x30 else {
            throw DCError(.malformedInput, "the certificate request has no CertRequest")
        }
        let fields = try DER.children(message, of: request)
        guard fields.count == 2 || fields.count == 3, fields[0].identifier == 0x02, fields[1].identifier == 0x30,
            fields.count == 2 || fields[2].identifier == 0x30
        else { throw DCError(.malformedInput, "the CertRequest is not certReqId, certTemplate and controls") }
        let controls = (fields.count == 3 ? Array(message[fields[2].content]) : []) + control
        let certRequest = DER.wrap(
            0x30, Array(message[fields[0].range]) + Array(message[fields[1].range]) + DER.wrap(0x30, controls))
        let rest = parts.dropFirst().flatMap { message[$0.range] }
        return DER.wrap(0x30, certRequest + rest)
    }
}
