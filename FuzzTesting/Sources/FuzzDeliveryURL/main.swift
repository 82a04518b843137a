// libFuzzer entry point: any text as a delivery URL. Whatever parses must print back to a URL
// that parses to the same message.
import CredentialDelivery
import DerivedCredentials

/// The scheme every input is addressed to.
private let scheme = URLScheme(validating: "org.example.dcclient")!

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let text = String(decoding: UnsafeRawBufferPointer(start: start, count: count), as: UTF8.self)
    guard let message = try? DeliveryMessage.parse(text, scheme: scheme) else { return 0 }
    let again = message.url(scheme: scheme)
    guard let reparsed = try? DeliveryMessage.parse(again, scheme: scheme),
        reparsed.url(scheme: scheme) == again
    else { fatalError("accepted \(text.debugDescription) but not its own rendering \(again.debugDescription)") }
    return 0
}
