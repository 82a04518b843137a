// The PKCS#11 module's allocation wrappers (see allocator.c). Nothing here is called by name: the
// module is linked with `--wrap` for each allocation function, so every call the Swift runtime,
// the standard library and Foundation linked into the module make to them lands in allocator.c.
#ifndef C_MODULE_ALLOCATOR_H
#define C_MODULE_ALLOCATOR_H
#endif
