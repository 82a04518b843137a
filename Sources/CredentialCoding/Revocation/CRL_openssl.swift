internal import COpenSSL
import DerivedCredentials
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// A certificate revocation list (RFC 5280 `CertificateList`), as DER.
///
/// Reading one checks only that it is a well-formed CRL; whether it is signed by the right issuer
/// and still current is decided where it is used (``RevocationChecker``), against a certificate.
public struct CertificateRevocationList: Sendable, Hashable {
    /// One revoked certificate in the list.
    public struct Entry: Sendable, Hashable, Codable {
        /// The certificate's serial number in upper-case hex, as OpenSSL prints it.
        public var serial: String
        /// When it was revoked.
        public var date: Date
        /// Why, when the list says.
        public var reason: RevocationReason?

        /// An entry for the certificate with `serial` (hex), revoked at `date` for `reason`.
        public init(serial: String, date: Date, reason: RevocationReason?) {
            self.serial = serial
            self.date = date
            self.reason = reason
        }
    }

    /// The DER encoding.
    public let derBytes: [UInt8]
    /// The issuer's name (RFC 2253).
    public let issuer: String
    /// When the list was made.
    public let thisUpdate: Date
    /// When the next list is due; past it, the list is stale and is not used.
    public let nextUpdate: Date?
    /// The cRLNumber, when present.
    public let number: UInt64?
    /// The revoked certificates.
    public let entries: [Entry]

    /// Reads a CRL from DER or PEM (`X509 CRL`) bytes: exactly one list, nothing after it.
    public init(reading bytes: [UInt8]) throws {
        var der = bytes
        if PEMDocument.looksLikePEM(bytes) {
            let blocks = try PEMDocument(parsing: bytes).blocks
            guard blocks.count == 1, blocks[0].label == "X509 CRL" else {
                throw DCError(
                    .malformedInput, "not one PEM 'X509 CRL' block",
                    hint: "give one CRL, as DER or PEM (openssl crl -outform DER|PEM)")
            }
            der = blocks[0].der
        }
        let list = try CRLObject(der: der)
        self.derBytes = der
        self.issuer = X509Certificate.format(X509_CRL_get_issuer(list.pointer))
        guard let thisUpdate = X509Certificate.date(X509_CRL_get0_lastUpdate(list.pointer)) else {
            throw DCError(.malformedInput, "the CRL has no readable thisUpdate")
        }
        self.thisUpdate = thisUpdate
        self.nextUpdate = X509Certificate.date(X509_CRL_get0_nextUpdate(list.pointer))
        self.number = list.number
        self.entries = list.entries
    }

    /// `serial` (hex, any case, leading zeros allowed) as OpenSSL prints serial numbers: upper
    /// case, no leading zero bytes. Throws `DCError/Code/usage` for anything but 1–40 hex digits.
    public static func canonicalSerial(_ serial: String) throws -> String { try SerialNumber.canonical(serial) }

    /// The list as one PEM `X509 CRL` block.
    public var pem: [UInt8] { derBytes.withUnsafeBytes { PEMDocument.encode(label: "X509 CRL", der: $0) } }

    /// Makes and signs a version 2 CRL with `entries`, valid from `thisUpdate` to `nextUpdate`,
    /// numbered `number`, with the authorityKeyIdentifier of `signer`'s certificate.
    public static func issue(
        _ entries: [Entry], number: UInt64, thisUpdate: Date, nextUpdate: Date, by signer: CertificateSigner
    ) throws -> CertificateRevocationList {
        guard let issuer = signer.issuerCertificate else {
            throw DCError(.usage, "a CRL is signed by a CA with a certificate")
        }
        guard thisUpdate < nextUpdate else { throw DCError(.usage, "nextUpdate must be after thisUpdate") }
        guard let crl = X509_CRL_new() else { throw OpenSSL.failure("X509_CRL_new") }
        let list = CRLObject(taking: crl)
        guard X509_CRL_set_version(crl, 1) == 1,
            X509_CRL_set_issuer_name(crl, X509_get_subject_name(issuer.pointer)) == 1
        else { throw OpenSSL.failure("X509_CRL_set_issuer_name") }
        try withTime(thisUpdate) {
            guard X509_CRL_set1_lastUpdate(crl, $0) == 1 else { throw OpenSSL.failure("lastUpdate") }
        }
        try withTime(nextUpdate) {
            guard X509_CRL_set1_nextUpdate(crl, $0) == 1 else { throw OpenSSL.failure("nextUpdate") }
        }
        for entry in entries {
            guard let revoked = X509_REVOKED_new() else { throw OpenSSL.failure("X509_REVOKED_new") }
            var added = false
            defer { if !added { X509_REVOKED_free(revoked) } }
            let serial = try SerialNumber.integer(hex: entry.serial)
            defer { ASN1_INTEGER_free(serial) }
            guard X509_REVOKED_set_serialNumber(revoked, serial) == 1 else { throw OpenSSL.failure("serial") }
            try withTime(entry.date) {
                guard X509_REVOKED_set_revocationDate(revoked, $0) == 1 else { throw OpenSSL.failure("revocationDate") }
            }
            if let reason = entry.reason {
                guard let code = ASN1_ENUMERATED_new() else { throw OpenSSL.failure("ASN1_ENUMERATED_new") }
                defer { ASN1_ENUMERATED_free(code) }
                guard ASN1_ENUMERATED_set(code, Int(reason.code)) == 1,
                    X509_REVOKED_add1_ext_i2d(revoked, NID_crl_reason, UnsafeMutableRawPointer(code), 0, 0) == 1
                else { throw OpenSSL.failure("reasonCode") }
            }
            guard X509_CRL_add0_revoked(crl, revoked) == 1 else { throw OpenSSL.failure("X509_CRL_add0_revoked") }
            added = true
        }
        guard X509_CRL_sort(crl) == 1 else { throw OpenSSL.failure("X509_CRL_sort") }
        guard let crlNumber = ASN1_INTEGER_new() else { throw OpenSSL.failure("ASN1_INTEGER_new") }
        defer { ASN1_INTEGER_free(crlNumber) }
        guard ASN1_INTEGER_set_uint64(crlNumber, number) == 1,
            X509_CRL_add1_ext_i2d(crl, NID_crl_number, UnsafeMutableRawPointer(crlNumber), 0, 0) == 1
        else { throw OpenSSL.failure("cRLNumber") }
        var context = X509V3_CTX()
        X509V3_set_ctx(&context, issuer.pointer, nil, nil, crl, 0)
        guard let keyIdentifier = X509V3_EXT_nconf(nil, &context, "authorityKeyIdentifier", "keyid:always") else {
            throw OpenSSL.failure("authorityKeyIdentifier")
        }
        defer { X509_EXTENSION_free(keyIdentifier) }
        guard X509_CRL_add_ext(crl, keyIdentifier, -1) == 1 else { throw OpenSSL.failure("X509_CRL_add_ext") }
        guard X509_CRL_sign(crl, signer.signingKey.pointer, CertificateBuilding.digest(for: signer.signingKey)) > 0
        else { throw OpenSSL.failure("X509_CRL_sign") }
        guard let der = encodeDER({ i2d_X509_CRL(list.pointer, $0) }) else { throw OpenSSL.failure("i2d_X509_CRL") }
        return try CertificateRevocationList(reading: der)
    }

    /// Runs `body` with a new `ASN1_TIME` for `date`.
    private static func withTime(_ date: Date, _ body: (UnsafeMutablePointer<ASN1_TIME>) throws -> Void) throws {
        guard let time = ASN1_TIME_set(nil, time_t(date.timeIntervalSince1970)) else {
            throw OpenSSL.failure("ASN1_TIME_set")
        }
        defer { ASN1_TIME_free(time) }
        try body(time)
    }
}

/// The one owner of an `X509_CRL`.
final class CRLObject {
    let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) { self.pointer = pointer }

    /// Decodes strict DER: the bytes must be exactly one DER CRL.
    convenience init(der: [UInt8]) throws {
        try DER.validate(der, what: "CRL")
        guard let crl = der.decodeDER({ d2i_X509_CRL(nil, $0, $1) }, free: X509_CRL_free) else {
            throw DCError(.malformedInput, "not a CRL", underlying: OpenSSLError.drain())
        }
        self.init(taking: crl)
    }

    deinit { X509_CRL_free(pointer) }

    var number: UInt64? {
        var critical: Int32 = 0
        guard let raw = X509_CRL_get_ext_d2i(pointer, NID_crl_number, &critical, nil) else {
            OpenSSLError.clear()
            return nil
        }
        let integer = raw.assumingMemoryBound(to: ASN1_INTEGER.self)
        defer { ASN1_INTEGER_free(integer) }
        var value: UInt64 = 0
        guard ASN1_INTEGER_get_uint64(&value, integer) == 1 else {
            OpenSSLError.clear()
            return nil
        }
        return value
    }

    var entries: [CertificateRevocationList.Entry] {
        guard let revoked = X509_CRL_get_REVOKED(pointer) else { return [] }
        return (0..<dc_sk_X509_REVOKED_num(revoked)).compactMap { index in
            guard let item = dc_sk_X509_REVOKED_value(revoked, index) else { return nil }
            return Self.entry(item)
        }
    }

    static func entry(_ item: OpaquePointer) -> CertificateRevocationList.Entry {
        let serial = SerialNumber.hex(X509_REVOKED_get0_serialNumber(item))
        let date = X509Certificate.date(X509_REVOKED_get0_revocationDate(item)) ?? .distantPast
        var critical: Int32 = 0
        var reason: RevocationReason?
        if let raw = X509_REVOKED_get_ext_d2i(item, NID_crl_reason, &critical, nil) {
            let code = raw.assumingMemoryBound(to: ASN1_ENUMERATED.self)
            reason = RevocationReason(code: Int32(truncatingIfNeeded: ASN1_ENUMERATED_get(code)))
            ASN1_ENUMERATED_free(code)
        }
        OpenSSLError.clear()
        return .init(serial: serial, date: date, reason: reason)
    }
}

/// Serial numbers between OpenSSL's `ASN1_INTEGER` and the upper-case hex that `index.txt`,
/// `openssl x509 -serial` and our records use.
enum SerialNumber {
    static func hex(_ integer: UnsafePointer<ASN1_INTEGER>?) -> String {
        guard let integer, let number = ASN1_INTEGER_to_BN(integer, nil) else { return "" }
        defer { BN_free(number) }
        guard let text = BN_bn2hex(number) else { return "" }
        defer { CRYPTO_free(text, #fileID, #line) }
        return String(cString: text)
    }

    /// A new `ASN1_INTEGER` (the caller frees it) from 1–40 hex digits of a positive number.
    static func integer(hex: String) throws -> UnsafeMutablePointer<ASN1_INTEGER> {
        guard (1...40).contains(hex.utf8.count), hex.utf8.allSatisfy({ $0 < 0x80 && isxdigit(Int32($0)) != 0 }) else {
            throw DCError(.usage, "'\(hex.escapingControlCharacters)' is not a serial number in hex")
        }
        var number: OpaquePointer?
        guard BN_hex2bn(&number, hex) > 0, let number else { throw OpenSSL.failure("BN_hex2bn") }
        defer { BN_free(number) }
        guard let integer = BN_to_ASN1_INTEGER(number, nil) else { throw OpenSSL.failure("BN_to_ASN1_INTEGER") }
        return integer
    }

    /// The canonical form of a serial number given in hex: upper case, no leading zero bytes.
    static func canonical(_ hex: String) throws -> String {
        let integer = try integer(hex: hex)
        defer { ASN1_INTEGER_free(integer) }
        return Self.hex(integer)
    }
}
