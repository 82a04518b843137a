internal import COpenSSL
import DerivedCredentials
import FoundationEssentials

/// The one owner of an `X509`.
package final class X509Certificate {
    package let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit { X509_free(pointer) }

    /// Decodes strict DER: the bytes must be exactly one DER certificate.
    package convenience init(der: [UInt8]) throws {
        try DER.validate(der, what: "certificate")
        guard let x509 = der.decodeDER({ d2i_X509(nil, $0, $1) }, free: X509_free) else {
            throw DCError(.malformedInput, "not an X.509 certificate", underlying: OpenSSLError.drain())
        }
        self.init(taking: x509)
    }

    package convenience init(_ certificate: Certificate) throws {
        try self.init(der: certificate.derBytes)
    }

    func der() throws -> [UInt8] {
        guard let der = encodeDER({ i2d_X509(pointer, $0) }) else { throw OpenSSL.failure("i2d_X509") }
        return der
    }

    func subjectPublicKeyInfo() throws -> [UInt8] {
        guard let key = X509_get_X509_PUBKEY(pointer),
            let der = encodeDER({ i2d_X509_PUBKEY(key, $0) })
        else { throw OpenSSL.failure("i2d_X509_PUBKEY") }
        return der
    }

    var publicKey: PKey? { PKey.fromCertificate(self) }

    var subject: String { Self.format(X509_get_subject_name(pointer)) }
    var issuer: String { Self.format(X509_get_issuer_name(pointer)) }

    /// RFC 2253 form, UTF-8. Control characters are escaped by whoever prints it.
    static func format(_ name: OpaquePointer?) -> String {
        guard let name else { return "" }
        return (try? OpenSSL.string { bio in _ = X509_NAME_print_ex(bio, name, 0, dc_name_flags_rfc2253_utf8()) }) ?? ""
    }

    var serialNumberHex: String {
        guard let serial = X509_get0_serialNumber(pointer), let bn = ASN1_INTEGER_to_BN(serial, nil) else { return "" }
        defer { BN_free(bn) }
        guard let hex = BN_bn2hex(bn) else { return "" }
        defer { CRYPTO_free(hex, #fileID, #line) }
        return String(cString: hex)
    }

    var notBefore: Date? { Self.date(X509_get0_notBefore(pointer)) }
    var notAfter: Date? { Self.date(X509_get0_notAfter(pointer)) }

    static func date(_ time: UnsafePointer<ASN1_TIME>?) -> Date? {
        guard let time else { return nil }
        var tm = tm()
        guard ASN1_TIME_to_tm(time, &tm) == 1 else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&tm)))
    }

    /// The signature algorithm's short name and the digest it uses.
    var signature: (name: String, digestNID: Int32) {
        let nid = X509_get_signature_nid(pointer)
        var digest: Int32 = NID_undef
        var pkey: Int32 = NID_undef
        _ = OBJ_find_sigid_algs(nid, &digest, &pkey)
        let name = OBJ_nid2ln(nid).map { String(cString: $0) } ?? "unknown"
        return (name, digest)
    }

    /// keyUsage bits (`KU_*`), or nil when the extension is absent.
    var keyUsage: KeyUsage? {
        let bits = X509_get_key_usage(pointer)
        return bits == UInt32.max ? nil : KeyUsage(rawValue: bits)
    }

    /// Dotted OIDs of extendedKeyUsage, or nil when the extension is absent.
    var extendedKeyUsage: [ExtendedKeyUsage]? {
        var critical: Int32 = 0
        guard let raw = X509_get_ext_d2i(pointer, NID_ext_key_usage, &critical, nil) else {
            OpenSSLError.clear()
            return nil
        }
        let eku = OpaquePointer(raw)
        defer { dc_EXTENDED_KEY_USAGE_free(eku) }
        return (0..<dc_sk_ASN1_OBJECT_num(eku)).map {
            ExtendedKeyUsage(rawValue: Self.oid(dc_sk_ASN1_OBJECT_value(eku, $0)))
        }
    }

    /// The name `openssl x509 -text` prints for `object`: OpenSSL's long name
    /// (`TLS Web Client Authentication`), or the dotted OID when OpenSSL knows none.
    static func displayName(_ object: OpaquePointer?) -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        let length = OBJ_obj2txt(&buffer, Int32(buffer.count), object, 0)
        return length > 0 ? String(nulTerminated: buffer) : "?"
    }

    /// The certificatePolicies policy identifiers, in the certificate's order, each as its OID and
    /// the name `openssl x509 -text` prints; nil when the extension is absent.
    var certificatePolicies: [(oid: String, name: String)]? {
        var critical: Int32 = 0
        guard let raw = X509_get_ext_d2i(pointer, NID_certificate_policies, &critical, nil) else {
            OpenSSLError.clear()
            return nil
        }
        let policies = OpaquePointer(raw)
        defer { dc_certificate_policies_free(policies) }
        return (0..<dc_certificate_policies_num(policies)).map {
            let object = dc_certificate_policies_id(policies, $0)
            return (Self.oid(object), Self.displayName(object))
        }
    }

    /// Every extension as `openssl x509 -text` prints it (OpenSSL's `X509V3_extensions_print`,
    /// which that command calls): the `X509v3 extensions:` title at an indent of 8, each
    /// extension's name and `critical` at 12, its value as `X509V3_EXT_print` renders it at 16
    /// (the raw bytes when OpenSSL has no printer for it). Empty when the certificate has none.
    var extensionsText: String {
        guard let extensions = X509_get0_extensions(pointer), dc_sk_X509_EXTENSION_num(extensions) > 0 else {
            return ""
        }
        let text =
            (try? OpenSSL.string(fromBIO: { _ = X509V3_extensions_print($0, "X509v3 extensions", extensions, 0, 8) }))
            ?? ""
        OpenSSLError.clear()
        return text
    }

    static func oid(_ object: OpaquePointer?) -> String {
        var buffer = [CChar](repeating: 0, count: 128)
        let length = OBJ_obj2txt(&buffer, Int32(buffer.count), object, 1)
        return length > 0 ? String(nulTerminated: buffer) : "?"
    }

    /// subjectAltName entries as `email:…`, `URI:…`, `DNS:…`, `UPN:…` or `other:<oid>`; empty when absent.
    var subjectAlternativeNames: [String] {
        var critical: Int32 = 0
        guard let raw = X509_get_ext_d2i(pointer, NID_subject_alt_name, &critical, nil) else {
            OpenSSLError.clear()
            return []
        }
        let names = OpaquePointer(raw)
        defer { dc_general_names_free(names) }
        func text(_ string: UnsafeMutablePointer<ASN1_STRING>?) -> String {
            guard let string, let data = ASN1_STRING_get0_data(string) else { return "" }
            return String(
                decoding: UnsafeBufferPointer(start: data, count: Int(ASN1_STRING_length(string))), as: UTF8.self)
        }
        return (0..<dc_general_names_num(names)).compactMap { index in
            guard let name = dc_general_names_value(names, index)?.pointee else { return nil }
            switch name.type {
            case GEN_EMAIL: return "email:" + text(name.d.rfc822Name)
            case GEN_URI: return "URI:" + text(name.d.uniformResourceIdentifier)
            case GEN_DNS: return "DNS:" + text(name.d.dNSName)
            case GEN_OTHERNAME:
                guard let other = name.d.otherName?.pointee else { return nil }
                let oid = Self.oid(other.type_id)
                if oid == "1.3.6.1.4.1.311.20.2.3", let value = other.value?.pointee, value.type == V_ASN1_UTF8STRING {
                    return "UPN:" + text(value.value.utf8string)
                }
                return "other:" + oid
            default: return "other"
            }
        }
    }

    /// The subject's commonName, if it has exactly one.
    var commonName: String? {
        let name = X509_get_subject_name(pointer)
        let index = X509_NAME_get_index_by_NID(name, NID_commonName, -1)
        guard index >= 0, X509_NAME_get_index_by_NID(name, NID_commonName, index) < 0,
            let entry = X509_NAME_get_entry(name, index), let data = X509_NAME_ENTRY_get_data(entry)
        else { return nil }
        var utf8: UnsafeMutablePointer<UInt8>?
        let length = ASN1_STRING_to_UTF8(&utf8, data)
        guard length >= 0, let utf8 else { return nil }
        defer { CRYPTO_free(utf8, #fileID, #line) }
        return String(decoding: UnsafeBufferPointer(start: utf8, count: Int(length)), as: UTF8.self)
    }

    /// basicConstraints: nil when absent, otherwise whether cA is true.
    package var isCA: Bool? {
        var critical: Int32 = 0
        guard let raw = X509_get_ext_d2i(pointer, NID_basic_constraints, &critical, nil) else {
            OpenSSLError.clear()
            return nil
        }
        let constraints = raw.assumingMemoryBound(to: BASIC_CONSTRAINTS.self)
        defer { BASIC_CONSTRAINTS_free(constraints) }
        return constraints.pointee.ca != 0
    }

    struct Extension {
        var oid: String
        var name: String
        var critical: Bool
        var supported: Bool
    }

    var extensions: [Extension] {
        (0..<X509_get_ext_count(pointer)).compactMap { index in
            guard let ext = X509_get_ext(pointer, index) else { return nil }
            let object = X509_EXTENSION_get_object(ext)
            let nid = OBJ_obj2nid(object)
            let name = nid == NID_undef ? Self.oid(object) : (OBJ_nid2sn(nid).map { String(cString: $0) } ?? "?")
            return Extension(
                oid: Self.oid(object), name: name, critical: X509_EXTENSION_get_critical(ext) != 0,
                supported: X509_supported_extension(ext) != 0)
        }
    }

}

extension ExtendedKeyUsage {
    /// The name `openssl x509 -text` prints for this purpose (`TLS Web Client Authentication`,
    /// `E-mail Protection`), or the dotted OID when OpenSSL knows none.
    public var name: String {
        guard let object = OBJ_txt2obj(rawValue, 1) else {
            OpenSSLError.clear()
            return rawValue
        }
        defer { ASN1_OBJECT_free(object) }
        return X509Certificate.displayName(object)
    }
}

extension X509Certificate {
    /// Verifies the chain from this certificate to one of `anchors`, with `intermediates` as
    /// untrusted helpers, at time `now` (or ignoring time). Returns nil when it verifies, or
    /// OpenSSL's reason.
    package func verifyChain(
        anchors: [X509Certificate], intermediates: [X509Certificate], at now: Date, checkTime: Bool
    )
        -> String?
    {
        guard let store = X509_STORE_new() else { return "cannot create a certificate store" }
        defer { X509_STORE_free(store) }
        for anchor in anchors { X509_STORE_add_cert(store, anchor.pointer) }
        guard let untrusted = dc_sk_X509_new_null() else { return "cannot allocate" }
        defer { dc_sk_X509_free(untrusted) }
        for certificate in intermediates { _ = dc_sk_X509_push(untrusted, certificate.pointer) }
        guard let context = X509_STORE_CTX_new() else { return "cannot allocate" }
        defer { X509_STORE_CTX_free(context) }
        guard X509_STORE_CTX_init(context, store, pointer, untrusted) == 1 else {
            OpenSSLError.clear()
            return "cannot initialise verification"
        }
        if checkTime {
            X509_STORE_CTX_set_time(context, 0, time_t(now.timeIntervalSince1970))
        } else {
            X509_STORE_CTX_set_flags(context, UInt(X509_V_FLAG_NO_CHECK_TIME))
        }
        let result = X509_verify_cert(context)
        OpenSSLError.clear()
        if result == 1 { return nil }
        return String(cString: X509_verify_cert_error_string(Int(X509_STORE_CTX_get_error(context))))
    }
}
