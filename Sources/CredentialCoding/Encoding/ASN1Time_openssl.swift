internal import COpenSSL
import FoundationEssentials

/// Times as X.509 spells them, and as OpenSSL's CA database (`index.txt`) stores them: UTCTime,
/// `YYMMDDHHMMSSZ`, for 1950 through 2049, and GeneralizedTime, `YYYYMMDDHHMMSSZ`, otherwise
/// (RFC 5280, 4.1.2.5). OpenSSL writes and reads them, without the locale machinery a date
/// formatter loads at its first use.
public enum ASN1Time {
    /// `date`, to the second, in the form RFC 5280 gives its year (a year before 1950 is a
    /// GeneralizedTime too); nil for a date OpenSSL cannot represent.
    public static func text(_ date: Date) -> String? {
        guard let seconds = time_t(exactly: date.timeIntervalSince1970.rounded(.down)) else { return nil }
        guard let time = ASN1_TIME_set(nil, seconds) else {
            ERR_clear_error()
            return nil
        }
        defer { ASN1_TIME_free(time) }
        guard let bytes = ASN1_STRING_get0_data(time) else { return nil }
        return String(decoding: UnsafeBufferPointer(start: bytes, count: Int(ASN1_STRING_length(time))), as: UTF8.self)
    }

    /// The date `text` spells as a UTCTime (13 characters) or a GeneralizedTime (15), each ending
    /// in `Z`; nil for anything else, or for a time that does not exist.
    public static func date(_ text: String) -> Date? {
        let digits = text.utf8.dropLast()
        guard digits.count == 12 || digits.count == 14, text.utf8.last == UInt8(ascii: "Z"),
            digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            let time = ASN1_TIME_new()
        else { return nil }
        defer { ASN1_TIME_free(time) }
        // Each form by its own parser: ASN1_TIME_set_string would also take a GeneralizedTime
        // without seconds, which is 13 characters too.
        let parsed =
            digits.count == 12 ? ASN1_UTCTIME_set_string(time, text) : ASN1_GENERALIZEDTIME_set_string(time, text)
        guard parsed == 1 else {
            ERR_clear_error()
            return nil
        }
        return X509Certificate.date(time)
    }
}
