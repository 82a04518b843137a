/* What loading a PKCS#11 module costs the program that loads it, for Benchmarks/run-module-footprint.sh:
 *
 *   module-footprint MODULE
 *
 * loads MODULE with dlopen, calls C_GetFunctionList and C_Initialize, lists the slots with a token,
 * opens a session on the first and finds every object visible without logging in: what a program
 * does to show a token. It prints one line of JSON: the process's mapped memory (VmSize) and
 * resident memory (VmRSS) before and after, in KiB, the milliseconds it took, and how many objects
 * it found (0 means no token). No PIN is used. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <p11-kit/pkcs11.h>

static long status_kib(const char *field) {
    FILE *file = fopen("/proc/self/status", "r");
    char line[256];
    long value = -1;
    size_t length = strlen(field);
    if (!file) return -1;
    while (fgets(line, sizeof line, file))
        if (strncmp(line, field, length) == 0 && line[length] == ':') value = strtol(line + length + 1, NULL, 10);
    fclose(file);
    return value;
}

static double milliseconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec * 1e3 + now.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: module-footprint MODULE\n"); return 64; }
    long vm_before = status_kib("VmSize"), rss_before = status_kib("VmRSS");
    double started = milliseconds();
    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!library) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    CK_C_GetFunctionList get = (CK_C_GetFunctionList)dlsym(library, "C_GetFunctionList");
    CK_FUNCTION_LIST_PTR functions = NULL;
    if (!get || get(&functions) != CKR_OK) { fprintf(stderr, "no C_GetFunctionList\n"); return 1; }
    CK_C_INITIALIZE_ARGS arguments = {0};
    arguments.flags = CKF_OS_LOCKING_OK;
    if (functions->C_Initialize(&arguments) != CKR_OK) { fprintf(stderr, "C_Initialize failed\n"); return 1; }
    CK_SLOT_ID slots[16];
    CK_ULONG count = 16, found = 0, total = 0;
    if (functions->C_GetSlotList(CK_TRUE, slots, &count) != CKR_OK) { fprintf(stderr, "C_GetSlotList failed\n"); return 1; }
    if (count > 0) {
        CK_SESSION_HANDLE session;
        if (functions->C_OpenSession(slots[0], CKF_SERIAL_SESSION, NULL, NULL, &session) != CKR_OK) return 1;
        CK_OBJECT_HANDLE objects[64];
        functions->C_FindObjectsInit(session, NULL, 0);
        while (functions->C_FindObjects(session, objects, 64, &found) == CKR_OK && found > 0) total += found;
        functions->C_FindObjectsFinal(session);
    }
    double took = milliseconds() - started;
    long vm_after = status_kib("VmSize"), rss_after = status_kib("VmRSS");
    printf("{\"vm_before\":%ld,\"rss_before\":%ld,\"vm_after\":%ld,\"rss_after\":%ld,\"ms\":%.2f,\"objects\":%lu}\n",
        vm_before, rss_before, vm_after, rss_after, took, total);
    functions->C_Finalize(NULL);
    return 0;
}
