/// A DER-encoded X.509 certificate.
///
/// The core does not parse certificates; `CredentialCoding` checks that the bytes are strict DER
/// before it makes one of these.
public struct Certificate: Hashable, Sendable, CustomStringConvertible {
    /// The DER encoding.
    public let derBytes: [UInt8]

    public init(derBytes: [UInt8]) {
        self.derBytes = derBytes
    }

    public var description: String { "Certificate(\(derBytes.count) bytes)" }
}
