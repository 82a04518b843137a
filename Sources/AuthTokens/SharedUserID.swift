import CredentialCoding
import DerivedCredentials
import FoundationEssentials
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The shared user id: the same for every managed app of one user on one device, different for
/// another user or another device, and not reversible to the user's name.
///
/// It is the unpadded base64url (43 characters) of
///
///     HMAC-SHA-256(key: secret, message: machineID ‖ userID)
///
/// where `secret` is a random per-user secret (32 bytes, a file readable by its owner only, see
/// ``secret(at:)``), `machineID` is the device's systemd machine id (`/etc/machine-id`: exactly
/// 32 lower-case hex digits, see ``machineID(at:)``) and `userID` is the UTF-8 of the user id the
/// provider issued the delegation for, with nothing between them (the machine id has a fixed
/// length, so the concatenation is unambiguous). Without the secret, a value cannot be linked to
/// a user id even by someone who knows the machine id; apps on another device or of another
/// operating-system user get unrelated values. As the source document says, it is the empty
/// string when it cannot be computed: no secret, no machine id or no user id.
public enum SharedUserID {
    /// The secret's length in bytes.
    public static let secretLength = 32

    /// The shared user id of `userID` on the device `machineID` under `secret`, or "" when one of
    /// them is missing or malformed (a secret shorter than ``secretLength``, a machine id that is
    /// not 32 lower-case hex digits, an empty user id).
    public static func compute(secret: SecretBytes, machineID: String, userID: String) -> String {
        guard secret.count >= secretLength, isMachineID(machineID), !userID.isEmpty else { return "" }
        return Base64URL.encode(Digests.hmacSHA256(key: secret, message: Array((machineID + userID).utf8)))
    }

    /// The machine id in the file at `path` (one line of 32 lower-case hex digits, as systemd
    /// writes it), or nil when it cannot be read or is not one.
    public static func machineID(at path: String = "/etc/machine-id") -> String? {
        guard let data = FileManager.default.contents(atPath: path), data.count <= 64 else { return nil }
        var text = String(decoding: data, as: UTF8.self)
        if text.hasSuffix("\n") { text.removeLast() }
        return isMachineID(text) ? text : nil
    }

    /// The per-user secret in the file at `path`, created (32 random bytes, mode 0600, written
    /// atomically, so two apps starting at once end up with the same one) when there is none.
    /// Throws `DCError.Code.invalid` for a file of the wrong size, and the file system's error
    /// when it cannot be read or created.
    public static func secret(at path: String) throws -> SecretBytes {
        if let existing = try readSecret(path) { return existing }
        let url = URL(fileURLWithPath: path)
        var files = AtomicFileSet(directory: url.deletingLastPathComponent().path)
        try files.add(url.lastPathComponent, .secret(try Digests.random(secretLength)), mode: 0o600)
        do {
            try files.commit(replacingExisting: false)
        } catch DCError.Code.outputExists {
            // Another app created it first: use that one.
        }
        guard let created = try readSecret(path) else {
            throw DCError(.ioError, "the shared user id secret vanished after it was created", subject: path)
        }
        return created
    }

    private static func readSecret(_ path: String) throws -> SecretBytes? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        if descriptor < 0 {
            if errno == ENOENT { return nil }
            throw TrustFile.fileError(errno, path, "cannot open the shared user id secret")
        }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: secretLength + 1)
        defer { buffer.withUnsafeMutableBytes { SecretBytes.wipe($0) } }
        var filled = 0
        while filled < buffer.count {
            let count = buffer.withUnsafeMutableBytes {
                read(descriptor, $0.baseAddress?.advanced(by: filled), $0.count - filled)
            }
            if count < 0 {
                if errno == EINTR { continue }
                throw TrustFile.fileError(errno, path, "cannot read the shared user id secret")
            }
            if count == 0 { break }
            filled += count
        }
        guard filled == secretLength else {
            throw DCError(.invalid, "the shared user id secret is not \(secretLength) bytes", subject: path)
        }
        return SecretBytes(buffer[..<secretLength])
    }

    private static func isMachineID(_ text: String) -> Bool {
        LowercaseHex.matches(text, count: 32)
    }
}
