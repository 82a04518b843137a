// p11-kit: PKCS#11 module loading and RFC 7512 URI parsing. The header uses the standard
// PKCS#11 field names. Shims are added here as the PKCS#11 provider needs them.
#ifndef DC_CP11KIT_SHIM_H
#define DC_CP11KIT_SHIM_H
#include <p11-kit/p11-kit.h>
#include <p11-kit/pkcs11.h>
#include <p11-kit/uri.h>

// PKCS#11 3.0's CK_INTERFACE, which p11-kit 0.24's header does not have yet: the module answers
// C_GetInterfaceList with its 2.40 function list under the name "PKCS 11".
typedef struct DCInterface {
    CK_UTF8CHAR *pInterfaceName;
    void *pFunctionList;
    CK_FLAGS flags;
} DCInterface;
#endif
