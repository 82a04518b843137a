// A fault-injecting PKCS#11 module, for tests only. SoftHSM2 never locks a PIN (after 12 wrong
// logins only CKF_USER_PIN_COUNT_LOW was set), so the PIN-safety rules cannot be tested against it
// alone. This module forwards every call to SoftHSM2 and, per the environment of the process that
// loads it, changes a few answers:
//
//   DC_FAULT_PIN        a list of: count-low, final-try, locked (token flags reported by
//                       C_GetTokenInfo; with locked, C_Login answers CKR_PIN_LOCKED), pinpad
//                       (CKF_PROTECTED_AUTHENTICATION_PATH; a NULL-PIN C_Login logs in with
//                       DC_FAULT_PINPAD_PIN, as a reader's PIN pad would), removed (C_FindObjects
//                       answers CKR_DEVICE_REMOVED: a card pulled out mid-read)
//   DC_FAULT_LOGIN_LOG  a file that gets one line per C_Login call, so tests can count attempts
#include "dc_fault_pkcs11.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SOFTHSM "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so"

static CK_FUNCTION_LIST *real;
static CK_FUNCTION_LIST fake;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int fault(const char *name) {
    const char *mode = getenv("DC_FAULT_PIN");
    return mode != NULL && strstr(mode, name) != NULL;
}

static CK_RV fault_GetTokenInfo(CK_SLOT_ID slot, CK_TOKEN_INFO_PTR info) {
    CK_RV rv = real->C_GetTokenInfo(slot, info);
    if (rv != CKR_OK) return rv;
    if (fault("count-low")) info->flags |= CKF_USER_PIN_COUNT_LOW;
    if (fault("final-try")) info->flags |= CKF_USER_PIN_FINAL_TRY;
    if (fault("locked")) info->flags |= CKF_USER_PIN_LOCKED;
    if (fault("pinpad")) info->flags |= CKF_PROTECTED_AUTHENTICATION_PATH;
    return rv;
}

static CK_RV fault_Login(CK_SESSION_HANDLE session, CK_USER_TYPE user, CK_UTF8CHAR_PTR pin, CK_ULONG length) {
    const char *log = getenv("DC_FAULT_LOGIN_LOG");
    if (log != NULL) {
        FILE *file = fopen(log, "a");
        if (file != NULL) { fputs(pin == NULL ? "C_Login (no PIN)\n" : "C_Login\n", file); fclose(file); }
    }
    if (fault("locked")) return CKR_PIN_LOCKED;
    if (pin == NULL && fault("pinpad")) {
        const char *pad = getenv("DC_FAULT_PINPAD_PIN");
        if (pad == NULL) return CKR_PIN_INCORRECT;
        return real->C_Login(session, user, (CK_UTF8CHAR_PTR)pad, strlen(pad));
    }
    return real->C_Login(session, user, pin, length);
}

static CK_RV fault_FindObjects(CK_SESSION_HANDLE session, CK_OBJECT_HANDLE_PTR objects, CK_ULONG max, CK_ULONG_PTR count) {
    if (fault("removed")) return CKR_DEVICE_REMOVED;
    return real->C_FindObjects(session, objects, max, count);
}

static void load(void) {
    void *handle = dlopen(SOFTHSM, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) return;
    CK_C_GetFunctionList get = (CK_C_GetFunctionList)dlsym(handle, "C_GetFunctionList");
    if (get == NULL || get(&real) != CKR_OK) { real = NULL; return; }
    fake = *real;
    fake.C_GetTokenInfo = fault_GetTokenInfo;
    fake.C_Login = fault_Login;
    fake.C_FindObjects = fault_FindObjects;
}

CK_RV C_GetFunctionList(CK_FUNCTION_LIST_PTR_PTR list) {
    pthread_once(&once, load);
    if (real == NULL || list == NULL) return CKR_GENERAL_ERROR;
    *list = &fake;
    return CKR_OK;
}
