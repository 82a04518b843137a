/// A DER-encoded X.509 certificate.
///
/// The core does not parse certificates; `CredentialCoding` checks that the bytes are strict DER
/// before it makes one of these.
public struct Certificate: Hashable, Sendable, CustomStringConvertible {
    /// The DER encoding.
    public let derBytes: [UInt8]

    /// Wraps DER bytes as they are; a caller that builds one by hand vouches for the encoding.
    public init(derBytes: [UInt8]) {
        self.derBytes = derBytes
    }

    /// The size only, such as `Certificate(912 bytes)`.
    public var description: String { "Certificate(\(derBytes.count) bytes)" }
}
