// The PKCS#11 module runs inside programs that may bring their own allocator: Chromium replaces
// malloc with PartitionAlloc, whose BackupRefPtr keeps 4 bytes of bookkeeping at the end of each
// slot, so `malloc_usable_size` answers a size that is not a multiple of 8. Swift's standard library
// trusts that answer to size a string's storage and then places an 8-byte, 8-aligned pointer (the
// string's breadcrumbs) at its end, over the allocator's bookkeeping; Chromium then stops on the
// next free. (Chromium rounds its bookkeeping up to 8 on Apple platforms for the same reason.)
//
// The module is linked with `--wrap` for the functions below (Package.swift), so the Swift code
// linked into it asks for sizes rounded up to 8 and hears usable sizes rounded down to 8: the usable
// size it hears is still at least what it asked for, and nothing it writes reaches past the last
// 8-byte boundary of what the allocator gave. The memory still comes from, and goes back to, the
// program's own allocator, so a pointer may cross between the module and the program (or libc)
// either way. With glibc's allocator both roundings change nothing: its sizes are multiples of 8.

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

void *__real_malloc(size_t size);
void *__real_calloc(size_t count, size_t size);
void *__real_realloc(void *pointer, size_t size);
int __real_posix_memalign(void **pointer, size_t alignment, size_t size);
size_t __real_malloc_usable_size(void *pointer);

/// `size` rounded up to a multiple of 8; a size that cannot be rounded is left to fail in malloc.
static inline size_t roundedUp(size_t size) {
    return size > SIZE_MAX - 7 ? size : (size + 7) & ~(size_t)7;
}

void *__wrap_malloc(size_t size) { return __real_malloc(roundedUp(size)); }

void *__wrap_calloc(size_t count, size_t size) {
    if (size != 0 && count > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    return __real_calloc(1, roundedUp(count * size));
}

void *__wrap_realloc(void *pointer, size_t size) {
    // realloc(p, 0) keeps its meaning for the program's allocator.
    return __real_realloc(pointer, size == 0 ? 0 : roundedUp(size));
}

int __wrap_posix_memalign(void **pointer, size_t alignment, size_t size) {
    return __real_posix_memalign(pointer, alignment, roundedUp(size));
}

size_t __wrap_malloc_usable_size(void *pointer) {
    return __real_malloc_usable_size(pointer) & ~(size_t)7;
}
