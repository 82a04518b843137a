internal import COpenSSL
import DerivedCredentials
import FoundationEssentials

/// Decides whether a certificate was revoked, from CRLs and OCSP responders, with OpenSSL doing
/// every check: a CRL is used through `X509_verify_cert` with `X509_V_FLAG_CRL_CHECK` (issuer,
/// signature, thisUpdate/nextUpdate, critical extensions), an OCSP response through
/// `OCSP_basic_verify`, `OCSP_check_nonce` and `OCSP_check_validity`.
///
/// Anything that is not a checked answer, a malformed, badly signed, stale or foreign CRL or
/// response, a responder that cannot be reached, is ``RevocationStatus/unknown(_:)``, never good.
/// When sources disagree, revoked wins.
public struct RevocationChecker: Sendable {
    /// Where the answers come from.
    public var sources: RevocationSources

    /// A checker that asks `sources`.
    public init(sources: RevocationSources) {
        self.sources = sources
    }

    /// The status of `certificate`, issued by `issuer`, at `now` (CRLs) or at the time of the
    /// OCSP exchange (responses are checked against the clock, as OpenSSL does).
    public func status(of certificate: Certificate, issuer: Certificate, at now: Date = Date()) -> RevocationStatus {
        let subject: X509Certificate
        let issuing: X509Certificate
        do {
            subject = try X509Certificate(certificate)
            issuing = try X509Certificate(issuer)
        } catch {
            return .unknown("the certificate or its issuer cannot be read")
        }
        guard X509_check_issued(issuing.pointer, subject.pointer) == X509_V_OK else {
            return .unknown("the issuer given did not issue this certificate")
        }
        var answers: [RevocationStatus] = []
        let crls = sources.crls.filter { $0.issuer == issuing.subject }
        if !crls.isEmpty {
            answers.append(Self.crlStatus(of: subject, issuer: issuing, crls: crls, at: now))
        } else if !sources.crls.isEmpty {
            answers.append(.unknown("no CRL from \(issuing.subject) was given"))
        }
        var urls = sources.ocspURLs
        if sources.useCertificateURLs { urls += subject.ocspURLs.filter { !urls.contains($0) } }
        for url in urls {
            answers.append(OCSPExchange.status(of: subject, issuer: issuing, url: url, timeout: sources.timeout))
        }
        if let revoked = answers.first(where: { if case .revoked = $0 { true } else { false } }) { return revoked }
        if let good = answers.first(where: { if case .good = $0 { true } else { false } }) { return good }
        let reasons = answers.compactMap { if case .unknown(let why) = $0 { why } else { nil } }
        return .unknown(reasons.isEmpty ? "no CRL or OCSP responder was given" : reasons.joined(separator: "; "))
    }

    /// Verifies `subject` against `issuer` (trusted as it is, `X509_V_FLAG_PARTIAL_CHAIN`) with
    /// the CRLs, at `now`.
    static func crlStatus(
        of subject: X509Certificate, issuer: X509Certificate, crls: [CertificateRevocationList], at now: Date
    ) -> RevocationStatus {
        var parsed: [CRLObject] = []
        for crl in crls {
            guard let object = try? CRLObject(der: crl.derBytes) else { return .unknown("a CRL cannot be read") }
            parsed.append(object)
        }
        guard let store = X509_STORE_new() else { return .unknown("cannot create a certificate store") }
        defer { X509_STORE_free(store) }
        X509_STORE_add_cert(store, issuer.pointer)
        for object in parsed { X509_STORE_add_crl(store, object.pointer) }
        guard let context = X509_STORE_CTX_new() else { return .unknown("cannot allocate") }
        defer { X509_STORE_CTX_free(context) }
        guard X509_STORE_CTX_init(context, store, subject.pointer, nil) == 1 else {
            OpenSSLError.clear()
            return .unknown("cannot initialise verification")
        }
        X509_STORE_CTX_set_flags(context, UInt(X509_V_FLAG_CRL_CHECK | X509_V_FLAG_PARTIAL_CHAIN))
        X509_STORE_CTX_set_time(context, 0, time_t(now.timeIntervalSince1970))
        let verified = X509_verify_cert(context)
        let error = X509_STORE_CTX_get_error(context)
        OpenSSLError.clear()
        let source = "CRL from \(issuer.subject)"
        if verified == 1 { return .good(source: source) }
        switch error {
        case X509_V_ERR_CERT_REVOKED:
            var item: OpaquePointer?
            for object in parsed {
                if X509_CRL_get0_by_cert(object.pointer, &item, subject.pointer) == 1, let item {
                    let entry = CRLObject.entry(item)
                    return .revoked(reason: entry.reason, date: entry.date, source: source)
                }
            }
            return .revoked(reason: nil, date: now, source: source)
        case X509_V_ERR_CRL_HAS_EXPIRED:
            return .unknown("the CRL from \(issuer.subject) is stale (past its nextUpdate)")
        case X509_V_ERR_CRL_NOT_YET_VALID:
            return .unknown("the CRL from \(issuer.subject) is not valid yet")
        case X509_V_ERR_CRL_SIGNATURE_FAILURE, X509_V_ERR_UNABLE_TO_DECRYPT_CRL_SIGNATURE:
            return .unknown("the CRL's signature does not verify with \(issuer.subject)'s key")
        case X509_V_ERR_UNABLE_TO_GET_CRL, X509_V_ERR_UNABLE_TO_GET_CRL_ISSUER:
            // OpenSSL passes over a CRL whose authorityKeyIdentifier names another key; say why
            // when a list with the issuer's name does not verify with its key (a forgery, or a
            // CA with the same name).
            if let key = X509_get0_pubkey(issuer.pointer),
                parsed.contains(where: { X509_CRL_verify($0.pointer, key) != 1 })
            {
                OpenSSLError.clear()
                return .unknown("the CRL's signature does not verify with \(issuer.subject)'s key")
            }
            return .unknown("no usable CRL from \(issuer.subject)")
        default:
            return .unknown(
                "the CRL check failed: \(String(cString: X509_verify_cert_error_string(Int(error))))")
        }
    }
}

extension X509Certificate {
    /// The OCSP responder URLs of the authorityInfoAccess extension, in order.
    var ocspURLs: [String] {
        guard let list = X509_get1_ocsp(pointer) else {
            OpenSSLError.clear()
            return []
        }
        defer { X509_email_free(list) }
        return (0..<dc_sk_OPENSSL_STRING_num(list)).compactMap {
            dc_sk_OPENSSL_STRING_value(list, $0).map { String(cString: $0) }
        }
    }
}

extension CertificateDetails {
    /// `certificate`'s subject in OpenSSL's one-line form (`/O=…/CN=…`), as `openssl ca` writes
    /// it into `index.txt`; empty when the certificate cannot be read.
    public static func openSSLSubject(of certificate: Certificate) -> String {
        guard let x509 = try? X509Certificate(certificate) else { return "" }
        var buffer = [CChar](repeating: 0, count: 1024)
        guard X509_NAME_oneline(X509_get_subject_name(x509.pointer), &buffer, Int32(buffer.count)) != nil else {
            return ""
        }
        return String(nulTerminated: buffer)
    }

    /// The OCSP responder URLs that `certificate`'s authorityInfoAccess names, in order.
    public static func ocspURLs(of certificate: Certificate) -> [String] {
        (try? X509Certificate(certificate))?.ocspURLs ?? []
    }
}

/// How a command treats revocation: where status comes from, and whether a certificate whose
/// status cannot be had may still be used (only when the user says so, by name).
public struct RevocationPolicy: Sendable {
    /// Where the answers come from.
    public var sources: RevocationSources
    /// Whether an unknown status is let through (with a warning) instead of refused.
    public var allowsUnchecked: Bool

    /// A policy asking `sources`; unknown status is refused unless `allowsUnchecked`.
    public init(sources: RevocationSources, allowsUnchecked: Bool = false) {
        self.sources = sources
        self.allowsUnchecked = allowsUnchecked
    }

    /// A policy from CRL files (PEM or DER; relative paths resolved against `directory`), OCSP
    /// responder URLs (`aia` for the ones the certificates name) and the allowance; with
    /// `defaultToCertificateURLs` and no source named, the certificates' own responders are
    /// asked. The one reading of these settings, for the command line and provider options alike.
    /// A CRL file that cannot be read is an error (`DCError/Code/fileNotFound`, `malformedInput`).
    public init(
        crlFiles: [String], ocsp: [String], allowsUnchecked: Bool, directory: String? = nil,
        defaultToCertificateURLs: Bool
    ) throws {
        let lists = try crlFiles.map { path in
            let full = path.hasPrefix("/") ? path : directory.map { $0 + "/" + path } ?? path
            guard let bytes = FileManager.default.contents(atPath: full) else {
                throw DCError(.fileNotFound, "cannot read the CRL", subject: full)
            }
            do {
                return try CertificateRevocationList(reading: Array(bytes))
            } catch var error as DCError {
                error.subject = full
                throw error
            }
        }
        let useCertificateURLs =
            ocsp.contains("aia") || (defaultToCertificateURLs && crlFiles.isEmpty && ocsp.isEmpty)
        self.init(
            sources: RevocationSources(
                crls: lists, ocspURLs: ocsp.filter { $0 != "aia" }, useCertificateURLs: useCertificateURLs),
            allowsUnchecked: allowsUnchecked)
    }

    /// The status of `certificate`, whose issuer is one of `issuers` (the first that issued it).
    public func status(of certificate: Certificate, issuers: [Certificate], at now: Date = Date()) -> RevocationStatus {
        guard let subject = try? X509Certificate(certificate) else { return .unknown("the certificate cannot be read") }
        let issuer = issuers.first { candidate in
            (try? X509Certificate(candidate)).map { X509_check_issued($0.pointer, subject.pointer) == X509_V_OK }
                ?? false
        }
        OpenSSLError.clear()
        guard let issuer else { return .unknown("its issuer's certificate is not at hand") }
        return RevocationChecker(sources: sources).status(of: certificate, issuer: issuer, at: now)
    }

    /// Returns `status` when the certificate may be used: good, or unknown with
    /// ``allowsUnchecked``. Throws `DCError/Code/certificateRevoked` for a revoked one and
    /// `DCError/Code/revocationUnchecked` for an unknown one, naming `what` (such as "the card's
    /// certificate").
    @discardableResult
    public func require(_ status: RevocationStatus, for what: String) throws -> RevocationStatus {
        switch status {
        case .good: return status
        case .revoked: throw DCError(.certificateRevoked, "\(what) is \(status)")
        case .unknown(let why):
            guard allowsUnchecked else {
                throw DCError(.revocationUnchecked, "\(what): revocation status unknown (\(why))")
            }
            return status
        }
    }
}
