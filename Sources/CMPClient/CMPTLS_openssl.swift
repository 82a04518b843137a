internal import COpenSSL
internal import COpenSSLTLS
import CredentialCoding
import DerivedCredentials
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// The one owner of the `SSL_CTX` an `https` CMP server is reached through: the server's TLS
/// certificate must chain to the TLS trust anchors (or the system's CA certificates) and be for the
/// host the URL names, checked by OpenSSL in the handshake. OpenSSL's CMP client opens the
/// connection and hands it to ``callback`` (`OSSL_CMP_CTX_set_http_cb`), which puts an SSL filter
/// over it, as OpenSSL's own `openssl cmp` does (`app_http_tls_cb` in apps/lib/apps.c).
///
/// Through a proxy (`https_proxy`, unless `no_proxy` names the host: OpenSSL's client reads them,
/// as curl and wget do) the connection OpenSSL opens goes to the proxy, so the callback first asks
/// it for a tunnel to the server (`CONNECT`, `OSSL_HTTP_proxy_connect`), and TLS runs inside.
final class CMPTLSContext {
    let pointer: OpaquePointer
    /// The server as the tunnel names it: its host and port.
    private let host: String
    private let port: String
    /// Whether OpenSSL's client connects through a proxy for this server.
    private let throughProxy: Bool
    /// How long the proxy may take to open the tunnel, in seconds (the message timeout).
    private let timeout: Int32

    /// A client context for `host` that trusts `anchors`, or the system's CA certificates when nil.
    init(host: String, port: Int, timeout: Int, anchors: [Certificate]?) throws {
        guard let context = SSL_CTX_new(TLS_client_method()) else { throw OpenSSL.failure("SSL_CTX_new") }
        pointer = context
        self.host = host
        self.port = String(port)
        self.timeout = Int32(clamping: timeout)
        // The same rule OpenSSL's client applies when it opens the connection.
        throughProxy = OSSL_HTTP_adapt_proxy(nil, nil, host, 1) != nil
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        guard dc_SSL_CTX_set_min_tls12(context) == 1 else { throw OpenSSL.failure("SSL_CTX_set_min_proto_version") }
        if let anchors {
            let store = try CertificateStore(anchors)
            // The context takes the store (set0: freed with it).
            SSL_CTX_set_cert_store(context, store.pointer)
            store.release()
        } else {
            guard SSL_CTX_set_default_verify_paths(context) == 1 else {
                throw OpenSSL.failure("SSL_CTX_set_default_verify_paths")
            }
        }
        // Each SSL made from this context inherits the name (or address) its peer must prove.
        let parameters = SSL_CTX_get0_param(context)
        let named =
            host.contains(":") || host.allSatisfy({ $0.isNumber || $0 == "." })
            ? X509_VERIFY_PARAM_set1_ip_asc(parameters, host) : X509_VERIFY_PARAM_set1_host(parameters, host, 0)
        guard named == 1 else { throw OpenSSL.failure("X509_VERIFY_PARAM_set1_host") }
    }

    deinit { SSL_CTX_free(pointer) }

    /// The callback's argument: this context, unretained (it outlives the `OSSL_CMP_CTX`'s
    /// transfers, which borrow it).
    var argument: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    /// OpenSSL's CMP client calls this with the connected BIO (`connect` 1) and, when the
    /// transfer ends, with what it returned (`connect` 0; `detail` 0 after an error). `arg` is
    /// ``argument``.
    static let callback: OSSL_HTTP_bio_cb_t = { bio, arg, connect, detail in
        guard let bio, let arg else { return bio }
        let tls = Unmanaged<CMPTLSContext>.fromOpaque(arg).takeUnretainedValue()
        let context = tls.pointer
        if connect != 0 {
            // Through a proxy: a tunnel to the server first (a refusal is in the error queue).
            if tls.throughProxy,
                OSSL_HTTP_proxy_connect(bio, tls.host, tls.port, nil, nil, tls.timeout, nil, nil) != 1
            {
                return nil
            }
            guard let filter = BIO_new(BIO_f_ssl()) else { return nil }
            guard let ssl = SSL_new(context) else {
                BIO_free(filter)
                return nil
            }
            // The server name in the handshake, for a name (none for an address).
            if let name = X509_VERIFY_PARAM_get0_host(SSL_CTX_get0_param(context), 0) {
                _ = dc_SSL_set_tlsext_host_name(ssl, name)
            }
            SSL_set_connect_state(ssl)
            _ = dc_BIO_set_ssl(filter, ssl)  // The filter owns the SSL now (BIO_CLOSE).
            return BIO_push(filter, bio)
        }
        guard let ssl = dc_BIO_get_ssl(bio) else { return bio }
        if detail == 0 {
            let result = SSL_get_verify_result(ssl)
            if result != X509_V_OK {
                CMPLog.noteTLSVerifyFailure(String(cString: X509_verify_cert_error_string(result)))
            }
        }
        // Shutting down and taking the filter off may queue errors nobody needs (a BIO not set).
        _ = ERR_set_mark()
        BIO_ssl_shutdown(bio)
        let connection = BIO_pop(bio)
        BIO_free(bio)
        _ = ERR_pop_to_mark()
        return connection
    }
}
