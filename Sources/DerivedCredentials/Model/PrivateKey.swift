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

    public func withPKCS8DER<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try pkcs8.withUnsafeBytes(body)
    }

    public var description: String { "PrivateKey(<redacted>)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["pkcs8": "<redacted>"], displayStyle: .struct) }
}
