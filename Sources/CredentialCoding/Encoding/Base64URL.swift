/// Unpadded base64url (RFC 4648 §5), as JOSE uses it (RFC 7515 §2), decoded strictly.
///
/// Decoding accepts exactly one spelling of each byte string: only `A–Z a–z 0–9 - _`, no padding,
/// no white space, no length of the form 4n+1, and no set bits in the unused low bits of the last
/// character. So `decode` then `encode` always gives back the input, and two different texts
/// never decode to the same bytes (a signature or a cache key cannot be re-spelled).
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// 0–63 for an alphabet character, 0xFF for any other byte.
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, character) in alphabet.enumerated() { table[Int(character)] = UInt8(index) }
        return table
    }()

    /// The unpadded base64url text of `bytes`.
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let input = Array(bytes)
        return input.withUnsafeBufferPointer { encode($0) }
    }

    /// The unpadded base64url text of the bytes in `buffer`.
    public static func encode(_ buffer: UnsafeBufferPointer<UInt8>) -> String {
        let count = buffer.count
        let length = count / 3 * 4 + [0, 2, 3][count % 3]
        return String(unsafeUninitializedCapacity: length) { output in
            var out = 0
            var index = 0
            while index + 3 <= count {
                let chunk = UInt32(buffer[index]) << 16 | UInt32(buffer[index + 1]) << 8 | UInt32(buffer[index + 2])
                output[out] = alphabet[Int(chunk >> 18 & 63)]
                output[out + 1] = alphabet[Int(chunk >> 12 & 63)]
                output[out + 2] = alphabet[Int(chunk >> 6 & 63)]
                output[out + 3] = alphabet[Int(chunk & 63)]
                out += 4
                index += 3
            }
            switch count - index {
            case 1:
                let chunk = UInt32(buffer[index]) << 16
                output[out] = alphabet[Int(chunk >> 18 & 63)]
                output[out + 1] = alphabet[Int(chunk >> 12 & 63)]
                out += 2
            case 2:
                let chunk = UInt32(buffer[index]) << 16 | UInt32(buffer[index + 1]) << 8
                output[out] = alphabet[Int(chunk >> 18 & 63)]
                output[out + 1] = alphabet[Int(chunk >> 12 & 63)]
                output[out + 2] = alphabet[Int(chunk >> 6 & 63)]
                out += 3
            default: break
            }
            return out
        }
    }

    /// The bytes `text` spells, or nil unless it is canonical unpadded base64url (see ``Base64URL``).
    public static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { decode($0) }
    }

    /// The bytes that the base64url characters in `characters` spell, or nil unless they are canonical.
    public static func decode(_ characters: ArraySlice<UInt8>) -> [UInt8]? {
        characters.withUnsafeBufferPointer { decode($0) }
    }

    /// The bytes that the base64url characters in `buffer` spell, or nil unless they are canonical.
    public static func decode(_ buffer: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let count = buffer.count
        guard count % 4 != 1 else { return nil }
        var bytes = [UInt8]()
        bytes.reserveCapacity(count / 4 * 3 + 2)
        let ok = values.withUnsafeBufferPointer { values -> Bool in
            var index = 0
            while index + 4 <= count {
                let a = values[Int(buffer[index])]
                let b = values[Int(buffer[index + 1])]
                let c = values[Int(buffer[index + 2])]
                let d = values[Int(buffer[index + 3])]
                guard (a | b | c | d) & 0xC0 == 0 else { return false }
                let chunk = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                bytes.append(UInt8(truncatingIfNeeded: chunk >> 16))
                bytes.append(UInt8(truncatingIfNeeded: chunk >> 8))
                bytes.append(UInt8(truncatingIfNeeded: chunk))
                index += 4
            }
            switch count - index {
            case 2:
                let a = values[Int(buffer[index])]
                let b = values[Int(buffer[index + 1])]
                // The last character's low 4 bits are padding and must be zero.
                guard (a | b) & 0xC0 == 0, b & 0x0F == 0 else { return false }
                bytes.append(a << 2 | b >> 4)
            case 3:
                let a = values[Int(buffer[index])]
                let b = values[Int(buffer[index + 1])]
                let c = values[Int(buffer[index + 2])]
                // The last character's low 2 bits are padding and must be zero.
                guard (a | b | c) & 0xC0 == 0, c & 0x03 == 0 else { return false }
                bytes.append(a << 2 | b >> 4)
                bytes.append((b & 0x0F) << 4 | c >> 2)
            default: break
            }
            return true
        }
        return ok ? bytes : nil
    }
}
