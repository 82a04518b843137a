// A fault-injecting PKCS#11 module for tests only: it wraps SoftHSM2 and, driven by environment
// variables, reports PIN states SoftHSM never reaches. See dc_fault_pkcs11.c.
#ifndef DC_FAULT_PKCS11_H
#define DC_FAULT_PKCS11_H
#include <p11-kit/pkcs11.h>
#endif
