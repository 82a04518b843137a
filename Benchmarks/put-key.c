/* Puts a PEM private key on a PKCS#11 token as a NOT sensitive, extractable object, for the
 * token-credential benchmark: pkcs11-tool and p11tool can only write sensitive keys, and a
 * smart card's export path needs keys the token will give out.
 * usage: put-key MODULE TOKEN-LABEL PIN ID(hex byte) KEY.pem      (the PIN on argv: test tokens only) */
#include <dlfcn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <p11-kit-1/p11-kit/pkcs11.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ATTRIBUTES 20
static CK_ATTRIBUTE template[MAX_ATTRIBUTES];
static int count;
static void add(CK_ATTRIBUTE_TYPE type, const void *value, size_t length) {
    void *copy = malloc(length);
    memcpy(copy, value, length);
    template[count++] = (CK_ATTRIBUTE){type, copy, (CK_ULONG)length};
}
static void add_bn(EVP_PKEY *key, const char *name, CK_ATTRIBUTE_TYPE type, int size) {
    BIGNUM *number = NULL;
    if (!EVP_PKEY_get_bn_param(key, name, &number)) { fprintf(stderr, "no %s\n", name); exit(1); }
    int length = size ? size : BN_num_bytes(number);
    unsigned char *bytes = malloc((size_t)length);
    BN_bn2binpad(number, bytes, length);
    add(type, bytes, (size_t)length);
    free(bytes);
    BN_free(number);
}
static void check(CK_RV rv, const char *what) { if (rv != CKR_OK && rv != CKR_USER_ALREADY_LOGGED_IN) { fprintf(stderr, "%s: 0x%lx\n", what, rv); exit(1); } }

int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: %s MODULE TOKEN PIN ID KEY.pem\n", argv[0]); return 64; }
    FILE *file = fopen(argv[5], "r");
    EVP_PKEY *key = file ? PEM_read_PrivateKey(file, NULL, NULL, NULL) : NULL;
    if (key == NULL) { fprintf(stderr, "cannot read %s\n", argv[5]); return 1; }
    void *module = dlopen(argv[1], RTLD_NOW);
    CK_C_GetFunctionList get = module ? (CK_C_GetFunctionList)dlsym(module, "C_GetFunctionList") : NULL;
    CK_FUNCTION_LIST_PTR p11;
    if (get == NULL || get(&p11) != CKR_OK) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    check(p11->C_Initialize(NULL), "C_Initialize");
    CK_SLOT_ID slots[64];
    CK_ULONG slot_count = 64;
    check(p11->C_GetSlotList(CK_TRUE, slots, &slot_count), "C_GetSlotList");
    CK_SLOT_ID slot = (CK_SLOT_ID)-1;
    for (CK_ULONG i = 0; i < slot_count; i++) {
        CK_TOKEN_INFO info;
        if (p11->C_GetTokenInfo(slots[i], &info) != CKR_OK) continue;
        char label[33];
        memcpy(label, info.label, 32);
        label[32] = 0;
        for (int j = 31; j >= 0 && label[j] == ' '; j--) label[j] = 0;
        if (strcmp(label, argv[2]) == 0) slot = slots[i];
    }
    if (slot == (CK_SLOT_ID)-1) { fprintf(stderr, "no token %s\n", argv[2]); return 1; }
    CK_SESSION_HANDLE session;
    check(p11->C_OpenSession(slot, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &session), "C_OpenSession");
    check(p11->C_Login(session, CKU_USER, (CK_UTF8CHAR_PTR)argv[3], strlen(argv[3])), "C_Login");

    CK_OBJECT_CLASS class = CKO_PRIVATE_KEY;
    CK_BBOOL yes = CK_TRUE, no = CK_FALSE;
    unsigned char id = (unsigned char)strtoul(argv[4], NULL, 16);
    add(CKA_CLASS, &class, sizeof class);
    add(CKA_TOKEN, &yes, 1);
    add(CKA_PRIVATE, &yes, 1);
    add(CKA_SIGN, &yes, 1);
    add(CKA_SENSITIVE, &no, 1);
    add(CKA_EXTRACTABLE, &yes, 1);
    add(CKA_ID, &id, 1);
    if (EVP_PKEY_get_base_id(key) == EVP_PKEY_EC) {
        CK_KEY_TYPE type = CKK_EC;
        add(CKA_KEY_TYPE, &type, sizeof type);
        char group[64];
        size_t length = 0;
        EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group, &length);
        ASN1_OBJECT *oid = OBJ_txt2obj(group, 0);
        unsigned char *der = NULL;
        int der_length = i2d_ASN1_OBJECT(oid, &der);
        add(CKA_EC_PARAMS, der, (size_t)der_length);
        add_bn(key, OSSL_PKEY_PARAM_PRIV_KEY, CKA_VALUE, (EVP_PKEY_get_bits(key) + 7) / 8);
    } else {
        CK_KEY_TYPE type = CKK_RSA;
        add(CKA_KEY_TYPE, &type, sizeof type);
        add_bn(key, "n", CKA_MODULUS, 0);
        add_bn(key, "e", CKA_PUBLIC_EXPONENT, 0);
        add_bn(key, "d", CKA_PRIVATE_EXPONENT, 0);
        add_bn(key, "rsa-factor1", CKA_PRIME_1, 0);
        add_bn(key, "rsa-factor2", CKA_PRIME_2, 0);
        add_bn(key, "rsa-exponent1", CKA_EXPONENT_1, 0);
        add_bn(key, "rsa-exponent2", CKA_EXPONENT_2, 0);
        add_bn(key, "rsa-coefficient1", CKA_COEFFICIENT, 0);
    }
    CK_OBJECT_HANDLE object;
    check(p11->C_CreateObject(session, template, (CK_ULONG)count, &object), "C_CreateObject");
    p11->C_Logout(session);
    p11->C_CloseSession(session);
    p11->C_Finalize(NULL);
    return 0;
}
