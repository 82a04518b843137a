/* The floor for the conversion benchmark: the same OpenSSL calls dcprovision makes to turn PEM
 * certificates and keys into DER and PKCS#8 DER, in a tight C loop, writing each output file.
 * With --fsync it also syncs each file and the directory, as dcprovision does.
 * usage: conversion-floor [--fsync] OUTDIR FILE... */
#include <fcntl.h>
#include <openssl/decoder.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void write_file(const char *dir, const char *name, const unsigned char *der, int len, int mode, int sync) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0 || write(fd, der, (size_t)len) != len) { perror(path); exit(1); }
    if (sync) fsync(fd);
    close(fd);
}

int main(int argc, char **argv) {
    int sync = argc > 1 && strcmp(argv[1], "--fsync") == 0;
    int first = 1 + sync;
    if (argc < first + 2) { fprintf(stderr, "usage: %s [--fsync] OUTDIR FILE...\n", argv[0]); return 64; }
    const char *out = argv[first];
    EVP_PKEY *decoded = NULL;
    OSSL_DECODER_CTX *decoder =
        OSSL_DECODER_CTX_new_for_pkey(&decoded, "DER", "PrivateKeyInfo", NULL, EVP_PKEY_KEYPAIR, NULL, NULL);
    for (int i = first + 1; i < argc; i++) {
        BIO *bio = BIO_new_file(argv[i], "r");
        if (!bio) { perror(argv[i]); return 66; }
        const char *base = strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i];
        char name[1024];
        unsigned char *der = NULL;
        int len;
        char *label = NULL, *header = NULL;
        unsigned char *block = NULL;
        long blen = 0;
        if (!PEM_read_bio(bio, &label, &header, &block, &blen)) { fprintf(stderr, "%s: not PEM\n", argv[i]); return 65; }
        const unsigned char *cursor = block;
        if (strstr(base, ".key")) {
            size_t remaining = (size_t)blen;
            if (!OSSL_DECODER_from_data(decoder, &cursor, &remaining) || decoded == NULL) { fprintf(stderr, "%s: bad key\n", argv[i]); return 65; }
            PKCS8_PRIV_KEY_INFO *p8 = EVP_PKEY2PKCS8(decoded);
            if (!p8 || (len = i2d_PKCS8_PRIV_KEY_INFO(p8, &der)) <= 0) { fprintf(stderr, "%s: bad key\n", argv[i]); return 65; }
            snprintf(name, sizeof name, "%.*s.key.der", (int)(strstr(base, ".key") - base), base);
            write_file(out, name, der, len, 0600, sync);
            PKCS8_PRIV_KEY_INFO_free(p8);
            EVP_PKEY_free(decoded);
            decoded = NULL;
        } else {
            X509 *x509 = d2i_X509(NULL, &cursor, blen);
            if (!x509 || (len = i2d_X509(x509, &der)) <= 0) { fprintf(stderr, "%s: bad certificate\n", argv[i]); return 65; }
            snprintf(name, sizeof name, "%.*s.cert.der", (int)(strchr(base, '.') - base), base);
            write_file(out, name, der, len, 0644, sync);
            X509_free(x509);
        }
        OPENSSL_free(label);
        OPENSSL_free(header);
        OPENSSL_free(block);
        OPENSSL_free(der);
        BIO_free(bio);
    }
    if (sync) { int fd = open(out, O_RDONLY); fsync(fd); close(fd); }
    return 0;
}
