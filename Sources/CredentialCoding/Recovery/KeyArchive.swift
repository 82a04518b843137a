import DerivedCredentials
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Escrow of encryption keys for key recovery: a pair sealed to a recovery certificate, whose
/// private key is kept away from the machine that archives.
///
/// The sealed form is CMS AuthEnvelopedData (``Sealing``) around PEM text, the certificate and
/// then the PKCS#8 private key, so that the recovery officer can open one with nothing but
/// OpenSSL: `openssl cms -decrypt -in SERIAL.cms -inform DER -recip recovery.pem -inkey
/// recovery.key`.
public enum KeyArchive {
    /// Seals `pair` to `recovery`'s public key.
    public static func seal(_ pair: CertifiedKey, to recovery: Certificate) throws -> [UInt8] {
        var text = PEM.certificate(pair.certificate)
        PEM.privateKey(pair.privateKey).withUnsafeBytes { text += $0 }
        return try Sealing.seal(SecretBytes(consuming: &text), to: recovery)
    }

    /// Opens what ``seal(_:to:)`` made, with the recovery pair. Throws
    /// `DCError/Code/noMatchingKey` when `recovery` is not the pair it was sealed to, and
    /// `DCError/Code/malformedInput` when what is inside is not one certificate and its key.
    public static func open(_ sealed: [UInt8], with recovery: CertifiedKey) throws -> CertifiedKey {
        let opened: SecretBytes
        do {
            opened = try Sealing.open(sealed, with: recovery.privateKey, certificate: recovery.certificate)
        } catch let error as DCError where error.code != .inputTooLarge {
            throw DCError(
                .noMatchingKey, "the archived pair does not open with this recovery key",
                remedy: .giveArchivingRecoveryKey)
        }
        var text = opened.withUnsafeBytes { Array($0) }
        defer { text.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        let material = try CredentialReader().read(bytes: text, source: "the archived pair")
        guard material.certificates.count == 1, material.privateKey != nil else {
            throw DCError(.malformedInput, "the archive does not hold one certificate and its key")
        }
        return try material.certifiedKey()
    }
}
