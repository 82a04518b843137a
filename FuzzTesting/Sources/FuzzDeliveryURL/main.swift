// libFuzzer entry point: any text as a delivery URL. Whatever parses must print back to a URL
// that parses to the same message.
import CredentialDelivery

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let text = String(decoding: UnsafeRawBufferPointer(start: start, count: count), as: UTF8.self)
    guard let message = try? DeliveryMessage.parse(text, scheme: "org.example.dcclient") else { return 0 }
    let again = message.url(scheme: "org.example.dcclient")
    guard let reparsed = try? DeliveryMessage.parse(again, scheme: "org.example.dcclient"),
        reparsed.url(scheme: "org.example.dcclient") == again
    else { fatalError("accepted \(text.debugDescription) but not its own rendering \(again.debugDescription)") }
    return 0
}
