// The few libssl calls the CMP client's https transfer makes, apart from COpenSSL so that only
// what reaches a CA over https links libssl (the PKCS#11 module, which links CredentialCoding,
// maps libcrypto alone). Each shim exists because Swift cannot import the macro it replaces.
#ifndef DC_COPENSSLTLS_SHIM_H
#define DC_COPENSSLTLS_SHIM_H

#include <openssl/bio.h>
#include <openssl/ssl.h>

// SSL_set_tlsext_host_name, BIO_set_ssl and BIO_get_ssl are macros over SSL_ctrl and BIO_ctrl
// (the TLS transfer of the CMP client: the server's name in the handshake, the SSL filter BIO).
static inline int dc_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return (int)SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, (void *)name);
}
static inline long dc_BIO_set_ssl(BIO *bio, SSL *ssl) { return BIO_ctrl(bio, BIO_C_SET_SSL, BIO_CLOSE, ssl); }
// The SSL of an SSL filter BIO, or NULL for any other BIO.
static inline SSL *dc_BIO_get_ssl(BIO *bio) {
    SSL *ssl = NULL;
    if (BIO_ctrl(bio, BIO_C_GET_SSL, 0, (void *)&ssl) <= 0) return NULL;
    return ssl;
}
// SSL_CTX_set_min_proto_version is a macro over SSL_CTX_ctrl.
static inline int dc_SSL_CTX_set_min_tls12(SSL_CTX *ctx) {
    return (int)SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, NULL);
}

#endif
