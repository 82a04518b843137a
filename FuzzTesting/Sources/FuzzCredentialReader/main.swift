// libFuzzer entry point: any bytes through the strict reader (PEM, DER, PKCS#12, encrypted PKCS#8,
// legacy PEM keys) with a passphrase available, so the decrypting paths run too. Errors are
// expected; a crash, a hang or a leak is a bug.
import CredentialCoding
import DerivedCredentials
import Foundation

private let reader = CredentialReader(passphrase: FixedPassphrase(SecretBytes(Array("fuzz".utf8))))

/// Runs once before fuzzing: the lazily built OpenSSL state (decoder contexts, provider tables) is
/// made here, so that libFuzzer's per-input leak check sees only what an input leaks.
@_cdecl("LLVMFuzzerInitialize")
public func initialize(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>
) -> CInt {
    let warmUp = [
        "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgZ9fGNsfK0MjYyD8x\n-----END PRIVATE KEY-----\n",
        "not a credential",
    ]
    for text in warmUp { _ = try? reader.read(bytes: Array(text.utf8), source: "warm-up") }
    for file in (try? FileManager.default.contentsOfDirectory(atPath: "../Samples/credential")) ?? [] {
        if let data = FileManager.default.contents(atPath: "../Samples/credential/" + file) {
            _ = try? reader.read(bytes: Array(data), source: "warm-up")
        }
    }
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
    if let material = try? reader.read(bytes: bytes, source: "fuzz") {
        // Whatever is accepted must describe itself without trapping.
        for certificate in material.certificates { _ = try? CertificateDetails(certificate) }
    }
    return 0
}
