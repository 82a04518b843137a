// What the per-message harnesses share: any bytes as the query of one message kind. Whatever
// parses must print back to a URL that parses to the same message, and checking its signature
// must answer (false: no fuzzer finds an Ed25519 forgery) without crashing.
import CredentialDelivery
import DerivedCredentials

/// A public key no input was signed with.
private let stranger = [UInt8](repeating: 0x42, count: 32)

/// The scheme every input is addressed to.
private let scheme = URLScheme(validating: "org.example.dcclient")!

/// Runs one input as the query of `<scheme>:/<path>?`.
public func fuzzMessage(path: String, _ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let query = String(decoding: UnsafeRawBufferPointer(start: start, count: count), as: UTF8.self)
    guard let message = try? DeliveryMessage.parse("\(scheme):/\(path)?\(query)", scheme: scheme) else { return 0 }
    guard message.path == path else { fatalError("parsed \(path) as \(message.path)") }
    let again = message.url(scheme: scheme)
    guard let reparsed = try? DeliveryMessage.parse(again, scheme: scheme), reparsed == message else {
        fatalError("accepted \(query.debugDescription) but not its own rendering \(again.debugDescription)")
    }
    // A result is not signed; every other message is.
    if let signed = message.message as? any SignedURLMessage, signed.isSigned(by: stranger, scheme: scheme) {
        fatalError("a signature verified under a key nobody holds")
    }
    return 0
}
