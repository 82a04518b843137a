// The dynamic linker reads all of the module's relocations (`.rela.dyn`, 0.9 MiB: about 41 000
// entries, most of them the Swift metadata's pointers) once, when the module is loaded, and never
// again: the module is linked `-z nodelete` and binds no symbol lazily through them. Those pages
// would stay resident in every program that loads the module, so once the dynamic linker is done
// (an ELF constructor runs after this object is relocated) the module gives them back with
// `MADV_DONTNEED`. They are clean pages of a read-only private mapping of the file: were they read
// again, the kernel would fault them back in from the file, unchanged.

#define _GNU_SOURCE
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static long release_relocations_of(const struct dl_phdr_info *info);

/// dl_iterate_phdr's callback: releases the relocations of the image that holds `data`.
static int image_of(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    uintptr_t address = (uintptr_t)data;
    for (ElfW(Half) index = 0; index < info->dlpi_phnum; index++) {
        const ElfW(Phdr) *segment = &info->dlpi_phdr[index];
        uintptr_t start = info->dlpi_addr + segment->p_vaddr;
        if (segment->p_type == PT_LOAD && address >= start && address < start + segment->p_memsz) {
            release_relocations_of(info);
            return 1;
        }
    }
    return 0;
}

/// The read-only loadable segment of `info` that holds [start, end), or NULL.
static const ElfW(Phdr) *read_only_segment(const struct dl_phdr_info *info, uintptr_t start, uintptr_t end) {
    for (ElfW(Half) index = 0; index < info->dlpi_phnum; index++) {
        const ElfW(Phdr) *segment = &info->dlpi_phdr[index];
        uintptr_t first = info->dlpi_addr + segment->p_vaddr;
        if (segment->p_type == PT_LOAD && start >= first && end <= first + segment->p_filesz)
            return (segment->p_flags & PF_W) ? NULL : segment;
    }
    return NULL;
}

/// Gives back the resident pages of the image's relocations if they lie in a read-only segment; the
/// bytes given back, or 0.
static long release_relocations_of(const struct dl_phdr_info *info) {
    uintptr_t rela = 0, size = 0;
    const ElfW(Dyn) *dynamic = NULL;
    for (ElfW(Half) index = 0; index < info->dlpi_phnum; index++)
        if (info->dlpi_phdr[index].p_type == PT_DYNAMIC)
            dynamic = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[index].p_vaddr);
    if (!dynamic) return 0;
    for (; dynamic->d_tag != DT_NULL; dynamic++) {
        if (dynamic->d_tag == DT_RELA) rela = dynamic->d_un.d_ptr;
        if (dynamic->d_tag == DT_RELASZ) size = dynamic->d_un.d_val;
    }
    if (!rela || !size) return 0;
    // glibc rewrites the dynamic section's addresses to run-time ones when it can; either way.
    if (rela < info->dlpi_addr) rela += info->dlpi_addr;
    if (!read_only_segment(info, rela, rela + size)) return 0;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t first = (rela + page - 1) & ~(page - 1), last = (rela + size) & ~(page - 1);
    if (last <= first || madvise((void *)first, last - first, MADV_DONTNEED) != 0) return 0;
    return (long)(last - first);
}

__attribute__((constructor)) static void release_relocations(void) {
    dl_iterate_phdr(image_of, (void *)(uintptr_t)&release_relocations);
}
