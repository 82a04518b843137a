// The PKCS#11 header p11-kit ships, for dcbench's module loader (dlopen, then C_GetFunctionList).
#ifndef DC_BENCH_CPKCS11_SHIM_H
#define DC_BENCH_CPKCS11_SHIM_H
#include <p11-kit/pkcs11.h>
#endif
