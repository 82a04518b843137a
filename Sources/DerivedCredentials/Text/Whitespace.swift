extension StringProtocol {
    /// The string without the spaces and tabs at either end: the scalars Foundation's
    /// `CharacterSet.whitespaces` holds (Unicode category Zs, U+0009 and U+200B), trimmed scalar by scalar
    /// as `trimmingCharacters(in: .whitespaces)` does.
    public func trimmingWhitespace() -> String {
        trimmingScalars(where: Self.isWhitespace)
    }

    /// The string without the white space and line ends at either end: the scalars Foundation's
    /// `CharacterSet.whitespacesAndNewlines` holds (Unicode categories Zs, Zl and Zp, U+0009–U+000D,
    /// U+0085 and U+200B), trimmed scalar by scalar as `trimmingCharacters(in: .whitespacesAndNewlines)` does.
    public func trimmingWhitespaceAndNewlines() -> String {
        trimmingScalars { Self.isWhitespace($0) || Self.isNewline($0) }
    }

    private func trimmingScalars(where trimmed: (Unicode.Scalar) -> Bool) -> String {
        let scalars = Substring(self).unicodeScalars
        guard let first = scalars.firstIndex(where: { !trimmed($0) }) else { return "" }
        // cannot fail: a scalar that is not trimmed exists (`first`)
        let last = scalars.lastIndex(where: { !trimmed($0) })!
        return String(Substring(scalars[first...last]))
    }

    private static func isWhitespace(_ scalar: Unicode.Scalar) -> Bool {
        // U+200B, the zero-width space, was in Zs until Unicode 4.0.1; Foundation's set kept it.
        scalar == "\t" || scalar == "\u{200B}" || scalar.properties.generalCategory == .spaceSeparator
    }

    private static func isNewline(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x0A...0x0D, 0x85: return true
        default: return [.lineSeparator, .paragraphSeparator].contains(scalar.properties.generalCategory)
        }
    }
}
