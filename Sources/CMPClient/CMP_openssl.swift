internal import COpenSSL
internal import COpenSSLTLS
import CredentialCoding
import DerivedCredentials
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// The CMP client (RFC 4210, profiled by RFC 9483): every message is built, protected, sent over
/// HTTP, checked and answered by OpenSSL's `OSSL_CMP_*` client. What is ours: turning the
/// configuration into one `OSSL_CMP_CTX`, and OpenSSL's error queue and the CA's status into one
/// `DCError` whose code says what to do (`DCError.Code.caRefused` and its neighbours).
public enum CMPClient {
    /// Asks the CA for a certificate for `newKey` in one `ir`, `cr` or `kur` transaction, polling
    /// while the CA answers "waiting" (until ``CMPSession/totalTimeout``), and confirms it. The
    /// certificate is accepted only when it is for `newKey` and chains to the trust anchors, and
    /// the CA's answers only when their protection verifies (the MAC with our secret, or the
    /// signature with the server certificate or the trust anchors). `subject` is required for
    /// `ir` and `cr`; `kur` takes the old certificate's subject when it is nil. With `tag`, the
    /// request asks for that tag's key usage and purposes (CredentialCoding's `TagProfile`) in its
    /// template: a CA that takes requested extensions issues them, one that decides by its own
    /// profile ignores them. With `archiveTo`, the CA's key-archive certificate, the private key
    /// goes to the CA for archival, enveloped to that certificate in the request's
    /// `pkiArchiveOptions` control (RFC 4211 6.4); only a key we hold can be. Blocks the
    /// calling thread: run it on a thread of its own.
    public static func enroll(
        _ type: CMPRequestType, newKey: CMPNewKey, subject: DistinguishedName?, tag: CredentialTag? = nil,
        archiveTo recipient: Certificate? = nil, session: CMPSession
    ) throws -> CMPIssued {
        OpenSSLError.clear()
        let context = try CMPContext(session)
        // The key that proves possession by signing the request; nil when we vouch for it.
        let signer: PKey?
        var archived: (key: PrivateKey, recipient: Certificate)?
        switch newKey {
        case .privateKey(let key):
            guard let pkey = PKey.from(key) else {
                throw DCError(.malformedInput, "the key to certify cannot be read")
            }
            try context.setNewKey(pkey, isPrivate: true)
            if let tag { try context.requestExtensions(TagProfile.of(tag), ec: pkey.curveName != nil) }
            signer = pkey
            archived = recipient.map { (key, $0) }
        case .vouchedPublicKey(let spki):
            guard recipient == nil else {
                throw DCError(.usage, "only a key we hold can be sent for archival, not a vouched public key")
            }
            guard let pkey = PKey.fromSubjectPublicKeyInfo(spki) else {
                throw DCError(.malformedInput, "the public key to certify is not a SubjectPublicKeyInfo")
            }
            try context.setNewKey(pkey, isPrivate: false)
            if let tag { try context.requestExtensions(TagProfile.of(tag), ec: pkey.curveName != nil) }
            // OpenSSL's client refuses to send a request without a key for the proof unless its
            // context says the proof is raVerified (see `CMPContext.certificateRequest`).
            guard OSSL_CMP_CTX_set_option(context.pointer, OSSL_CMP_OPT_POPO_METHOD, OSSL_CRMF_POPO_RAVERIFIED) == 1
            else { throw OpenSSL.failure("OSSL_CMP_CTX_set_option(POPO_METHOD)") }
            signer = nil
        }
        if let subject {
            let name = try CertificateBuilding.makeName(subject)
            defer { X509_NAME_free(name) }
            guard OSSL_CMP_CTX_set1_subjectName(context.pointer, name) == 1 else {
                throw OpenSSL.failure("OSSL_CMP_CTX_set1_subjectName")
            }
        } else if type != .kur {
            throw DCError(.usage, "a CMP \(type.rawValue) needs the subject to ask for")
        }
        let body: Int32 =
            switch type {
            case .ir: OSSL_CMP_IR
            case .cr: OSSL_CMP_CR
            case .kur: OSSL_CMP_KUR
            }
        let request = try context.certificateRequest(keyUpdate: type == .kur, signer: signer, archiving: archived)
        // The request lives until the transaction that copies it has run.
        let sent = withExtendedLifetime(request) {
            OSSL_CMP_exec_certreq(context.pointer, body, request.pointer) != nil
        }
        guard sent, let issued = OSSL_CMP_CTX_get0_newCert(context.pointer) else {
            throw context.failure("enrolling (\(type.rawValue))")
        }
        guard let der = encodeDER({ i2d_X509(issued, $0) }) else { throw OpenSSL.failure("i2d_X509") }
        return CMPIssued(
            certificate: Certificate(derBytes: der),
            caPublications: try certificates(OSSL_CMP_CTX_get1_caPubs(context.pointer)),
            extraCertificates: try certificates(OSSL_CMP_CTX_get1_extraCertsIn(context.pointer)),
            sentForArchival: archived != nil,
            grantedWithModifications: OSSL_CMP_CTX_get_status(context.pointer) == OSSL_CMP_PKISTATUS_grantedWithMods)
    }

    /// Asks the CA to revoke `certificate` (one `rr` transaction) for `reason`, a CRLReason
    /// (RFC 5280: 5 is cessationOfOperation). A certificate the CA says is revoked already
    /// (`certRevoked`, the answer to a revocation asked for again) counts as revoked: a command
    /// that stopped half-way can be run again. Blocks the calling thread.
    @discardableResult
    public static func revoke(_ certificate: Certificate, reason: Int32, session: CMPSession) throws
        -> CMPRevocation
    {
        OpenSSLError.clear()
        let context = try CMPContext(session)
        let old = try X509Certificate(certificate)
        guard OSSL_CMP_CTX_set1_oldCert(context.pointer, old.pointer) == 1,
            OSSL_CMP_CTX_set_option(context.pointer, OSSL_CMP_OPT_REVOCATION_REASON, reason) == 1
        else { throw OpenSSL.failure("setting up the revocation request") }
        guard OSSL_CMP_exec_RR_ses(context.pointer) == 1 else {
            if OSSL_CMP_CTX_get_status(context.pointer) == OSSL_CMP_PKISTATUS_rejection,
                OSSL_CMP_CTX_get_failInfoCode(context.pointer) & (1 << OSSL_CMP_PKIFAILUREINFO_certRevoked) != 0
            {
                OpenSSLError.clear()
                return .revokedAlready
            }
            throw context.failure("revoking")
        }
        return .revoked
    }

    /// The certificates of a stack OpenSSL handed over (`get1`), as DER; the stack is freed.
    private static func certificates(_ stack: OpaquePointer?) throws -> [Certificate] {
        guard let stack else { return [] }
        defer { dc_sk_X509_pop_free(stack) }
        return try (0..<dc_sk_X509_num(stack)).map { index in
            guard let der = encodeDER({ i2d_X509(dc_sk_X509_value(stack, index), $0) }) else {
                throw OpenSSL.failure("i2d_X509")
            }
            return Certificate(derBytes: der)
        }
    }
}

/// The one owner of an `OSSL_CMP_CTX`, set up from a ``CMPSession``. The certificate store the
/// context's confirmation callback checks new certificates against is owned here too, and lives
/// as long as the context (it is freed after it).
final class CMPContext {
    let pointer: OpaquePointer
    let server: CMPServerAddress
    private let pinned: Bool
    private var newCertificateTrust: CertificateStore?
    /// For an `https` server; freed after the context, whose transfers borrow it.
    private var tls: CMPTLSContext?

    init(_ session: CMPSession) throws {
        OpenSSL.ensureInitialized()
        guard let context = OSSL_CMP_CTX_new(nil, nil) else { throw OpenSSL.failure("OSSL_CMP_CTX_new") }
        pointer = context
        server = session.server
        CMPLog.begin()
        // OpenSSL's own progress lines are not ours to print: they are kept for the thrown error
        // (some failures, such as an answer from another sender than the pinned one, are told
        // only there, not in the error queue).
        _ = OSSL_CMP_CTX_set_log_cb(pointer) { _, _, _, level, message in
            if let message { CMPLog.append(level: level, String(cString: message)) }
            return 1
        }
        pinned = session.serverCertificate != nil
        guard OSSL_CMP_CTX_set1_server(pointer, session.server.host) == 1,
            OSSL_CMP_CTX_set_serverPort(pointer, Int32(session.server.port)) == 1,
            OSSL_CMP_CTX_set1_serverPath(pointer, session.server.path) == 1,
            OSSL_CMP_CTX_set_option(pointer, OSSL_CMP_OPT_MSG_TIMEOUT, Int32(session.messageTimeout)) == 1,
            OSSL_CMP_CTX_set_option(pointer, OSSL_CMP_OPT_TOTAL_TIMEOUT, Int32(session.totalTimeout)) == 1
        else { throw OpenSSL.failure("setting the CMP server") }
        if session.server.usesTLS {
            let tls = try CMPTLSContext(
                host: session.server.host, port: session.server.port, timeout: session.messageTimeout,
                anchors: session.tlsTrustAnchors)
            self.tls = tls
            // OpenSSL's client asks for TLS when the callback's argument is set.
            guard OSSL_CMP_CTX_set_http_cb(pointer, CMPTLSContext.callback) == 1,
                OSSL_CMP_CTX_set_http_cb_arg(pointer, tls.argument) == 1
            else { throw OpenSSL.failure("OSSL_CMP_CTX_set_http_cb") }
        }
        switch session.protection {
        case .sharedSecret(let reference, let secret):
            let referenceBytes = Array(reference.utf8)
            guard OSSL_CMP_CTX_set1_referenceValue(pointer, referenceBytes, Int32(referenceBytes.count)) == 1,
                secret.withUnsafeBytes({
                    OSSL_CMP_CTX_set1_secretValue(
                        pointer, $0.bindMemory(to: UInt8.self).baseAddress, Int32($0.count))
                }) == 1
            else { throw OpenSSL.failure("setting the shared secret") }
        case .signature(let certificate, let key, let chain):
            let x509 = try X509Certificate(certificate)
            guard let pkey = PKey.from(key) else {
                throw DCError(.malformedInput, "the signing key for CMP cannot be read")
            }
            guard OSSL_CMP_CTX_set1_cert(pointer, x509.pointer) == 1, OSSL_CMP_CTX_set1_pkey(pointer, pkey.pointer) == 1
            else {
                throw DCError(
                    .keyCertificateMismatch, "the CMP signing key does not belong to its certificate",
                    underlying: OpenSSLError.drain())
            }
            if !chain.isEmpty {
                let owners = try chain.map(X509Certificate.init)
                guard let stack = dc_sk_X509_new_null() else { throw OpenSSL.failure("allocating") }
                defer { dc_sk_X509_free(stack) }
                for owner in owners { _ = dc_sk_X509_push(stack, owner.pointer) }
                // set1 takes its own references: the owners may go after it, not before.
                guard withExtendedLifetime(owners, { OSSL_CMP_CTX_set1_untrusted(pointer, stack) }) == 1 else {
                    throw OpenSSL.failure("OSSL_CMP_CTX_set1_untrusted")
                }
            }
        }
        // The store for the CA's signed answers, which the context takes (set0).
        let answers = try CertificateStore(session.trustAnchors)
        guard OSSL_CMP_CTX_set0_trustedStore(pointer, answers.pointer) == 1 else {
            throw OpenSSL.failure("OSSL_CMP_CTX_set0_trustedStore")
        }
        answers.release()
        if let pinned = session.serverCertificate {
            let x509 = try X509Certificate(pinned)
            guard OSSL_CMP_CTX_set1_srvCert(pointer, x509.pointer) == 1 else {
                throw OpenSSL.failure("OSSL_CMP_CTX_set1_srvCert")
            }
        }
        // A new certificate is confirmed only when it chains to the trust anchors: OpenSSL's own
        // callback, with the store it checks against as its argument (kept by this owner).
        let issued = try CertificateStore(session.trustAnchors)
        newCertificateTrust = issued
        guard OSSL_CMP_CTX_set_certConf_cb(pointer, OSSL_CMP_certConf_cb) == 1,
            OSSL_CMP_CTX_set_certConf_cb_arg(pointer, UnsafeMutableRawPointer(issued.pointer)) == 1
        else { throw OpenSSL.failure("OSSL_CMP_CTX_set_certConf_cb") }
    }

    deinit {
        OSSL_CMP_CTX_free(pointer)
        CMPLog.end()
    }

    /// Hands the context its own reference to `key`, the key to certify.
    func setNewKey(_ key: PKey, isPrivate: Bool) throws {
        guard EVP_PKEY_up_ref(key.pointer) == 1 else { throw OpenSSL.failure("EVP_PKEY_up_ref") }
        guard OSSL_CMP_CTX_set0_newPkey(pointer, isPrivate ? 1 : 0, key.pointer) == 1 else {
            EVP_PKEY_free(key.pointer)
            throw OpenSSL.failure("OSSL_CMP_CTX_set0_newPkey")
        }
    }

    /// The certificate request (CRMF, RFC 4211) exactly as OpenSSL's client would make it from
    /// this context (`OSSL_CMP_CTX_setup_CRM`: template, extensions, a `kur`'s oldCertID), with
    /// the key archive control when `archiving` is given, and then its proof of possession: a
    /// signature by `signer` over the whole request, controls included, or, with no signer,
    /// `raVerified`: the key's holder proved possession to us (a card's signature over our
    /// challenge), not to the CA, and we vouch for it as its registration authority (RFC 4211 4.1).
    func certificateRequest(
        keyUpdate: Bool, signer: PKey?, archiving: (key: PrivateKey, recipient: Certificate)?
    ) throws -> CRMFMessage {
        // 0 is the certReqId OpenSSL's client gives its one request (its OSSL_CMP_CERTREQID).
        guard let made = OSSL_CMP_CTX_setup_CRM(pointer, keyUpdate ? 1 : 0, 0) else {
            throw OpenSSL.failure("OSSL_CMP_CTX_setup_CRM")
        }
        var request = CRMFMessage(made)
        if let archiving {
            guard let der = encodeDER({ i2d_OSSL_CRMF_MSG(request.pointer, $0) }) else {
                throw OpenSSL.failure("i2d_OSSL_CRMF_MSG")
            }
            let control = try ArchiveControl.control(
                identifier: try ArchiveControl.identifier(),
                envelope: try ArchiveControl.envelope(archiving.key, to: archiving.recipient))
            guard
                let parsed = try ArchiveControl.insert(control, into: der).decodeDER(
                    { d2i_OSSL_CRMF_MSG(nil, $0, $1) }, free: OSSL_CRMF_MSG_free)
            else { throw OpenSSL.failure("d2i_OSSL_CRMF_MSG (the request with its archive control)") }
            request = CRMFMessage(parsed)
        }
        let digest = EVP_get_digestbyname(OBJ_nid2sn(OSSL_CMP_CTX_get_option(pointer, OSSL_CMP_OPT_DIGEST_ALGNID)))
        guard
            OSSL_CRMF_MSG_create_popo(
                signer == nil ? OSSL_CRMF_POPO_RAVERIFIED : OSSL_CRMF_POPO_SIGNATURE, request.pointer,
                signer?.pointer, digest, nil, nil) == 1
        else { throw OpenSSL.failure("OSSL_CRMF_MSG_create_popo") }
        return request
    }

    /// Asks for `profile`'s key usage and purposes, as the certificate template's extensions
    /// (RFC 4211 5: `extensions`), which the context takes.
    func requestExtensions(_ profile: TagProfile, ec: Bool) throws {
        var stack: OpaquePointer?
        var context = X509V3_CTX()
        X509V3_set_ctx(&context, nil, nil, nil, nil, 0)
        for (name, value) in [
            ("keyUsage", "critical," + profile.requiredKeyUsage(ec: ec).names.joined(separator: ",")),
            ("extendedKeyUsage", profile.issuedPurposes.map(\.rawValue).joined(separator: ",")),
        ] {
            guard let ext = X509V3_EXT_nconf(nil, &context, name, value) else {
                dc_sk_X509_EXTENSION_pop_free(stack)
                throw OpenSSL.failure("X509V3_EXT_nconf(\(name))")
            }
            defer { X509_EXTENSION_free(ext) }
            // X509v3_add_ext adds a copy, making the stack when there is none.
            guard X509v3_add_ext(&stack, ext, -1) != nil else {
                dc_sk_X509_EXTENSION_pop_free(stack)
                throw OpenSSL.failure("X509v3_add_ext")
            }
        }
        guard OSSL_CMP_CTX_set0_reqExtensions(pointer, stack) == 1 else {
            dc_sk_X509_EXTENSION_pop_free(stack)
            throw OpenSSL.failure("OSSL_CMP_CTX_set0_reqExtensions")
        }
    }

    /// The CA's status as OpenSSL prints it (`PKIStatus: rejection; PKIFailureInfo: badPOP; …`),
    /// or nil when no answer carried one.
    var statusText: String? {
        guard OSSL_CMP_CTX_get_status(pointer) >= 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: 512)
        guard OSSL_CMP_CTX_snprint_PKIStatus(pointer, &buffer, buffer.count) != nil else { return nil }
        return String(nulTerminated: buffer)
    }

    /// The failed transaction as one error: OpenSSL's error queue, drained, and the CA's status
    /// decide the code.
    func failure(_ what: String) -> DCError {
        let entries = OpenSSLError.drainEntries()
        var reasons = entries.map(\.text)
        let cmpReasons = Set(entries.filter { $0.library == ERR_LIB_CMP }.map(\.reason))
        let libraries = Set(entries.map(\.library))
        let status = OSSL_CMP_CTX_get_status(pointer)
        let failInfo = OSSL_CMP_CTX_get_failInfoCode(pointer)
        if let text = statusText { reasons.append(text) }
        let logged = CMPLog.lines()
        // Warnings and errors, and the lines that say what did not match.
        reasons += logged.filter { $0.level <= OSSL_CMP_LOG_WARNING || $0.text.contains("does not match") }.map {
            String($0.text.drop { $0 == " " })
        }
        let cause = OpenSSLError(reasons: reasons)
        let subject = server.description
        let tlsFailure = CMPLog.tlsVerifyFailure()
        if tlsFailure != nil
            || entries.contains(where: { $0.library == ERR_LIB_SSL && $0.reason == SSL_R_CERTIFICATE_VERIFY_FAILED })
        {
            return DCError(
                .caTLSNotTrusted,
                "\(what): the CMP server's TLS certificate is not trusted: \(tlsFailure ?? "certificate verify failed")",
                subject: subject, underlying: cause)
        }
        if cmpReasons.contains(CMP_R_WRONG_PBM_VALUE) {
            return DCError(
                .caRefused,
                "\(what): the CA's answer does not verify with our shared secret (a wrong secret or reference)",
                subject: subject, underlying: cause)
        }
        if cmpReasons.contains(CMP_R_SRVCERT_DOES_NOT_VALIDATE_MSG)
            || (pinned && logged.contains { $0.text.contains("does not match expected sender") })
        {
            return DCError(
                .caServerMismatch, "\(what): the CA's answer is not signed by the configured server certificate",
                subject: subject, underlying: cause)
        }
        if !cmpReasons.isDisjoint(with: [
            CMP_R_NO_SUITABLE_SENDER_CERT, CMP_R_ERROR_VALIDATING_SIGNATURE, CMP_R_ERROR_VALIDATING_PROTECTION,
            CMP_R_MISSING_PROTECTION, CMP_R_MISSING_TRUST_STORE,
        ]) {
            return DCError(
                .caAnswerNotTrusted, "\(what): the CA's answer is not signed by a server the trust anchors vouch for",
                subject: subject, underlying: cause)
        }
        if cmpReasons.contains(CMP_R_CERTIFICATE_NOT_ACCEPTED) {
            return DCError(
                .caAnswerNotTrusted,
                "\(what): the issued certificate was refused (not for our key, or not chaining to the trust anchors)",
                subject: subject, underlying: cause)
        }
        if status == OSSL_CMP_PKISTATUS_waiting || cmpReasons.contains(CMP_R_POLLING_FAILED)
            || (cmpReasons.contains(CMP_R_TOTAL_TIMEOUT) && status >= 0)
        {
            return DCError(
                .caPending, "\(what): the CA still answers 'waiting' at the polling limit", subject: subject,
                underlying: cause)
        }
        if status == OSSL_CMP_PKISTATUS_rejection || cmpReasons.contains(CMP_R_RECEIVED_ERROR)
            || cmpReasons.contains(CMP_R_REQUEST_REJECTED_BY_SERVER)
        {
            let protection =
                failInfo
                & (1 << OSSL_CMP_PKIFAILUREINFO_badMessageCheck | 1 << OSSL_CMP_PKIFAILUREINFO_notAuthorized
                    | 1 << OSSL_CMP_PKIFAILUREINFO_signerNotTrusted) != 0
            return DCError(
                .caRefused,
                "\(what): the CA refused "
                    + (protection ? "our protection (the secret, reference or certificate)" : "the request"),
                subject: subject, underlying: cause)
        }
        if cmpReasons.contains(CMP_R_TRANSFER_ERROR) || cmpReasons.contains(CMP_R_TOTAL_TIMEOUT)
            || libraries.contains(ERR_LIB_HTTP) || libraries.contains(ERR_LIB_BIO) || libraries.contains(ERR_LIB_SYS)
        {
            return DCError(
                .caUnreachable, "\(what): no answer from the CA's CMP server", subject: subject, underlying: cause)
        }
        return DCError(.providerFailed, "\(what) failed", subject: subject, underlying: cause)
    }
}

/// The one owner of an `OSSL_CRMF_MSG`, a certificate request message.
final class CRMFMessage {
    let pointer: OpaquePointer

    /// Takes `pointer`: it is freed with this owner.
    init(_ pointer: OpaquePointer) { self.pointer = pointer }

    deinit { OSSL_CRMF_MSG_free(pointer) }
}

extension ArchiveControl {
    /// The DER of `id-regCtrl-pkiArchiveOptions` (1.3.6.1.5.5.7.5.1.4), from OpenSSL's table.
    static func identifier() throws -> [UInt8] {
        guard let object = OBJ_nid2obj(NID_id_regCtrl_pkiArchiveOptions),
            let der = encodeDER({ i2d_ASN1_OBJECT(object, $0) })
        else { throw OpenSSL.failure("OBJ_nid2obj(id-regCtrl-pkiArchiveOptions)") }
        return der
    }

    /// `key` as an asymmetric key package (RFC 5958: `AsymmetricKeyPackage`, one
    /// `OneAsymmetricKey`, which is the PKCS#8 DER) enveloped to `recipient` by OpenSSL's CMS:
    /// a `ContentInfo` holding `EnvelopedData` (AES-256-CBC) of content type
    /// `id-ct-KP-aKeyPackage`, which `openssl cms -decrypt` opens with the recipient's key.
    static func envelope(_ key: PrivateKey, to recipient: Certificate) throws -> [UInt8] {
        // The package is built in one buffer, reserved ahead so that no copy of the key is left
        // behind by a reallocation, and wiped when done.
        var package: [UInt8] = []
        key.withPKCS8DER { der in
            package.reserveCapacity(der.count + 8)
            package.append(0x30)
            package.append(contentsOf: DER.encodeLength(der.count))
            package.append(contentsOf: der)
        }
        defer { package.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        return try package.withUnsafeBytes { try envelope($0, to: recipient) }
    }

    /// Whether OpenSSL can envelope to `recipient` at all (its key type, its parameters): tried
    /// on a byte before any request is sent, so that a certificate it cannot use fails first.
    static func checkRecipient(_ recipient: Certificate) throws {
        _ = try [UInt8(0)].withUnsafeBytes { try envelope($0, to: recipient) }
    }

    /// `content` enveloped to `recipient` (see ``envelope(_:to:)``). The content goes straight
    /// into the cipher (`CMS_dataInit`), not through `CMS_final`'s line copying, which would
    /// leave copies of it in buffers that are not wiped.
    private static func envelope(_ content: UnsafeRawBufferPointer, to recipient: Certificate) throws -> [UInt8] {
        let x509 = try X509Certificate(recipient)
        return try withExtendedLifetime(x509) {
            guard let recipients = dc_sk_X509_new_null() else { throw OpenSSL.failure("allocating") }
            defer { dc_sk_X509_free(recipients) }
            guard dc_sk_X509_push(recipients, x509.pointer) > 0 else { throw OpenSSL.failure("allocating") }
            guard let contentType = OBJ_txt2obj("2.16.840.1.101.2.1.2.78.5", 1) else {
                throw OpenSSL.failure("OBJ_txt2obj(id-ct-KP-aKeyPackage)")
            }
            defer { ASN1_OBJECT_free(contentType) }
            func failure() -> DCError {
                DCError(
                    .cryptoFailure, "cannot envelope the key to the archive certificate",
                    underlying: OpenSSLError.drain())
            }
            guard let cms = CMS_encrypt(recipients, nil, EVP_aes_256_cbc(), UInt32(CMS_BINARY | CMS_PARTIAL)) else {
                throw failure()
            }
            defer { CMS_ContentInfo_free(cms) }
            guard CMS_set1_eContentType(cms, contentType) == 1, let sink = CMS_dataInit(cms, nil) else {
                throw failure()
            }
            defer { BIO_free_all(sink) }
            guard BIO_write(sink, content.baseAddress, Int32(content.count)) == Int32(content.count),
                BIO_ctrl(sink, BIO_CTRL_FLUSH, 0, nil) == 1, CMS_dataFinal(cms, sink) == 1
            else { throw failure() }
            guard let der = encodeDER({ i2d_CMS_ContentInfo(cms, $0) }) else {
                throw OpenSSL.failure("i2d_CMS_ContentInfo")
            }
            return der
        }
    }
}

extension CMPClient {
    /// Checks that a key can be enveloped to `recipient`, the CA's key-archive certificate, before
    /// anything is sent: `DCError/Code/unsupportedAlgorithm` when OpenSSL cannot use its key.
    public static func checkArchiveRecipient(_ recipient: Certificate) throws {
        OpenSSLError.clear()
        do {
            try ArchiveControl.checkRecipient(recipient)
        } catch let error as DCError where error.code == .cryptoFailure {
            throw DCError(
                .unsupportedAlgorithm, "a key cannot be enveloped to the archive certificate's key",
                underlying: error.underlying)
        }
    }
}

/// What OpenSSL's CMP client logged on this thread during the transaction under way: a thread's
/// own list (the transaction runs on one thread), begun and ended with its context.
enum CMPLog {
    final class Lines {
        var lines: [(level: Int32, text: String)] = []
        var tlsVerifyFailure: String?
    }

    static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    static func begin() {
        end()
        pthread_setspecific(key, Unmanaged.passRetained(Lines()).toOpaque())
    }

    static func end() {
        guard let held = pthread_getspecific(key) else { return }
        pthread_setspecific(key, nil)
        Unmanaged<Lines>.fromOpaque(held).release()
    }

    static func append(level: Int32, _ text: String) {
        guard let held = pthread_getspecific(key) else { return }
        Unmanaged<Lines>.fromOpaque(held).takeUnretainedValue().lines.append((level, text))
    }

    /// Keeps why OpenSSL refused the server's TLS certificate (`X509_verify_cert_error_string`).
    static func noteTLSVerifyFailure(_ reason: String) {
        guard let held = pthread_getspecific(key) else { return }
        Unmanaged<Lines>.fromOpaque(held).takeUnretainedValue().tlsVerifyFailure = reason
    }

    /// Why the server's TLS certificate was refused in this transaction, if it was.
    static func tlsVerifyFailure() -> String? {
        guard let held = pthread_getspecific(key) else { return nil }
        return Unmanaged<Lines>.fromOpaque(held).takeUnretainedValue().tlsVerifyFailure
    }

    static func lines() -> [(level: Int32, text: String)] {
        guard let held = pthread_getspecific(key) else { return [] }
        return Unmanaged<Lines>.fromOpaque(held).takeUnretainedValue().lines
    }
}

/// The one owner of an `X509_STORE` holding trust anchors, until ``release()`` hands it to OpenSSL.
final class CertificateStore {
    let pointer: OpaquePointer
    private var owned = true

    init(_ anchors: [Certificate]) throws {
        guard let store = X509_STORE_new() else { throw OpenSSL.failure("X509_STORE_new") }
        pointer = store
        for anchor in anchors {
            let x509 = try X509Certificate(anchor)
            // The store takes its own reference.
            guard X509_STORE_add_cert(store, x509.pointer) == 1 else { throw OpenSSL.failure("X509_STORE_add_cert") }
        }
    }

    /// The store now belongs to whoever took it (a `set0` call that succeeded).
    func release() { owned = false }

    deinit { if owned { X509_STORE_free(pointer) } }
}
