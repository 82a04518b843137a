import CredentialCoding
import Foundation
import Testing

@Suite("X.509 times as text (the test CA's index.txt)", .ownThreads, .timeLimit(.minutes(1)))
struct ASN1TimeTests {
    static let pairs: [(seconds: TimeInterval, text: String)] = [
        (0, "700101000000Z"),
        (-631_152_000, "500101000000Z"),  // 1950: the first UTCTime year
        (2_524_607_999, "491231235959Z"),  // 2049-12-31T23:59:59Z: the last
        (2_524_608_000, "20500101000000Z"),  // 2050: GeneralizedTime from here
        (1_827_204_697, "271126045137Z"),
    ]

    @Test("UTCTime from 1950 through 2049 and GeneralizedTime from 2050, both ways, to the second")
    func bothWays() {
        for (seconds, text) in Self.pairs {
            #expect(ASN1Time.text(Date(timeIntervalSince1970: seconds)) == text)
            #expect(ASN1Time.text(Date(timeIntervalSince1970: seconds + 0.75)) == text)
            #expect(ASN1Time.date(text) == Date(timeIntervalSince1970: seconds), "\(text)")
        }
        #expect(ASN1Time.date("20271126045137Z") == Date(timeIntervalSince1970: 1_827_204_697))
    }

    @Test("Anything but 12 or 14 digits and Z, or a time that does not exist, is nil")
    func refuses() {
        for text in [
            "", "Z", "2711260451Z", "2711260451+0000", "271126045137+0000", "271126045137z", "27112604513Z",
            "2027112604513Z", "271326045137Z", "271132045137Z", "271126245137Z", "27112604513 Z", "٢٧1126045137Z",
            "20271126045137.5Z", "205001010000Z", "199912312359Z",
        ] {
            #expect(ASN1Time.date(text) == nil, "\(text)")
        }
    }
}
