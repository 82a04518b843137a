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
final class CMPTLSContext {
    let pointer: OpaquePointer

    /// A client context for `host` that trusts `anchors`, or the system's CA certificates when nil.
    init(host: String, anchors: [Certificate]?) throws {
        guard let context = SSL_CTX_new(TLS_client_method()) else { throw OpenSSL.failure("SSL_CTX_new") }
        pointer = context
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        guard dc_SSL_CTX_set_min_tls12(context) == 1 else { throw OpenSSL.failure("SSL_CTX_set_min_proto_version") }
        if let anchors {
            let store = SSL_CTX_get_cert_store(context)
            for anchor in anchors {
                let x509 = try X509Certificate(anchor)
                // The store takes its own reference.
                guard X509_STORE_add_cert(store, x509.pointer) == 1 else {
                    throw OpenSSL.failure("X509_STORE_add_cert")
                }
            }
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

    /// OpenSSL's CMP client calls this with the connected BIO (`connect` 1) and, when the
    /// transfer ends, with what it returned (`connect` 0; `detail` 0 after an error). `arg` is the
    /// `SSL_CTX`, borrowed: the ``CMPTLSContext`` outlives the `OSSL_CMP_CTX`'s transfers.
    static let callback: OSSL_HTTP_bio_cb_t = { bio, arg, connect, detail in
        guard let bio, let arg else { return bio }
        let context = OpaquePointer(arg)
        if connect != 0 {
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
