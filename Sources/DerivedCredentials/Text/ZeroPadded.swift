extension BinaryInteger {
    /// The number's digits in `radix` (letters uppercase with `uppercase`), zeros in front up to
    /// `width` digits: what `String(format:)` writes with `%0<width>X` (radix 16, uppercase) or
    /// `%0<width>llu` (radix 10) for a value that is not negative.
    public func zeroPadded(width: Int, radix: Int = 10, uppercase: Bool = false) -> String {
        let digits = String(self, radix: radix, uppercase: uppercase)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
}
