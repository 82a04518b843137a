import CredentialCoding
import DerivedCredentials
import Foundation

/// Key recovery: the encryption pairs a CA with a recovery certificate archived
/// (`archive/SERIAL.cms`, ``KeyArchive``), opened with the recovery key, which the CA's directory
/// never holds. A recovery officer needs only OpenSSL to open one; these open them for a client
/// that lost its store (`dcprovision send --recover`).
extension TestCA {
    /// The archived pair of the certificate with `serial` (hex), opened with `recoveryKey`.
    /// Throws `DCError/Code/noSuchObject` when nothing is archived under that serial (or the CA
    /// does not archive), `DCError/Code/noMatchingKey` for another recovery key, and
    /// `DCError/Code/malformedInput` when the archive file holds another certificate than its name
    /// says.
    public func recover(serial: String, with recoveryKey: PrivateKey) throws -> CertifiedKey {
        let wanted = try CertificateRevocationList.canonicalSerial(serial)
        let path = archiveDirectory + "/" + wanted + ".cms"
        guard let recoveryCertificate, let sealed = FileManager.default.contents(atPath: path) else {
            throw DCError(
                .noSuchObject, "no archived key for serial \(wanted)", subject: directory,
                hint: recoveryCertificate == nil
                    ? nil : "only encryption and escrow keys issued since archiving began are archived",
                remedy: recoveryCertificate == nil ? .archiveKeys : nil)
        }
        let pair = try KeyArchive.open(
            Array(sealed), with: CertifiedKey(certificate: recoveryCertificate, privateKey: recoveryKey))
        guard try CertificateDetails(pair.certificate).serialNumber == wanted else {
            throw DCError(
                .malformedInput, "the archive file holds another certificate than its name says", subject: path)
        }
        return pair
    }

    /// Every archived pair whose certificate's subject is `subject` (DER), newest first by
    /// notBefore, at most `CredentialEntry.maximumKeyHistory`.
    public func recoverAll(subject: [UInt8], with recoveryKey: PrivateKey) throws -> [CertifiedKey] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: archiveDirectory)) ?? []
        var found: [(pair: CertifiedKey, notBefore: Date)] = []
        for name in names.sorted() where name.hasSuffix(".cms") {
            let pair = try recover(serial: String(name.dropLast(4)), with: recoveryKey)
            guard try CertificateDetails.subjectDER(of: pair.certificate) == subject else { continue }
            found.append((pair, try CertificateDetails(pair.certificate).notBefore ?? .distantPast))
        }
        return found.sorted { $0.notBefore > $1.notBefore }.prefix(CredentialEntry.maximumKeyHistory).map(\.pair)
    }
}
