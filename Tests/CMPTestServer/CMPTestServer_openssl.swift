internal import COpenSSL
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A CA over CMP that certifies whatever key it is asked to, for the tests that need one:
/// `openssl cmp -port` (the mock server) answers one fixed certificate, so it cannot certify the
/// fresh keys of four tags in one send or of a derivation. It stands in for the organisation's CA.
/// The CMP side is OpenSSL's generic server (`OSSL_CMP_SRV_CTX`: it checks the request's MAC and
/// proof of possession, keeps the transaction, builds and protects the answer); ours is only the
/// CA's decision, in ``issue``: a certificate for the template's public key and subject, with the
/// extensions the request asked for, signed by the CA the openssl CLI made. HTTP is a loop of
/// one request per connection (`Connection: close`) on 127.0.0.1.
public final class CMPTestServer: @unchecked Sendable {
    // @unchecked Sendable: the C objects are touched only under `lock`, and the socket only by
    // the accepting thread and `stop()` (which shuts it down, then waits for that thread).
    private let server: OpaquePointer
    private let caCertificate: OpaquePointer
    private let caKey: OpaquePointer
    private let listener: Int32
    private let lock = Mutex<Void>(())
    private let finished = DispatchSemaphore(value: 0)
    private let counts = Mutex<(certified: Int, confirmed: Int, revoked: Int)>((0, 0, 0))
    private let received = Mutex<[[UInt8]]>([])
    /// The serial numbers (DER INTEGER contents) it revoked, to refuse a second revocation.
    private let revokedSerials = Mutex<Set<[UInt8]>>([])
    private let grantsWithModifications: Bool
    /// The TCP port on 127.0.0.1.
    public let port: Int

    /// `http://127.0.0.1:PORT/pkix/`.
    public var url: String { "http://127.0.0.1:\(port)/pkix/" }
    /// How many certificates it issued, confirmations it got and revocations it granted.
    public var certified: Int { counts.withLock { $0.certified } }
    /// Confirmations (certConf) received.
    public var confirmed: Int { counts.withLock { $0.confirmed } }
    /// Revocations (rr) granted.
    public var revoked: Int { counts.withLock { $0.revoked } }
    /// The DER of each certificate request message (CRMF `CertReqMsg`) that reached it, granted
    /// or not, in order, as OpenSSL's server parsed it: for a test to judge with the openssl CLI.
    public var requests: [[UInt8]] { received.withLock { $0 } }

    /// Failed to start: what OpenSSL or the socket said.
    public struct Failure: Error, CustomStringConvertible {
        /// What went wrong.
        public let description: String
    }

    /// Starts the server for the CA in the PEM files `certificate` and `key`, accepting requests
    /// protected by `secret` under `reference` (PBMAC) and protecting its answers with the same;
    /// with `acceptRAVerified` it takes a registration authority's word for possession (`--derive`);
    /// with `grantsWithModifications` it answers `grantedWithMods` instead of `accepted`, as a CA
    /// does that did not do all it was asked (such as archiving the key).
    public init(
        caCertificate certificate: String, caKey key: String, reference: String, secretFile: String,
        acceptRAVerified: Bool = false, grantsWithModifications: Bool = false
    ) throws {
        self.grantsWithModifications = grantsWithModifications
        func fail(_ what: String) -> Failure {
            var reasons: [String] = []
            while case let code = ERR_get_error(), code != 0 {
                var buffer = [CChar](repeating: 0, count: 256)
                ERR_error_string_n(code, &buffer, buffer.count)
                reasons.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            }
            return Failure(description: "\(what): \(reasons.joined(separator: "; "))")
        }
        guard let certificateBIO = BIO_new_file(certificate, "r") else { throw fail("reading \(certificate)") }
        defer { BIO_free(certificateBIO) }
        guard let x509 = PEM_read_bio_X509(certificateBIO, nil, nil, nil) else { throw fail("reading the CA") }
        guard let keyBIO = BIO_new_file(key, "r") else {
            X509_free(x509)
            throw fail("reading \(key)")
        }
        defer { BIO_free(keyBIO) }
        guard let pkey = PEM_read_bio_PrivateKey(keyBIO, nil, nil, nil) else {
            X509_free(x509)
            throw fail("reading the CA key")
        }
        guard let server = OSSL_CMP_SRV_CTX_new(nil, nil) else {
            X509_free(x509)
            EVP_PKEY_free(pkey)
            throw fail("OSSL_CMP_SRV_CTX_new")
        }
        self.server = server
        caCertificate = x509
        caKey = pkey
        // Until every property is set, a failure frees what was made here (deinit does not run).
        func freeAll() {
            OSSL_CMP_SRV_CTX_free(server)
            X509_free(x509)
            EVP_PKEY_free(pkey)
        }
        guard let secretData = FileManager.default.contents(atPath: secretFile) else {
            freeAll()
            throw Failure(description: "cannot read \(secretFile)")
        }
        let secret = Array(secretData)
        let referenceBytes = Array(reference.utf8)
        let context = OSSL_CMP_SRV_CTX_get0_cmp_ctx(server)
        guard OSSL_CMP_CTX_set1_referenceValue(context, referenceBytes, Int32(referenceBytes.count)) == 1,
            OSSL_CMP_CTX_set1_secretValue(context, secret, Int32(secret.count)) == 1,
            OSSL_CMP_SRV_CTX_set_accept_raverified(server, acceptRAVerified ? 1 : 0) == 1
        else {
            let failure = fail("setting up the server")
            freeAll()
            throw failure
        }

        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        listener = fd
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard fd >= 0, bound else {
            let failure = Failure(description: "cannot listen: errno \(errno)")
            if fd >= 0 { close(fd) }
            freeAll()
            throw failure
        }
        port = Int(UInt16(bigEndian: address.sin_port))

        let custom = Unmanaged.passUnretained(self).toOpaque()
        guard
            OSSL_CMP_SRV_CTX_init(
                server, custom, Self.certificateRequest, Self.revocation, nil, nil, Self.confirmation, nil) == 1
        else {
            // Every property is set: deinit frees the C objects; the socket is closed here.
            close(fd)
            throw fail("OSSL_CMP_SRV_CTX_init")
        }
        let thread = Thread { [self] in
            serve()
            finished.signal()
        }
        thread.start()
    }

    deinit {
        OSSL_CMP_SRV_CTX_free(server)
        X509_free(caCertificate)
        EVP_PKEY_free(caKey)
    }

    /// Stops accepting and waits for the accepting thread to end.
    public func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        finished.wait()
        close(listener)
    }

    private func serve() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                if errno == EINTR { continue }
                return
            }
            _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
            answer(connection)
            close(connection)
        }
    }

    /// Reads one HTTP POST, hands its body to OpenSSL's server and writes its answer.
    private func answer(_ connection: Int32) {
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        var bodyStart: Int?
        var bodyLength = 0
        while bodyStart == nil || received.count < bodyStart! + bodyLength {
            let count = read(connection, &buffer, buffer.count)
            if count <= 0 { return }
            received += buffer[0..<count]
            if bodyStart == nil, let end = received.firstRange(of: Array("\r\n\r\n".utf8)) {
                bodyStart = end.upperBound
                let head = String(decoding: received[..<end.lowerBound], as: UTF8.self).lowercased()
                for line in head.split(separator: "\r\n") where line.hasPrefix("content-length:") {
                    // A length that is not a number of at most 1 MiB is no request of ours.
                    let length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
                    if length.map({ !(0...(1 << 20)).contains($0) }) ?? true { return }
                    bodyLength = length ?? 0
                }
            }
        }
        let body = Array(received[bodyStart!..<(bodyStart! + bodyLength)])
        let response: [UInt8]? = lock.withLock { _ in
            // The cursor is used only while the buffer is borrowed.
            let parsed = body.withUnsafeBufferPointer { buffer -> OpaquePointer? in
                var cursor = buffer.baseAddress
                return d2i_OSSL_CMP_MSG(nil, &cursor, buffer.count)
            }
            guard let request = parsed else { return nil }
            defer { OSSL_CMP_MSG_free(request) }
            guard let answer = OSSL_CMP_SRV_process_request(server, request) else { return nil }
            defer { OSSL_CMP_MSG_free(answer) }
            let size = i2d_OSSL_CMP_MSG(answer, nil)
            guard size > 0 else { return nil }
            var der = [UInt8](repeating: 0, count: Int(size))
            der.withUnsafeMutableBufferPointer { buffer in
                var out = buffer.baseAddress
                _ = i2d_OSSL_CMP_MSG(answer, &out)
            }
            return der
        }
        ERR_clear_error()
        let head: String
        if let response {
            head =
                "HTTP/1.0 200 OK\r\nContent-Type: application/pkixcmp\r\nContent-Length: \(response.count)\r\n"
                + "Connection: close\r\n\r\n"
        } else {
            head = "HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        }
        let out = Array(head.utf8) + (response ?? [])
        _ = out.withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
    }

    /// The CA's decision: a certificate for the requested key and subject, with the requested
    /// extensions (the client asks for its tag's key usage and purposes), valid for a day.
    private func issue(_ message: OpaquePointer) -> OpaquePointer? {
        guard let template = OSSL_CRMF_MSG_get0_tmpl(message), let spki = Self.publicKeyInfo(of: template) else {
            return nil
        }
        let parsed = spki.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            var cursor = buffer.baseAddress
            return d2i_PUBKEY(nil, &cursor, buffer.count)
        }
        guard let publicKey = parsed else { return nil }
        defer { EVP_PKEY_free(publicKey) }
        guard let certificate = X509_new() else { return nil }
        var serial = [UInt8](repeating: 0, count: 16)
        _ = RAND_bytes(&serial, 16)
        serial[0] &= 0x7f
        let number = BN_bin2bn(serial, 16, nil)
        defer { BN_free(number) }
        let subject = OSSL_CRMF_CERTTEMPLATE_get0_subject(template)
        guard X509_set_version(certificate, 2) == 1,
            BN_to_ASN1_INTEGER(number, X509_get_serialNumber(certificate)) != nil,
            X509_set_issuer_name(certificate, X509_get_subject_name(caCertificate)) == 1,
            subject == nil || X509_set_subject_name(certificate, subject) == 1,
            X509_gmtime_adj(X509_getm_notBefore(certificate), -60) != nil,
            X509_gmtime_adj(X509_getm_notAfter(certificate), 86400) != nil,
            X509_set_pubkey(certificate, publicKey) == 1
        else {
            X509_free(certificate)
            return nil
        }
        if let extensions = OSSL_CRMF_CERTTEMPLATE_get0_extensions(template) {
            for index in 0..<X509v3_get_ext_count(extensions) {
                _ = X509_add_ext(certificate, X509v3_get_ext(extensions, index), -1)
            }
        }
        guard X509_sign(certificate, caKey, EVP_sha256()) > 0 else {
            X509_free(certificate)
            return nil
        }
        return certificate
    }

    /// The template's `publicKey` ([6] IMPLICIT SubjectPublicKeyInfo, RFC 4211 5) as a
    /// SubjectPublicKeyInfo: OpenSSL 3.0 has no getter for it, so the template's DER is walked.
    static func publicKeyInfo(of template: OpaquePointer) -> [UInt8]? {
        let size = i2d_OSSL_CRMF_CERTTEMPLATE(template, nil)
        guard size > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(size))
        der.withUnsafeMutableBufferPointer { buffer in
            var out = buffer.baseAddress
            _ = i2d_OSSL_CRMF_CERTTEMPLATE(template, &out)
        }
        /// The header length and content length of the element at `offset`.
        func header(_ offset: Int) -> (Int, Int)? {
            guard offset + 2 <= der.count else { return nil }
            let first = Int(der[offset + 1])
            if first < 0x80 { return (2, first) }
            let octets = first & 0x7f
            guard octets <= 3, offset + 2 + octets <= der.count else { return nil }
            return (2 + octets, der[(offset + 2)..<(offset + 2 + octets)].reduce(0) { $0 << 8 | Int($1) })
        }
        guard der.first == 0x30, let (outer, _) = header(0) else { return nil }
        var offset = outer
        while offset < der.count, let (headerLength, length) = header(offset) {
            if der[offset] == 0xA6 {
                return [0x30] + der[(offset + 1)..<(offset + headerLength + length)]
            }
            offset += headerLength + length
        }
        return nil
    }

    private static func owner(_ server: OpaquePointer?) -> CMPTestServer {
        Unmanaged<CMPTestServer>.fromOpaque(OSSL_CMP_SRV_CTX_get0_custom_ctx(server)!).takeUnretainedValue()
    }

    private static let certificateRequest: OSSL_CMP_SRV_cert_request_cb_t = {
        server, _, _, message, _, certificateOut, _, _ in
        let ca = owner(server)
        // Every request that reached the CA is kept, granted or not.
        let size = message.map { i2d_OSSL_CRMF_MSG($0, nil) } ?? 0
        if let message, size > 0 {
            var der = [UInt8](repeating: 0, count: Int(size))
            der.withUnsafeMutableBufferPointer { buffer in
                var out = buffer.baseAddress
                _ = i2d_OSSL_CRMF_MSG(message, &out)
            }
            ca.received.withLock { $0.append(der) }
        }
        guard let message, let issued = ca.issue(message) else {
            return OSSL_CMP_STATUSINFO_new(
                OSSL_CMP_PKISTATUS_rejection, 1 << OSSL_CMP_PKIFAILUREINFO_badCertTemplate, nil)
        }
        certificateOut?.pointee = issued
        ca.counts.withLock { $0.certified += 1 }
        return OSSL_CMP_STATUSINFO_new(
            ca.grantsWithModifications ? OSSL_CMP_PKISTATUS_grantedWithMods : OSSL_CMP_PKISTATUS_accepted, 0, nil)
    }

    private static let confirmation: OSSL_CMP_SRV_certConf_cb_t = { server, _, _, _, _ in
        owner(server).counts.withLock { $0.confirmed += 1 }
        return 1
    }

    /// Grants a revocation once; a certificate revoked already is refused with `certRevoked`, as
    /// a CA answers (RFC 4210 section 5.2.3).
    private static let revocation: OSSL_CMP_SRV_rr_cb_t = { server, _, _, serial in
        let ca = owner(server)
        let number =
            serial.map {
                Array(UnsafeBufferPointer(start: ASN1_STRING_get0_data($0), count: Int(ASN1_STRING_length($0))))
            } ?? []
        guard ca.revokedSerials.withLock({ $0.insert(number).inserted }) else {
            return OSSL_CMP_STATUSINFO_new(
                OSSL_CMP_PKISTATUS_rejection, 1 << OSSL_CMP_PKIFAILUREINFO_certRevoked, "already revoked")
        }
        ca.counts.withLock { $0.revoked += 1 }
        return OSSL_CMP_STATUSINFO_new(OSSL_CMP_PKISTATUS_accepted, 0, nil)
    }
}
