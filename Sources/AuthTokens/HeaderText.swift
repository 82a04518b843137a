import DerivedCredentials

extension DCError.Code {
    /// A challenge or server name that cannot travel in an HTTP header as it is: a character
    /// outside printable ASCII (32–126), a space at either end (HTTP strips those, so the
    /// application server would get another value back), or too long (exit 64).
    public static let invalidChallenge = Self(
        "invalidChallenge", .usage,
        hint: "use printable ASCII only (codes 32-126), with no space at either end")
    /// A delegation that is not valid now: expired, not yet valid, or for another token key. The
    /// client can make tokens again once its provider sends a new one (exit 69).
    public static let delegationNotValid = Self(
        "delegationNotValid", .unavailable,
        remedy: .awaitNewDelegation)
}

/// The rules for values that the verification service returns in HTTP headers.
///
/// HTTP carries header values as octets and strips white space at either end (RFC 9110 §5.5),
/// so a value survives the round trip unchanged only when it is printable ASCII (32–126) and
/// neither starts nor ends with a space. Challenges, server names and the identity a delegation
/// carries all follow these rules; each has its own length limit.
public enum HeaderText {
    /// The longest challenge, in bytes.
    public static let maximumChallengeLength = 1024
    /// The longest server name, in bytes.
    public static let maximumServerNameLength = 255
    /// The longest user id, app id or issuer name in a delegation, in bytes.
    public static let maximumIdentityLength = 256

    /// Whether `text` is at most `maximumLength` bytes of printable ASCII without a space at either
    /// end. The empty text is allowed.
    public static func isValid(_ text: String, maximumLength: Int) -> Bool {
        let bytes = text.utf8
        guard bytes.count <= maximumLength else { return false }
        guard bytes.allSatisfy({ (32...126).contains($0) }) else { return false }
        return bytes.first != 0x20 && bytes.last != 0x20
    }

    /// Refuses, with `DCError.Code.invalidChallenge`, a `what` (such as
    /// "the challenge") that breaks ``isValid(_:maximumLength:)``, saying which rule it breaks.
    public static func check(_ text: String, what: String, maximumLength: Int) throws {
        let bytes = text.utf8
        guard bytes.count <= maximumLength else {
            throw DCError(.invalidChallenge, "\(what) is longer than \(maximumLength) bytes")
        }
        if let offset = bytes.firstIndex(where: { !(32...126).contains($0) }) {
            throw DCError(
                .invalidChallenge,
                "\(what) holds a character outside printable ASCII (32-126) at byte \(bytes.distance(from: bytes.startIndex, to: offset))"
            )
        }
        guard bytes.first != 0x20, bytes.last != 0x20 else {
            throw DCError(
                .invalidChallenge, "\(what) starts or ends with a space, which HTTP would strip on the way back")
        }
    }
}
