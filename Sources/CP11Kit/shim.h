// p11-kit: PKCS#11 module loading and RFC 7512 URI parsing. The header uses the standard
// PKCS#11 field names. Shims are added here as the PKCS#11 provider needs them.
#ifndef DC_CP11KIT_SHIM_H
#define DC_CP11KIT_SHIM_H
#include <p11-kit/p11-kit.h>
#include <p11-kit/pkcs11.h>
#include <p11-kit/uri.h>
#endif
