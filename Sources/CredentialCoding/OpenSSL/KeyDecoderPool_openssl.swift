internal import COpenSSL
import FoundationEssentials
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Reusable OpenSSL 3 key decoders.
///
/// Building an `OSSL_DECODER_CTX` is the expensive part of decoding a key in OpenSSL 3.0: it
/// fetches and links every decoder under global locks. `EVP_PKCS82PKEY` and `d2i_PrivateKey`
/// build a new one per call (≈0.8 ms per key here); a context that is kept and reused decodes
/// the same key in ≈0.09 ms. A context serves one thread at a time: it is taken from the pool,
/// used, and given back; one that saw a failure is freed instead, so no state survives an error.
final class KeyDecoderPool: @unchecked Sendable {
    // `idle` is a `Mutex`; each decoder is used by one thread at a time.
    static let shared = KeyDecoderPool()

    /// What is decoded: the DER structure (`PrivateKeyInfo`, `type-specific`) and the key type
    /// (nil for any, as in PKCS#8 where the AlgorithmIdentifier says).
    struct Kind: Hashable {
        var structure: String
        var keyType: String?

        static let pkcs8 = Kind(structure: "PrivateKeyInfo", keyType: nil)
        static let rsa = Kind(structure: "type-specific", keyType: "RSA")
        static let ec = Kind(structure: "type-specific", keyType: "EC")
    }

    private let idle = Mutex<[Kind: [Decoder]]>([:])

    /// Decodes exactly `der` (no trailing bytes) as a private key of `kind`, or returns nil.
    func decode(_ der: UnsafeRawBufferPointer, as kind: Kind) -> PKey? {
        guard let decoder = take(kind) ?? Decoder(kind) else { return nil }
        let key = decoder.decode(der)
        if key != nil { give(decoder, kind) }
        return key
    }

    private func take(_ kind: Kind) -> Decoder? {
        idle.withLock { $0[kind]?.popLast() }
    }

    private func give(_ decoder: Decoder, _ kind: Kind) {
        idle.withLock { $0[kind, default: []].append(decoder) }
    }

    /// One decoder context and the stable slot it writes its result to. Sendable as the pool
    /// hands each to one thread at a time, which uses it alone until it gives it back.
    private final class Decoder: @unchecked Sendable {
        let context: OpaquePointer
        let output: UnsafeMutablePointer<OpaquePointer?>
        // OpenSSL keeps the input-type, structure and key-type strings it is given (a temporary
        // Swift-bridged string would dangle): C copies owned here live exactly as long as the context.
        let strings: [UnsafeMutablePointer<CChar>]

        init?(_ kind: Kind) {
            guard let strings = try? OpenSSL.cStrings(["DER", kind.structure] + (kind.keyType.map { [$0] } ?? []))
            else { return nil }
            self.strings = strings
            let (inputType, structure) = (strings[0], strings[1])
            let keyType = kind.keyType == nil ? nil : strings[2]
            output = .allocate(capacity: 1)
            output.initialize(to: nil)
            guard
                let made = OSSL_DECODER_CTX_new_for_pkey(
                    output, inputType, structure, keyType, dc_EVP_PKEY_KEYPAIR(), nil, nil)
            else {
                output.deallocate()
                strings.forEach { free($0) }
                return nil
            }
            context = made
        }

        deinit {
            OSSL_DECODER_CTX_free(context)
            if let key = output.pointee { EVP_PKEY_free(key) }
            output.deallocate()
            strings.forEach { free($0) }
        }

        func decode(_ der: UnsafeRawBufferPointer) -> PKey? {
            output.pointee = nil
            let bytes = der.bindMemory(to: UInt8.self)
            var cursor: UnsafePointer<UInt8>? = bytes.baseAddress
            var remaining = bytes.count
            let ok = cursor != nil && OSSL_DECODER_from_data(context, &cursor, &remaining) == 1 && remaining == 0
            guard ok, let key = output.pointee else { return nil }
            output.pointee = nil
            return PKey(taking: key)
        }
    }
}
