// A fault-injecting PKCS#11 module, for tests only. SoftHSM2 never locks a PIN (after 12 wrong
// logins only CKF_USER_PIN_COUNT_LOW was set), so the PIN-safety rules cannot be tested against it
// alone. This module forwards every call to SoftHSM2 and, per the environment of the process that
// loads it, changes a few answers:
//
//   DC_FAULT            a list of: count-low, final-try, locked (token flags reported by
//                       C_GetTokenInfo; with locked, C_Login answers CKR_PIN_LOCKED), pinpad
//                       (CKF_PROTECTED_AUTHENTICATION_PATH; a NULL-PIN C_Login logs in with
//                       DC_FAULT_PINPAD_PIN, as a reader's PIN pad would), removed (C_FindObjects
//                       answers CKR_DEVICE_REMOVED: a card pulled out mid-read), session-closed
//                       (the first C_GetAttributeValue after a login really closes every session
//                       of the token and answers CKR_SESSION_HANDLE_INVALID: a card reset, or
//                       another program's C_CloseAllSessions, mid-read), empty-slot (one more slot,
//                       EMPTY_SLOT, that C_GetSlotList lists only when asked for every slot, and that
//                       holds no token: a reader without a card, which SoftHSM cannot show),
//                       changed-once (the first C_GetAttributeValue answers
//                       CKR_OBJECT_HANDLE_INVALID: another program changed the token's objects
//                       between the find and the read), changing (every C_GetAttributeValue
//                       answers so: a token that never holds still)
//   DC_FAULT_LOGIN_LOG  a file that gets one line per C_Login call, so tests can count attempts
//   DC_FAULT_CALL_LOG   a file that gets, when the process exits, the number of calls to each function that
//                       talks to the token (the benchmark's "PKCS#11 calls per listing")
#include "dc_fault_pkcs11.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SOFTHSM "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so"

#define EMPTY_SLOT 4242

static CK_FUNCTION_LIST *real;
static CK_FUNCTION_LIST fake;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int fault(const char *name) {
    const char *mode = getenv("DC_FAULT");
    return mode != NULL && strstr(mode, name) != NULL;
}

static CK_RV fault_GetTokenInfo(CK_SLOT_ID slot, CK_TOKEN_INFO_PTR info) {
    if (fault("empty-slot") && slot == EMPTY_SLOT) return CKR_TOKEN_NOT_PRESENT;
    CK_RV rv = real->C_GetTokenInfo(slot, info);
    if (rv != CKR_OK) return rv;
    if (fault("count-low")) info->flags |= CKF_USER_PIN_COUNT_LOW;
    if (fault("final-try")) info->flags |= CKF_USER_PIN_FINAL_TRY;
    if (fault("locked")) info->flags |= CKF_USER_PIN_LOCKED;
    if (fault("pinpad")) info->flags |= CKF_PROTECTED_AUTHENTICATION_PATH;
    return rv;
}

static CK_RV fault_GetSlotList(CK_BBOOL present, CK_SLOT_ID_PTR list, CK_ULONG_PTR count) {
    if (!fault("empty-slot") || present || count == NULL) return real->C_GetSlotList(present, list, count);
    CK_ULONG room = *count;
    CK_RV rv = real->C_GetSlotList(present, list, count);
    if (rv == CKR_BUFFER_TOO_SMALL || (rv == CKR_OK && list != NULL && *count + 1 > room)) { *count += 1; return CKR_BUFFER_TOO_SMALL; }
    if (rv != CKR_OK) return rv;
    if (list != NULL) list[*count] = EMPTY_SLOT;
    *count += 1;
    return CKR_OK;
}

static CK_RV fault_GetSlotInfo(CK_SLOT_ID slot, CK_SLOT_INFO_PTR info) {
    if (!fault("empty-slot") || slot != EMPTY_SLOT) return real->C_GetSlotInfo(slot, info);
    memset(info, ' ', sizeof *info);
    memcpy(info->slotDescription, "DC fault empty reader", 21);
    memcpy(info->manufacturerID, "DC fault", 8);
    info->flags = CKF_REMOVABLE_DEVICE | CKF_HW_SLOT;
    info->hardwareVersion.major = info->hardwareVersion.minor = 0;
    info->firmwareVersion.major = info->firmwareVersion.minor = 0;
    return CKR_OK;
}

static unsigned long calls_login, calls_sign_init, calls_sign;
static int logged_in_slot_valid;
static CK_SLOT_ID logged_in_slot;
static int session_closed_once;

static CK_RV fault_Login(CK_SESSION_HANDLE session, CK_USER_TYPE user, CK_UTF8CHAR_PTR pin, CK_ULONG length) {
    const char *log = getenv("DC_FAULT_LOGIN_LOG");
    if (log != NULL) {
        FILE *file = fopen(log, "a");
        if (file != NULL) { fputs(pin == NULL ? "C_Login (no PIN)\n" : "C_Login\n", file); fclose(file); }
    }
    __atomic_add_fetch(&calls_login, 1, __ATOMIC_RELAXED);
    CK_SESSION_INFO info;
    if (real->C_GetSessionInfo(session, &info) == CKR_OK) { logged_in_slot = info.slotID; logged_in_slot_valid = 1; }
    if (fault("locked")) return CKR_PIN_LOCKED;
    if (pin == NULL && fault("pinpad")) {
        const char *pad = getenv("DC_FAULT_PINPAD_PIN");
        if (pad == NULL) return CKR_PIN_INCORRECT;
        return real->C_Login(session, user, (CK_UTF8CHAR_PTR)pad, strlen(pad));
    }
    return real->C_Login(session, user, pin, length);
}


static int changed_once;

static CK_RV fault_GetAttributeValue(CK_SESSION_HANDLE session, CK_OBJECT_HANDLE object, CK_ATTRIBUTE_PTR template, CK_ULONG count) {
    if (fault("session-closed") && logged_in_slot_valid && !__atomic_exchange_n(&session_closed_once, 1, __ATOMIC_SEQ_CST)) {
        real->C_CloseAllSessions(logged_in_slot);
        return CKR_SESSION_HANDLE_INVALID;
    }
    if (fault("changing")) return CKR_OBJECT_HANDLE_INVALID;
    if (fault("changed-once") && !__atomic_exchange_n(&changed_once, 1, __ATOMIC_SEQ_CST)) return CKR_OBJECT_HANDLE_INVALID;
    return real->C_GetAttributeValue(session, object, template, count);
}

static CK_RV fault_FindObjects(CK_SESSION_HANDLE session, CK_OBJECT_HANDLE_PTR objects, CK_ULONG max, CK_ULONG_PTR count) {
    if (fault("removed")) return CKR_DEVICE_REMOVED;
    return real->C_FindObjects(session, objects, max, count);
}

// Call counting for the benchmark: a real card costs milliseconds per call.
static unsigned long calls_slot_list, calls_token_info, calls_open, calls_find_init, calls_find, calls_find_final, calls_attribute;
static CK_RV count_GetSlotList(CK_BBOOL present, CK_SLOT_ID_PTR list, CK_ULONG_PTR count) { __atomic_add_fetch(&calls_slot_list, 1, __ATOMIC_RELAXED); return fault_GetSlotList(present, list, count); }
static CK_RV count_GetTokenInfo(CK_SLOT_ID slot, CK_TOKEN_INFO_PTR info) { __atomic_add_fetch(&calls_token_info, 1, __ATOMIC_RELAXED); return fault_GetTokenInfo(slot, info); }
static CK_RV count_OpenSession(CK_SLOT_ID slot, CK_FLAGS flags, void *app, CK_NOTIFY notify, CK_SESSION_HANDLE_PTR session) { __atomic_add_fetch(&calls_open, 1, __ATOMIC_RELAXED); return real->C_OpenSession(slot, flags, app, notify, session); }
static CK_RV count_FindObjectsInit(CK_SESSION_HANDLE session, CK_ATTRIBUTE_PTR template, CK_ULONG count) { __atomic_add_fetch(&calls_find_init, 1, __ATOMIC_RELAXED); return real->C_FindObjectsInit(session, template, count); }
static CK_RV count_FindObjects(CK_SESSION_HANDLE session, CK_OBJECT_HANDLE_PTR objects, CK_ULONG max, CK_ULONG_PTR count) { __atomic_add_fetch(&calls_find, 1, __ATOMIC_RELAXED); return fault_FindObjects(session, objects, max, count); }
static CK_RV count_FindObjectsFinal(CK_SESSION_HANDLE session) { __atomic_add_fetch(&calls_find_final, 1, __ATOMIC_RELAXED); return real->C_FindObjectsFinal(session); }
static CK_RV count_GetAttributeValue(CK_SESSION_HANDLE session, CK_OBJECT_HANDLE object, CK_ATTRIBUTE_PTR template, CK_ULONG count) { __atomic_add_fetch(&calls_attribute, 1, __ATOMIC_RELAXED); return fault_GetAttributeValue(session, object, template, count); }
static CK_RV count_SignInit(CK_SESSION_HANDLE session, CK_MECHANISM_PTR mechanism, CK_OBJECT_HANDLE key) { __atomic_add_fetch(&calls_sign_init, 1, __ATOMIC_RELAXED); return real->C_SignInit(session, mechanism, key); }
static CK_RV count_Sign(CK_SESSION_HANDLE session, CK_BYTE_PTR data, CK_ULONG length, CK_BYTE_PTR signature, CK_ULONG_PTR signature_length) { __atomic_add_fetch(&calls_sign, 1, __ATOMIC_RELAXED); return real->C_Sign(session, data, length, signature, signature_length); }
__attribute__((destructor)) static void write_call_counts(void) {
    const char *log = getenv("DC_FAULT_CALL_LOG");
    if (log != NULL) {
        FILE *file = fopen(log, "w");
        if (file != NULL) {
            fprintf(file, "C_GetSlotList %lu\nC_GetTokenInfo %lu\nC_OpenSession %lu\nC_Login %lu\nC_FindObjectsInit %lu\nC_FindObjects %lu\nC_FindObjectsFinal %lu\nC_GetAttributeValue %lu\nC_SignInit %lu\nC_Sign %lu\n",
                calls_slot_list, calls_token_info, calls_open, calls_login, calls_find_init, calls_find, calls_find_final, calls_attribute, calls_sign_init, calls_sign);
            fclose(file);
        }
    }
}

static void load(void) {
    void *handle = dlopen(SOFTHSM, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) return;
    CK_C_GetFunctionList get = (CK_C_GetFunctionList)dlsym(handle, "C_GetFunctionList");
    if (get == NULL || get(&real) != CKR_OK) { real = NULL; return; }
    fake = *real;
    fake.C_GetTokenInfo = count_GetTokenInfo;
    fake.C_Login = fault_Login;
    fake.C_FindObjects = count_FindObjects;
    fake.C_GetSlotList = count_GetSlotList;
    fake.C_GetSlotInfo = fault_GetSlotInfo;
    fake.C_OpenSession = count_OpenSession;
    fake.C_FindObjectsInit = count_FindObjectsInit;
    fake.C_FindObjectsFinal = count_FindObjectsFinal;
    fake.C_GetAttributeValue = count_GetAttributeValue;
    fake.C_SignInit = count_SignInit;
    fake.C_Sign = count_Sign;
}

CK_RV C_GetFunctionList(CK_FUNCTION_LIST_PTR_PTR list) {
    pthread_once(&once, load);
    if (real == NULL || list == NULL) return CKR_GENERAL_ERROR;
    *list = &fake;
    return CKR_OK;
}
