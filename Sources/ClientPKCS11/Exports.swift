internal import CPKCS11Types

/// The module's table of functions, made once and never freed: callers keep the pointer for as
/// long as the library stays loaded.
nonisolated(unsafe) private let functionList: UnsafeMutablePointer<CK_FUNCTION_LIST> = {
    var list = CK_FUNCTION_LIST()
    list.version = CK_VERSION(major: 2, minor: 40)
    list.C_Initialize = { Module.shared.initialize($0) }
    list.C_Finalize = { Module.shared.finalize($0) }
    list.C_GetInfo = { Module.shared.info($0) }
    list.C_GetFunctionList = { list in
        guard let list else { return CKR_ARGUMENTS_BAD }
        list.pointee = functionList
        return CKR_OK
    }
    list.C_GetSlotList = { Module.shared.slotList($0, $1, $2) }
    list.C_GetSlotInfo = { Module.shared.slotInfo($0, $1) }
    list.C_GetTokenInfo = { Module.shared.tokenInfo($0, $1) }
    list.C_GetMechanismList = { Module.shared.mechanismList($0, $1, $2) }
    list.C_GetMechanismInfo = { Module.shared.mechanismInfo($0, $1, $2) }
    list.C_InitToken = { _, _, _, _ in Module.shared.notSupported() }
    list.C_InitPIN = { _, _, _ in Module.shared.notSupported() }
    list.C_SetPIN = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_OpenSession = { slot, flags, _, _, handle in Module.shared.openSession(slot, flags, handle) }
    list.C_CloseSession = { Module.shared.closeSession($0) }
    list.C_CloseAllSessions = { Module.shared.closeAllSessions($0) }
    list.C_GetSessionInfo = { Module.shared.sessionInfo($0, $1) }
    list.C_GetOperationState = { _, _, _ in Module.shared.notSupported() }
    list.C_SetOperationState = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_Login = { Module.shared.login($0, $1, $2, $3) }
    list.C_Logout = { Module.shared.logout($0) }
    list.C_CreateObject = { _, _, _, _ in Module.shared.notSupported() }
    list.C_CopyObject = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_DestroyObject = { Module.shared.destroyObject($0, $1) }
    list.C_GetObjectSize = { _, _, _ in Module.shared.notSupported() }
    list.C_GetAttributeValue = { Module.shared.attributeValue($0, $1, $2, $3) }
    list.C_SetAttributeValue = { _, _, _, _ in Module.shared.notSupported() }
    list.C_FindObjectsInit = { Module.shared.findObjectsInit($0, $1, $2) }
    list.C_FindObjects = { Module.shared.findObjects($0, $1, $2, $3) }
    list.C_FindObjectsFinal = { Module.shared.findObjectsFinal($0) }
    list.C_EncryptInit = { _, _, _ in Module.shared.notSupported() }
    list.C_Encrypt = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_EncryptUpdate = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_EncryptFinal = { _, _, _ in Module.shared.notSupported() }
    list.C_DecryptInit = { Module.shared.decryptInit($0, $1, $2) }
    list.C_Decrypt = { Module.shared.decrypt($0, $1, $2, $3, $4) }
    list.C_DecryptUpdate = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_DecryptFinal = { _, _, _ in Module.shared.notSupported() }
    list.C_DigestInit = { _, _ in Module.shared.notSupported() }
    list.C_Digest = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_DigestUpdate = { _, _, _ in Module.shared.notSupported() }
    list.C_DigestKey = { _, _ in Module.shared.notSupported() }
    list.C_DigestFinal = { _, _, _ in Module.shared.notSupported() }
    list.C_SignInit = { Module.shared.signInit($0, $1, $2) }
    list.C_Sign = { Module.shared.sign($0, $1, $2, $3, $4) }
    list.C_SignUpdate = { Module.shared.signUpdate($0, $1, $2) }
    list.C_SignFinal = { Module.shared.signFinal($0, $1, $2) }
    list.C_SignRecoverInit = { _, _, _ in Module.shared.notSupported() }
    list.C_SignRecover = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_VerifyInit = { _, _, _ in Module.shared.notSupported() }
    list.C_Verify = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_VerifyUpdate = { _, _, _ in Module.shared.notSupported() }
    list.C_VerifyFinal = { _, _, _ in Module.shared.notSupported() }
    list.C_VerifyRecoverInit = { _, _, _ in Module.shared.notSupported() }
    list.C_VerifyRecover = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_DigestEncryptUpdate = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_DecryptDigestUpdate = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_SignEncryptUpdate = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_DecryptVerifyUpdate = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_GenerateKey = { _, _, _, _, _ in Module.shared.notSupported() }
    list.C_GenerateKeyPair = { _, _, _, _, _, _, _, _ in Module.shared.notSupported() }
    list.C_WrapKey = { _, _, _, _, _, _ in Module.shared.notSupported() }
    list.C_UnwrapKey = { _, _, _, _, _, _, _, _ in Module.shared.notSupported() }
    list.C_DeriveKey = { Module.shared.deriveKey($0, $1, $2, $3, $4, $5) }
    list.C_SeedRandom = { session, _, _ in Module.shared.seedRandom(session) }
    list.C_GenerateRandom = { Module.shared.generateRandom($0, $1, $2) }
    list.C_GetFunctionStatus = { _ in CKR_FUNCTION_NOT_PARALLEL }
    list.C_CancelFunction = { _ in CKR_FUNCTION_NOT_PARALLEL }
    list.C_WaitForSlotEvent = { Module.shared.waitForSlotEvent($0, $1, $2) }
    let pointer = UnsafeMutablePointer<CK_FUNCTION_LIST>.allocate(capacity: 1)
    pointer.initialize(to: list)
    return pointer
}()

/// The name PKCS#11 3.0 gives the standard interface.
nonisolated(unsafe) private let interfaceName: UnsafeMutablePointer<CK_UTF8CHAR> = {
    let name = Array("PKCS 11".utf8) + [0]
    let pointer = UnsafeMutablePointer<CK_UTF8CHAR>.allocate(capacity: name.count)
    pointer.initialize(from: name, count: name.count)
    return pointer
}()

/// `C_GetFunctionList`: the entry point every PKCS#11 consumer calls first. Writes the address
/// of the module's function table (a `CK_FUNCTION_LIST`, PKCS#11 2.40) to `list`; returns
/// `CKR_OK`, or `CKR_ARGUMENTS_BAD` when `list` is null.
@_cdecl("C_GetFunctionList") public func getFunctionList(_ list: UnsafeMutablePointer<UnsafeMutableRawPointer?>?)
    -> UInt
{
    guard let list else { return UInt(CKR_ARGUMENTS_BAD) }
    list.pointee = UnsafeMutableRawPointer(functionList)
    return UInt(CKR_OK)
}

/// `C_GetInterfaceList` (PKCS#11 3.0): the module has one interface, "PKCS 11" with its 2.40
/// function table. Follows the size-query convention: a null `interfaces` asks for the count,
/// a short one gets `CKR_BUFFER_TOO_SMALL`.
@_cdecl("C_GetInterfaceList") public func getInterfaceList(
    _ interfaces: UnsafeMutableRawPointer?, _ count: UnsafeMutablePointer<UInt>?
) -> UInt {
    guard let count else { return UInt(CKR_ARGUMENTS_BAD) }
    guard let interfaces else {
        count.pointee = 1
        return UInt(CKR_OK)
    }
    guard count.pointee >= 1 else {
        count.pointee = 1
        return UInt(CKR_BUFFER_TOO_SMALL)
    }
    interfaces.assumingMemoryBound(to: DCInterface.self).pointee = DCInterface(
        pInterfaceName: interfaceName, pFunctionList: UnsafeMutableRawPointer(functionList), flags: 0)
    count.pointee = 1
    return UInt(CKR_OK)
}

/// `C_GetInterface` (PKCS#11 3.0): the "PKCS 11" interface (a null name means it too) in
/// version 2.40 (a null version means any); anything else is `CKR_ARGUMENTS_BAD`.
@_cdecl("C_GetInterface") public func getInterface(
    _ name: UnsafePointer<CChar>?, _ version: UnsafeRawPointer?,
    _ interface: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    _ flags: UInt
) -> UInt {
    guard let interface else { return UInt(CKR_ARGUMENTS_BAD) }
    if let name, String(cString: name) != "PKCS 11" { return UInt(CKR_ARGUMENTS_BAD) }
    if let version {
        let wanted = version.loadUnaligned(as: CK_VERSION.self)
        guard wanted.major == 2, wanted.minor == 40 else { return UInt(CKR_ARGUMENTS_BAD) }
    }
    guard flags == 0 else { return UInt(CKR_ARGUMENTS_BAD) }
    interface.pointee = UnsafeMutableRawPointer(singleInterface)
    return UInt(CKR_OK)
}

nonisolated(unsafe) private let singleInterface: UnsafeMutablePointer<DCInterface> = {
    let pointer = UnsafeMutablePointer<DCInterface>.allocate(capacity: 1)
    pointer.initialize(
        to: DCInterface(pInterfaceName: interfaceName, pFunctionList: UnsafeMutableRawPointer(functionList), flags: 0))
    return pointer
}()
