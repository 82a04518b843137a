// libFuzzer entry point: any bytes as an opened delivery payload (what a client decodes after
// opening the CMS envelope). Errors are expected; a crash is a bug.
import CredentialDelivery
import DerivedCredentials

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    var bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
    _ = try? DeliveryPayload.decode(SecretBytes(consuming: &bytes))
    return 0
}
