extension StringProtocol {
    /// The string with C0/C1 control characters, DEL and bidirectional overrides escaped as
    /// `\u{…}`, so that names taken from files (subjects, friendly names) cannot move the cursor,
    /// clear the screen or reorder what a terminal shows. Certificate names arrive already in
    /// RFC 4514 form (OpenSSL writes a control character as `\1B`), which passes through as is.
    public var escapingControlCharacters: String {
        var out = ""
        out.reserveCapacity(utf8.count)
        for scalar in unicodeScalars {
            switch scalar.value {
            case 0x00...0x1F, 0x7F...0x9F, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069:
                out += "\\u{" + String(scalar.value, radix: 16) + "}"
            default:
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
