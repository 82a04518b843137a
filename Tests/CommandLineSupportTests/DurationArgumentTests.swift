import CommandLineSupport
import Foundation
import TestSupport
import Testing

/// The one duration syntax of every option that takes a length of time (docs/CLI.md,
/// "Durations"): the parser alone, then a real command with each unit, judged by openssl.
@Suite(
    "Durations on the command line: 90s, 15m, 2h, 1d, and a bare number in the option's old unit", .ownThreads,
    .timeLimit(.minutes(1)))
struct DurationArgumentTests {
    @Test(
        "Each unit, a fraction to the millisecond, and a bare number in the option's own unit",
        arguments: [
            ("90s", 90_000), ("15m", 900_000), ("2h", 7_200_000), ("1d", 86_400_000), ("1.5h", 5_400_000),
            ("0.25s", 250), ("0s", 0), ("007m", 420_000), ("3650d", 315_360_000_000),
        ] as [(String, Int64)])
    func parses(text: String, milliseconds: Int64) throws {
        #expect(DurationArgument<BareSeconds>(argument: text)?.milliseconds == milliseconds)
        #expect(DurationArgument<BareDays>(argument: text)?.milliseconds == milliseconds)
    }

    @Test("A bare number counts in the option's unit: seconds, minutes or days")
    func bareNumbers() {
        #expect(DurationArgument<BareSeconds>(argument: "90")?.milliseconds == 90_000)
        #expect(DurationArgument<BareSeconds>(argument: "0.5")?.milliseconds == 500)
        #expect(DurationArgument<BareMinutes>(argument: "60")?.milliseconds == 3_600_000)
        #expect(DurationArgument<BareDays>(argument: "7")?.milliseconds == 604_800_000)
        #expect(DurationArgument<BareDays>(argument: "7")?.whole(.days) == 7)
        #expect(DurationArgument<BareDays>(argument: "36h")?.whole(.days) == nil)
        #expect(DurationArgument<BareSeconds>(argument: "1.5s")?.whole(.seconds) == nil)
        #expect(DurationArgument<BareSeconds>(argument: "2h")?.defaultValueDescription == "2h")
    }

    @Test(
        "Not a duration: empty, a unit alone, a sign, spaces, another unit, a bad fraction, too many digits, over 10 years",
        arguments: [
            "", "s", "d", "-1s", "+1s", " 1s", "1s ", "1 s", "1w", "1S", "1ms", "1.s", ".5s", "1.2345s", "1.5.2s",
            "1e3", "0x10", "١٢s", "1_000s", "1234567890s", "3651d", "87601h", "9223372036854775807",
            "999999999d",
        ])
    func refuses(text: String) {
        #expect(DurationArgument<BareSeconds>(argument: text) == nil, "\(text)")
    }

    @Test(
        "testca crl --days takes every unit and a bare number of days; openssl crl reads the nextUpdate they make",
        arguments: [
            ("1d", 86400), ("24h", 86400), ("1440m", 86400), ("86400s", 86400), ("2", 172_800), ("1.5d", 129_600),
        ]
            as [(String, Int)])
    func crlDays(days: String, seconds: Int) throws {
        let sandbox = try Sandbox("duration-crl")
        defer { sandbox.remove() }
        try sandbox.runTool("dcprovision", ["testca", "init", "ca"])
        try sandbox.runTool("dcprovision", ["testca", "crl", "ca", "--out", "crl.pem", "--days", days])
        let text = try sandbox.run(
            OpenSSLFixtures.openssl, ["crl", "-in", "crl.pem", "-noout", "-lastupdate", "-nextupdate"]
        ).stdoutText
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "MMM d HH:mm:ss yyyy zzz"
        let dates = text.split(separator: "\n").compactMap { line -> Date? in
            guard let equals = line.firstIndex(of: "=") else { return nil }
            let value = line[line.index(after: equals)...].split(separator: " ", omittingEmptySubsequences: true)
            return formatter.date(from: value.joined(separator: " "))
        }
        try #require(dates.count == 2, "\(text)")
        #expect(Int(dates[1].timeIntervalSince(dates[0])) == seconds, "\(text)")
    }

    @Test("Out of an option's range, or not a duration, is one line and exit 64")
    func outOfRange() throws {
        let sandbox = try Sandbox("duration-refused")
        defer { sandbox.remove() }
        try sandbox.runTool("dcprovision", ["testca", "init", "ca"])
        for arguments in [
            ["testca", "crl", "ca", "--out", "crl.pem", "--days", "12h"],
            ["testca", "crl", "ca", "--out", "crl.pem", "--days", "366d"],
            ["testca", "crl", "ca", "--out", "crl.pem", "--days", "1w"],
            ["testca", "issue", "ca", "--out-dir", "out", "--validity-days", "36h"],
            ["testca", "ocsp", "ca", "--validity-minutes", "30s"],
        ] {
            let refused = try sandbox.runTool("dcprovision", arguments, expect: 64)
            #expect(refused.stderrText.split(separator: "\n").count == 1, "\(refused.stderrText)")
        }
    }
}
