// Small C shims for OpenSSL 3. Each exists because Swift cannot import the macro or reach the
// structure it replaces; keep them tiny and free of policy.
#ifndef DC_COPENSSL_SHIM_H
#define DC_COPENSSL_SHIM_H

#include <string.h>
#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/cmp.h>
#include <openssl/cms.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/decoder.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/hmac.h>
#include <openssl/http.h>
#include <openssl/ocsp.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/pkcs12.h>
#include <openssl/pkcs7.h>
#include <openssl/provider.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/x509_vfy.h>

// BIO_get_mem_data is a macro over BIO_ctrl.
static inline long dc_BIO_get_mem_data(BIO *bio, char **data) {
    return BIO_ctrl(bio, BIO_CTRL_INFO, 0, (void *)data);
}

// XN_FLAG_RFC2253 is a macro expression. We print names as UTF-8 (no \\UXXXX escapes for
// non-ASCII) and escape control characters ourselves when printing.
static inline unsigned long dc_name_flags_rfc2253_utf8(void) { return XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB; }

// EVP_PKEY_KEYPAIR is a macro expression (a selection bit mask).
static inline int dc_EVP_PKEY_KEYPAIR(void) { return EVP_PKEY_KEYPAIR; }

// sk_X509_* and sk_ASN1_OBJECT_* are macros; these typed wrappers keep casts out of Swift.
static inline int dc_sk_X509_num(const STACK_OF(X509) *sk) { return OPENSSL_sk_num((const OPENSSL_STACK *)sk); }
static inline X509 *dc_sk_X509_value(const STACK_OF(X509) *sk, int i) {
    return (X509 *)OPENSSL_sk_value((const OPENSSL_STACK *)sk, i);
}
static inline STACK_OF(X509) *dc_sk_X509_new_null(void) { return (STACK_OF(X509) *)OPENSSL_sk_new_null(); }
static inline int dc_sk_X509_push(STACK_OF(X509) *sk, X509 *x) { return OPENSSL_sk_push((OPENSSL_STACK *)sk, x); }
static inline void dc_sk_X509_free(STACK_OF(X509) *sk) { OPENSSL_sk_free((OPENSSL_STACK *)sk); }
// A stack that owns its certificates (OSSL_CMP_CTX_get1_caPubs and friends): each freed, then the stack.
static inline void dc_sk_X509_pop_free(STACK_OF(X509) *sk) { sk_X509_pop_free(sk, X509_free); }
// ERR_GET_LIB and ERR_GET_REASON, which Swift may not import (inline with macros inside).
static inline int dc_err_lib(unsigned long code) { return ERR_GET_LIB(code); }
static inline int dc_err_reason(unsigned long code) { return ERR_GET_REASON(code); }
// A stack of extensions that owns them (a CMP template's requested extensions).
static inline void dc_sk_X509_EXTENSION_pop_free(STACK_OF(X509_EXTENSION) *sk) {
    sk_X509_EXTENSION_pop_free(sk, X509_EXTENSION_free);
}
static inline int dc_sk_ASN1_OBJECT_num(const STACK_OF(ASN1_OBJECT) *sk) {
    return OPENSSL_sk_num((const OPENSSL_STACK *)sk);
}
static inline const ASN1_OBJECT *dc_sk_ASN1_OBJECT_value(const STACK_OF(ASN1_OBJECT) *sk, int i) {
    return (const ASN1_OBJECT *)OPENSSL_sk_value((const OPENSSL_STACK *)sk, i);
}
static inline void dc_EXTENDED_KEY_USAGE_free(EXTENDED_KEY_USAGE *eku) {
    sk_ASN1_OBJECT_pop_free(eku, ASN1_OBJECT_free);
}

// GENERAL_NAMES (subjectAltName) is a macro-typed stack.
static inline int dc_general_names_num(const GENERAL_NAMES *names) { return sk_GENERAL_NAME_num(names); }
static inline const GENERAL_NAME *dc_general_names_value(const GENERAL_NAMES *names, int i) {
    return sk_GENERAL_NAME_value(names, i);
}
static inline void dc_general_names_free(GENERAL_NAMES *names) { GENERAL_NAMES_free(names); }

// PKCS#12 containers: the stacks of PKCS7 and PKCS12_SAFEBAG are macros too.
static inline int dc_sk_PKCS7_num(const STACK_OF(PKCS7) *sk) { return OPENSSL_sk_num((const OPENSSL_STACK *)sk); }
static inline PKCS7 *dc_sk_PKCS7_value(const STACK_OF(PKCS7) *sk, int i) {
    return (PKCS7 *)OPENSSL_sk_value((const OPENSSL_STACK *)sk, i);
}
static inline void dc_sk_PKCS7_pop_free(STACK_OF(PKCS7) *sk) { sk_PKCS7_pop_free(sk, PKCS7_free); }
static inline int dc_sk_SAFEBAG_num(const STACK_OF(PKCS12_SAFEBAG) *sk) {
    return OPENSSL_sk_num((const OPENSSL_STACK *)sk);
}
static inline PKCS12_SAFEBAG *dc_sk_SAFEBAG_value(const STACK_OF(PKCS12_SAFEBAG) *sk, int i) {
    return (PKCS12_SAFEBAG *)OPENSSL_sk_value((const OPENSSL_STACK *)sk, i);
}
static inline void dc_sk_SAFEBAG_pop_free(STACK_OF(PKCS12_SAFEBAG) *sk) {
    sk_PKCS12_SAFEBAG_pop_free(sk, PKCS12_SAFEBAG_free);
}

// The encryption algorithm of a PKCS#7 EncryptedData content; the union member is awkward in Swift.
static inline const X509_ALGOR *dc_PKCS7_encrypted_algorithm(const PKCS7 *p7) {
    if (OBJ_obj2nid(p7->type) != NID_pkcs7_encrypted || p7->d.encrypted == NULL
        || p7->d.encrypted->enc_data == NULL)
        return NULL;
    return p7->d.encrypted->enc_data->algorithm;
}

// The key-derivation iteration count of a password-based encryption AlgorithmIdentifier
// (PKCS#5 PBES2/PBKDF2 or PKCS#12 PBE), read *without* deriving anything, so that a hostile
// count can be refused before OpenSSL spends minutes on it. Returns -1 for an algorithm whose
// count cannot be read (caller refuses it), and sets *known to 0 for an unknown algorithm.
static inline long dc_pbe_iterations(const X509_ALGOR *alg, int *known) {
    const ASN1_OBJECT *oid = NULL;
    int ptype = 0;
    const void *pval = NULL;
    long iterations = -1;
    *known = 1;
    X509_ALGOR_get0(&oid, &ptype, &pval, alg);
    if (ptype != V_ASN1_SEQUENCE || pval == NULL) {
        *known = 0;
        return -1;
    }
    const ASN1_STRING *seq = (const ASN1_STRING *)pval;
    const unsigned char *p = ASN1_STRING_get0_data(seq);
    long len = ASN1_STRING_length(seq);
    int nid = OBJ_obj2nid(oid);
    if (nid == NID_pbes2) {
        PBE2PARAM *pbe2 = d2i_PBE2PARAM(NULL, &p, len);
        if (pbe2 == NULL) return -1;
        const ASN1_OBJECT *kdf = NULL;
        int ktype = 0;
        const void *kval = NULL;
        X509_ALGOR_get0(&kdf, &ktype, &kval, pbe2->keyfunc);
        if (OBJ_obj2nid(kdf) == NID_id_pbkdf2 && ktype == V_ASN1_SEQUENCE && kval != NULL) {
            const ASN1_STRING *kseq = (const ASN1_STRING *)kval;
            const unsigned char *kp = ASN1_STRING_get0_data(kseq);
            PBKDF2PARAM *kdfp = d2i_PBKDF2PARAM(NULL, &kp, ASN1_STRING_length(kseq));
            if (kdfp != NULL) {
                iterations = ASN1_INTEGER_get(kdfp->iter);
                PBKDF2PARAM_free(kdfp);
            }
        } else {
            *known = 0;
        }
        PBE2PARAM_free(pbe2);
        return iterations;
    }
    if (nid == NID_pbe_WithSHA1And128BitRC4 || nid == NID_pbe_WithSHA1And40BitRC4
        || nid == NID_pbe_WithSHA1And3_Key_TripleDES_CBC || nid == NID_pbe_WithSHA1And2_Key_TripleDES_CBC
        || nid == NID_pbe_WithSHA1And128BitRC2_CBC || nid == NID_pbe_WithSHA1And40BitRC2_CBC
        || nid == NID_pbeWithMD5AndDES_CBC || nid == NID_pbeWithSHA1AndDES_CBC
        || nid == NID_pbeWithMD5AndRC2_CBC || nid == NID_pbeWithSHA1AndRC2_CBC) {
        PBEPARAM *pbe = d2i_PBEPARAM(NULL, &p, len);
        if (pbe == NULL) return -1;
        iterations = ASN1_INTEGER_get(pbe->iter);
        PBEPARAM_free(pbe);
        return iterations;
    }
    *known = 0;
    return -1;
}

// PBKDF2-HMAC-SHA-256 (RFC 8018 section 5.2, HMAC as in RFC 2104) over OpenSSL's SHA-256, for
// one block: a key of at most 32 bytes. OpenSSL 3.0's PKCS5_PBKDF2_HMAC copies three provider
// digest contexts in every iteration, allocating and wiping each: more than half of its time.
// Here the HMAC's inner and outer states are computed once and copied as plain structures, the
// same bytes (the tests compare with `openssl kdf`) in half the time. Everything derived from the
// passphrase is wiped before returning. Returns 0, writing nothing, for a count of 0 or a key
// longer than 32 bytes. The low-level SHA-256 calls do not go through providers: on a system
// configured for FIPS, this stretching runs outside the FIPS module.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static inline int dc_pbkdf2_hmac_sha256(const unsigned char *pass, size_t passlen, const unsigned char *salt,
                                        size_t saltlen, unsigned long iterations, unsigned char *out,
                                        size_t outlen) {
    static const unsigned char first_block[4] = {0, 0, 0, 1};
    unsigned char key[SHA256_CBLOCK] = {0}, pad[SHA256_CBLOCK], u[SHA256_DIGEST_LENGTH], t[SHA256_DIGEST_LENGTH];
    SHA256_CTX inner, outer, ctx;
    if (iterations < 1 || outlen > sizeof t) return 0;
    if (passlen > SHA256_CBLOCK) {
        // A key longer than the block is its digest (RFC 2104), through the same low-level
        // calls, which cannot fail (the one-shot SHA256 can, and would leave the key zero).
        SHA256_Init(&ctx);
        SHA256_Update(&ctx, pass, passlen);
        SHA256_Final(key, &ctx);
    } else if (passlen > 0) {
        memcpy(key, pass, passlen);
    }
    for (size_t i = 0; i < sizeof pad; i++) pad[i] = key[i] ^ 0x36;
    SHA256_Init(&inner);
    SHA256_Update(&inner, pad, sizeof pad);
    for (size_t i = 0; i < sizeof pad; i++) pad[i] = key[i] ^ 0x5c;
    SHA256_Init(&outer);
    SHA256_Update(&outer, pad, sizeof pad);
    // U1 = HMAC(P, S || INT(1)); Uj = HMAC(P, Uj-1); T1 = U1 ^ U2 ^ ... ^ Uc.
    ctx = inner;
    SHA256_Update(&ctx, salt, saltlen);
    SHA256_Update(&ctx, first_block, sizeof first_block);
    SHA256_Final(u, &ctx);
    ctx = outer;
    SHA256_Update(&ctx, u, sizeof u);
    SHA256_Final(u, &ctx);
    memcpy(t, u, sizeof t);
    for (unsigned long j = 1; j < iterations; j++) {
        ctx = inner;
        SHA256_Update(&ctx, u, sizeof u);
        SHA256_Final(u, &ctx);
        ctx = outer;
        SHA256_Update(&ctx, u, sizeof u);
        SHA256_Final(u, &ctx);
        for (size_t k = 0; k < sizeof t; k++) t[k] ^= u[k];
    }
    memcpy(out, t, outlen);
    OPENSSL_cleanse(key, sizeof key);
    OPENSSL_cleanse(pad, sizeof pad);
    OPENSSL_cleanse(u, sizeof u);
    OPENSSL_cleanse(t, sizeof t);
    OPENSSL_cleanse(&inner, sizeof inner);
    OPENSSL_cleanse(&outer, sizeof outer);
    OPENSSL_cleanse(&ctx, sizeof ctx);
    return 1;
}
#pragma GCC diagnostic pop

// Reading certificatePolicies: the POLICYINFO stack is only reachable through macros.
static inline int dc_certificate_policies_num(const CERTIFICATEPOLICIES *policies) {
    return sk_POLICYINFO_num(policies);
}
static inline const ASN1_OBJECT *dc_certificate_policies_id(const CERTIFICATEPOLICIES *policies, int i) {
    return sk_POLICYINFO_value(policies, i)->policyid;
}
static inline void dc_certificate_policies_free(CERTIFICATEPOLICIES *policies) {
    sk_POLICYINFO_pop_free(policies, POLICYINFO_free);
}
static inline int dc_sk_X509_EXTENSION_num(const STACK_OF(X509_EXTENSION) *sk) { return sk_X509_EXTENSION_num(sk); }

// certificatePolicies from dotted OIDs. X509V3_EXT_nconf wants a configuration database for this
// extension even without qualifiers, and the POLICYINFO stack is only reachable through macros.
static inline int dc_add_certificate_policies(X509 *x509, const char *const *oids, int count) {
    CERTIFICATEPOLICIES *policies = sk_POLICYINFO_new_null();
    if (policies == NULL) return 0;
    int ok = 1;
    for (int i = 0; i < count && ok; i++) {
        POLICYINFO *info = POLICYINFO_new();
        ASN1_OBJECT *oid = OBJ_txt2obj(oids[i], 1);
        if (info == NULL || oid == NULL) {
            POLICYINFO_free(info);
            ASN1_OBJECT_free(oid);
            ok = 0;
            break;
        }
        ASN1_OBJECT_free(info->policyid);
        info->policyid = oid;
        if (sk_POLICYINFO_push(policies, info) <= 0) { POLICYINFO_free(info); ok = 0; }
    }
    if (ok) ok = X509_add1_ext_i2d(x509, NID_certificate_policies, policies, 0, X509V3_ADD_DEFAULT) == 1;
    sk_POLICYINFO_pop_free(policies, POLICYINFO_free);
    return ok;
}

// The password callback for PEM_do_header. OpenSSL's default callback prompts on the terminal
// when it has no password, so we always pass this one: it copies the caller's bytes, or refuses
// (-1) when there are none. It never prompts.
typedef struct { const char *bytes; int length; } dc_password;
static inline int dc_password_callback(char *buf, int size, int rwflag, void *userdata) {
    (void)rwflag;
    const dc_password *pw = (const dc_password *)userdata;
    if (pw == NULL || pw->bytes == NULL || pw->length > size) return -1;
    memcpy(buf, pw->bytes, (size_t)pw->length);
    return pw->length;
}
static inline pem_password_cb *dc_password_callback_pointer(void) { return dc_password_callback; }

// Revocation: the stacks of X509_REVOKED and of OCSP URL strings (X509_get1_ocsp) are macros.
static inline int dc_sk_X509_REVOKED_num(const STACK_OF(X509_REVOKED) *sk) {
    return OPENSSL_sk_num((const OPENSSL_STACK *)sk);
}
static inline X509_REVOKED *dc_sk_X509_REVOKED_value(const STACK_OF(X509_REVOKED) *sk, int i) {
    return (X509_REVOKED *)OPENSSL_sk_value((const OPENSSL_STACK *)sk, i);
}
static inline int dc_sk_OPENSSL_STRING_num(const STACK_OF(OPENSSL_STRING) *sk) {
    return OPENSSL_sk_num((const OPENSSL_STACK *)sk);
}
static inline const char *dc_sk_OPENSSL_STRING_value(const STACK_OF(OPENSSL_STRING) *sk, int i) {
    return (const char *)OPENSSL_sk_value((const OPENSSL_STACK *)sk, i);
}

#endif
