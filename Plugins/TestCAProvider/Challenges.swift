import CredentialCoding
import DerivedCredentials
import Foundation

extension TestCA {
    /// How long an issued challenge may wait for its proof.
    public static let challengeLifetime: TimeInterval = 300

    /// The directory (0700, in the CA's) where the outstanding challenges are remembered, one empty
    /// file per challenge, named by its SHA-256.
    var challengeDirectory: String { directory + "/challenges" }

    /// A fresh possession challenge for a card to sign, remembered until ``redeem(_:now:)`` accepts
    /// it once or it is ``challengeLifetime`` old. The file lives in the CA's directory, so a
    /// challenge issued by one process is redeemed by another, as with a CA service.
    public func newChallenge() throws -> [UInt8] {
        let challenge = try PossessionCheck.newChallenge()
        let manager = FileManager.default
        // No error when it exists already; a new one is 0700.
        try manager.createDirectory(
            atPath: challengeDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let path = challengeDirectory + "/" + Digests.hex(Digests.sha256(challenge))
        guard manager.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
            throw DCError(.cannotCreateOutput, "cannot remember the challenge", subject: challengeDirectory)
        }
        return challenge
    }

    /// Accepts `challenge` if this CA issued it less than ``challengeLifetime`` ago and has not
    /// accepted it before, and forgets it either way. Throws `DCError/Code/possessionNotProven`
    /// otherwise: a proof over a challenge the caller chose, or a replayed proof.
    public func redeem(_ challenge: [UInt8], now: Date = Date()) throws {
        let path = challengeDirectory + "/" + Digests.hex(Digests.sha256(challenge))
        let issued = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date
        // Removing the file is the one step that succeeds once, whoever races for it.
        guard (try? FileManager.default.removeItem(atPath: path)) != nil, let issued else {
            throw DCError(
                .possessionNotProven, "the proof is over a challenge this CA did not issue, or accepted already",
                hint: "derive again: each proof is over a fresh challenge from the CA")
        }
        guard now.timeIntervalSince(issued) <= Self.challengeLifetime else {
            throw DCError(
                .possessionNotProven, "the challenge expired before its proof came",
                hint: "derive again: each proof is over a fresh challenge from the CA")
        }
    }
}
