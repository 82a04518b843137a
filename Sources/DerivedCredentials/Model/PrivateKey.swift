/// A private key as PKCS#8 DER, held as ``SecretBytes``.
///
/// It redacts itself everywhere it could be printed; the only way to the bytes is
/// ``withPKCS8DER(_:)``, which lends them for the length of a closure.
public struct PrivateKey: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    private let pkcs8: SecretBytes

    /// Wraps PKCS#8 DER bytes. `CredentialCoding` makes these from files and checks them; a caller
    /// that builds one by hand vouches for the encoding.
    public init(pkcs8DER: SecretBytes) {
        self.pkcs8 = pkcs8DER
    }

    /// The size of the encoding, which is not secret.
    public var byteCount: Int { pkcs8.count }

    /// Lends the PKCS#8 DER bytes to `body`; the buffer is valid only inside it and must not be kept,
    /// copied into a `String` or printed. Rethrows what `body` throws.
    public func withPKCS8DER<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try pkcs8.withUnsafeBytes(body)
    }

    /// Always `PrivateKey(<redacted>)`: the key never reaches a log.
    public var description: String { "PrivateKey(<redacted>)" }
    /// The same redacted text as ``description``.
    public var debugDescription: String { description }
    /// A mirror whose one child is `<redacted>`, so that `dump()` does not print the key.
    public var customMirror: Mirror { Mirror(self, children: ["pkcs8": "<redacted>"], displayStyle: .struct) }
}
