internal import COpenSSL
import Foundation

/// Times as X.509 spells them, and as OpenSSL's CA database (`index.txt`) stores them: UTCTime,
/// `YYMMDDHHMMSSZ`, for 1950 through 2049, and GeneralizedTime, `YYYYMMDDHHMMSSZ`, otherwise
/// (RFC 5280, 4.1.2.5). OpenSSL writes and reads them, without the locale machinery a date
/// formatter loads at its first use.
public enum ASN1Time {
    /// `date`, to the second, in the form RFC 5280 gives its year; nil for a date OpenSSL cannot
    /// represent.
    public static func text(_ date: Date) -> String? {
        guard let time = ASN1_TIME_set(nil, time_t(date.timeIntervalSince1970.rounded(.down))) else { return nil }
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
        guard ASN1_TIME_set_string(time, text) == 1 else { return nil }
        return X509Certificate.date(time)
    }
}
