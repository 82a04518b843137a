internal import COpenSSL
import DerivedCredentials
import FoundationEssentials

/// One OCSP exchange (RFC 6960, HTTP POST): a request with a nonce for one certificate, and the
/// response checked by OpenSSL before anything in it is believed.
enum OCSPExchange {
    /// The largest response read.
    static let maximumResponseLength = 64 * 1024

    static func status(of subject: X509Certificate, issuer: X509Certificate, url: String, timeout: Duration)
        -> RevocationStatus
    {
        defer { OpenSSLError.clear() }
        let source = "OCSP \(url)"
        guard RevocationURL.isAcceptable(url) else {
            return .unknown("'\(url.escapingControlCharacters)' is not an http:// OCSP URL")
        }
        // SHA-1 certificate ids, as RFC 5019 responders expect.
        guard let id = OCSP_cert_to_id(EVP_sha1(), subject.pointer, issuer.pointer) else {
            return .unknown("cannot make the OCSP certificate id")
        }
        defer { OCSP_CERTID_free(id) }
        guard let request = OCSP_REQUEST_new() else { return .unknown("cannot allocate") }
        defer { OCSP_REQUEST_free(request) }
        guard let copy = OCSP_CERTID_dup(id) else { return .unknown("cannot allocate") }
        guard OCSP_request_add0_id(request, copy) != nil else {
            OCSP_CERTID_free(copy)
            return .unknown("cannot make the OCSP request")
        }
        guard OCSP_request_add1_nonce(request, nil, -1) == 1,
            let requestDER = encodeDER({ i2d_OCSP_REQUEST(request, $0) })
        else { return .unknown("cannot make the OCSP request") }

        let answer: [UInt8]
        switch post(requestDER, to: url, timeout: timeout) {
        case .success(let bytes): answer = bytes
        case .failure(let why): return .unknown("\(source): \(why)")
        }
        guard (try? DER.validate(answer, what: "OCSP response")) != nil,
            let response = answer.decodeDER({ d2i_OCSP_RESPONSE(nil, $0, $1) }, free: OCSP_RESPONSE_free)
        else { return .unknown("\(source): the response is malformed") }
        defer { OCSP_RESPONSE_free(response) }
        let responseStatus = OCSP_response_status(response)
        guard responseStatus == OCSP_RESPONSE_STATUS_SUCCESSFUL else {
            return .unknown("\(source) answered \(String(cString: OCSP_response_status_str(Int(responseStatus))))")
        }
        guard let basic = OCSP_response_get1_basic(response) else {
            return .unknown("\(source): the response has no basic response")
        }
        defer { OCSP_BASICRESP_free(basic) }
        // 1: the nonces match; -1: the responder sent none (a pre-produced answer, judged by its
        // times below). 0 is a different nonce: an answer to someone else's question.
        guard OCSP_check_nonce(request, basic) != 0 else {
            return .unknown("\(source): the response's nonce is not the request's (a replayed answer)")
        }
        guard let store = X509_STORE_new(), let certificates = dc_sk_X509_new_null() else {
            return .unknown("cannot allocate")
        }
        defer {
            X509_STORE_free(store)
            dc_sk_X509_free(certificates)
        }
        // The issuer is trusted as it is; the responder is the issuer or a responder it delegated
        // to (id-kp-OCSPSigning), which OCSP_basic_verify checks.
        X509_STORE_add_cert(store, issuer.pointer)
        X509_STORE_set_flags(store, UInt(X509_V_FLAG_PARTIAL_CHAIN))
        _ = dc_sk_X509_push(certificates, issuer.pointer)
        guard OCSP_basic_verify(basic, certificates, store, 0) == 1 else {
            return .unknown("\(source): the response is not signed by \(issuer.subject) or a responder it named")
        }
        var status: Int32 = -1
        var reason: Int32 = OCSP_REVOKED_STATUS_NOSTATUS
        var revokedAt: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        var thisUpdate: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        var nextUpdate: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        guard OCSP_resp_find_status(basic, id, &status, &reason, &revokedAt, &thisUpdate, &nextUpdate) == 1 else {
            return .unknown("\(source): the response says nothing about this certificate")
        }
        // Five minutes of clock skew; an answer without nextUpdate may be at most an hour old.
        guard OCSP_check_validity(thisUpdate, nextUpdate, 300, nextUpdate == nil ? 3600 : -1) == 1 else {
            return .unknown("\(source): the response is stale or not valid yet")
        }
        switch status {
        case V_OCSP_CERTSTATUS_GOOD:
            return .good(source: source)
        case V_OCSP_CERTSTATUS_REVOKED:
            let date = X509Certificate.date(UnsafePointer(revokedAt)) ?? Date()
            return .revoked(reason: RevocationReason(code: reason), date: date, source: source)
        default:
            return .unknown("\(source) does not know this certificate")
        }
    }

    /// POSTs `body` as `application/ocsp-request` to `url` with OpenSSL's HTTP client and returns
    /// the `application/ocsp-response` body, at most ``maximumResponseLength`` bytes.
    static func post(_ body: [UInt8], to url: String, timeout: Duration) -> Result<[UInt8], OCSPFailure> {
        var secure: Int32 = 0
        var host: UnsafeMutablePointer<CChar>?
        var port: UnsafeMutablePointer<CChar>?
        var path: UnsafeMutablePointer<CChar>?
        var query: UnsafeMutablePointer<CChar>?
        defer { for part in [host, port, path, query] { CRYPTO_free(part, #fileID, #line) } }
        guard OSSL_HTTP_parse_url(url, &secure, nil, &host, &port, nil, &path, &query, nil) == 1, secure == 0,
            let host, let port, let path
        else { return .failure(OCSPFailure("the URL cannot be used")) }
        let target = String(cString: path) + (query.map { "?" + String(cString: $0) } ?? "")
        guard let requestBIO = BIO_new(BIO_s_mem()) else { return .failure(OCSPFailure("cannot allocate")) }
        defer { BIO_free(requestBIO) }
        guard body.withUnsafeBytes({ BIO_write(requestBIO, $0.baseAddress, Int32($0.count)) }) == Int32(body.count)
        else { return .failure(OCSPFailure("cannot allocate")) }
        let seconds = Int32(clamping: max(1, timeout.components.seconds))
        guard
            let responseBIO = OSSL_HTTP_transfer(
                nil, host, port, target, 0, nil, nil, nil, nil, nil, nil, 0, nil, "application/ocsp-request",
                requestBIO, "application/ocsp-response", 1, maximumResponseLength, seconds, 0)
        else {
            let reason = OpenSSLError.drain()
            return .failure(OCSPFailure("no answer (\(reason))"))
        }
        defer { BIO_free(responseBIO) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while bytes.count <= maximumResponseLength {
            let count = buffer.withUnsafeMutableBytes { BIO_read(responseBIO, $0.baseAddress, Int32($0.count)) }
            guard count > 0 else { break }
            bytes += buffer[..<Int(count)]
        }
        guard bytes.count <= maximumResponseLength else { return .failure(OCSPFailure("the answer is too long")) }
        return .success(bytes)
    }

    struct OCSPFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}

/// The signing half of an OCSP responder (RFC 6960): reads a request and answers, for each
/// certificate it asks about, what `answer` says, signed by the CA.
///
/// Only certificates this CA issued are answered from `answer`; a question about another issuer's
/// certificate is answered `unknown`, as `openssl ocsp -index` does. A request that cannot be
/// read gets a `malformedRequest` response. Nonces are copied.
public struct OCSPResponder: Sendable {
    /// What the responder says about one certificate.
    public enum Answer: Sendable, Hashable {
        /// Issued and not revoked.
        case good
        /// Revoked at `date` for `reason`.
        case revoked(date: Date, reason: RevocationReason?)
        /// Not issued by this CA, as far as it knows.
        case unknown
    }

    /// The CA that issued the certificates and signs the responses.
    public let signer: CertificateSigner
    /// How long an answer is good for (its nextUpdate).
    public let validity: TimeInterval
    /// The most certificates one request may ask about.
    public static let maximumQuestions = 32

    /// A responder for the CA `signer` (which must have a certificate), whose answers are good for
    /// `validity`.
    public init(signer: CertificateSigner, validity: TimeInterval = 3600) throws {
        guard signer.issuerCertificate != nil else { throw DCError(.usage, "an OCSP responder needs a CA certificate") }
        self.signer = signer
        self.validity = validity
    }

    /// The DER response to the DER `request`, at `now`; `answer` is given each serial number (upper-case hex).
    public func respond(to request: [UInt8], at now: Date = Date(), answer: (String) -> Answer) -> [UInt8] {
        defer { OpenSSLError.clear() }
        guard (try? DER.validate(request, what: "OCSP request")) != nil,
            let parsed = request.decodeDER({ d2i_OCSP_REQUEST(nil, $0, $1) }, free: OCSP_REQUEST_free)
        else { return Self.failure(OCSP_RESPONSE_STATUS_MALFORMEDREQUEST) }
        defer { OCSP_REQUEST_free(parsed) }
        let count = OCSP_request_onereq_count(parsed)
        guard count > 0, count <= Self.maximumQuestions else {
            return Self.failure(OCSP_RESPONSE_STATUS_MALFORMEDREQUEST)
        }
        guard let issuer = signer.issuerCertificate, let basic = OCSP_BASICRESP_new() else {
            return Self.failure(OCSP_RESPONSE_STATUS_INTERNALERROR)
        }
        defer { OCSP_BASICRESP_free(basic) }
        guard let thisUpdate = ASN1_TIME_set(nil, time_t(now.timeIntervalSince1970)),
            let nextUpdate = ASN1_TIME_set(nil, time_t(now.addingTimeInterval(validity).timeIntervalSince1970))
        else { return Self.failure(OCSP_RESPONSE_STATUS_INTERNALERROR) }
        defer {
            ASN1_TIME_free(thisUpdate)
            ASN1_TIME_free(nextUpdate)
        }
        for index in 0..<count {
            guard let one = OCSP_request_onereq_get0(parsed, index), let id = OCSP_onereq_get0_id(one) else {
                return Self.failure(OCSP_RESPONSE_STATUS_MALFORMEDREQUEST)
            }
            var algorithm: OpaquePointer?
            var serial: UnsafeMutablePointer<ASN1_INTEGER>?
            guard OCSP_id_get0_info(nil, &algorithm, nil, &serial, id) == 1,
                let digest = EVP_get_digestbyname(OBJ_nid2sn(OBJ_obj2nid(algorithm))),
                let ours = OCSP_cert_to_id(digest, nil, issuer.pointer)
            else { return Self.failure(OCSP_RESPONSE_STATUS_MALFORMEDREQUEST) }
            defer { OCSP_CERTID_free(ours) }
            let verdict = OCSP_id_issuer_cmp(ours, id) == 0 ? answer(SerialNumber.hex(serial)) : .unknown
            let added: OpaquePointer? =
                switch verdict {
                case .good:
                    OCSP_basic_add1_status(basic, id, V_OCSP_CERTSTATUS_GOOD, 0, nil, thisUpdate, nextUpdate)
                case .unknown:
                    OCSP_basic_add1_status(basic, id, V_OCSP_CERTSTATUS_UNKNOWN, 0, nil, thisUpdate, nextUpdate)
                case .revoked(let date, let reason):
                    ASN1_TIME_set(nil, time_t(date.timeIntervalSince1970)).flatMap { revokedAt in
                        defer { ASN1_TIME_free(revokedAt) }
                        return OCSP_basic_add1_status(
                            basic, id, V_OCSP_CERTSTATUS_REVOKED, reason?.code ?? OCSP_REVOKED_STATUS_NOSTATUS,
                            revokedAt, thisUpdate, nextUpdate)
                    }
                }
            guard added != nil else { return Self.failure(OCSP_RESPONSE_STATUS_INTERNALERROR) }
        }
        guard OCSP_copy_nonce(basic, parsed) > 0,
            OCSP_basic_sign(
                basic, issuer.pointer, signer.signingKey.pointer, CertificateBuilding.digest(for: signer.signingKey),
                nil, 0) == 1,
            let response = OCSP_response_create(OCSP_RESPONSE_STATUS_SUCCESSFUL, basic)
        else { return Self.failure(OCSP_RESPONSE_STATUS_INTERNALERROR) }
        defer { OCSP_RESPONSE_free(response) }
        return encodeDER({ i2d_OCSP_RESPONSE(response, $0) }) ?? Self.failure(OCSP_RESPONSE_STATUS_INTERNALERROR)
    }

    /// An unsigned response with only a status (`malformedRequest`, `internalError`).
    static func failure(_ status: Int32) -> [UInt8] {
        guard let response = OCSP_response_create(status, nil) else { return [] }
        defer { OCSP_RESPONSE_free(response) }
        return encodeDER({ i2d_OCSP_RESPONSE(response, $0) }) ?? []
    }
}
