extension StringProtocol {
    /// The string with C0/C1 control characters, DEL and bidirectional overrides escaped as
    /// `\u{…}`, so that names taken from files (subjects, friendly names) cannot move the cursor,
    /// clear the screen or reorder what a terminal shows. Certificate names arrive already in
    /// RFC 4514 form (OpenSSL writes a control character as `\1B`), which passes through as is.
    public var escapingControlCharacters: String {
        let text = String(self)
        // Every character escaped here starts, in UTF-8, with a byte below 0x20, 0x7F, 0xC2 (C1
        // controls, U+0080–U+009F) or 0xE2 (the bidirectional marks, U+200E–U+2069). Text with
        // none of those bytes, nearly every line printed, is returned as it is after one pass.
        guard text.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F || $0 == 0xC2 || $0 == 0xE2 }) else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
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
