// The PKCS#11 types and function list of p11-kit's header, and nothing to link: the PKCS#11 module
// calls no p11-kit function, so a program that loads it does not load libp11-kit for it. (The
// header includes only <stddef.h>; it is found under /usr/include without pkg-config's -I.)
#ifndef DC_CPKCS11TYPES_SHIM_H
#define DC_CPKCS11TYPES_SHIM_H
#include <p11-kit-1/p11-kit/pkcs11.h>

// PKCS#11 3.0's CK_INTERFACE, which p11-kit 0.24's header does not have yet: the module answers
// C_GetInterfaceList with its 2.40 function list under the name "PKCS 11".
typedef struct DCInterface {
    CK_UTF8CHAR *pInterfaceName;
    void *pFunctionList;
    CK_FLAGS flags;
} DCInterface;
#endif
