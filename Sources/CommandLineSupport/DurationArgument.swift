import ArgumentParser

/// A unit of time a duration on the command line is written in, and its suffix.
public enum TimeUnit: Sendable, CaseIterable {
    /// `s`.
    case seconds
    /// `m`.
    case minutes
    /// `h`.
    case hours
    /// `d`: 24 hours.
    case days

    /// The letter written after the number.
    public var suffix: Character {
        switch self {
        case .seconds: "s"
        case .minutes: "m"
        case .hours: "h"
        case .days: "d"
        }
    }

    /// Seconds in one of it.
    public var seconds: Int64 {
        switch self {
        case .seconds: 1
        case .minutes: 60
        case .hours: 3600
        case .days: 86400
        }
    }
}

/// The unit a bare number (one without a suffix) counts in, for one option: the unit that option
/// counted in before durations took suffixes, so that what was accepted then still means the same.
public protocol BareNumberUnit: Sendable {
    /// The unit of a bare number.
    static var unit: TimeUnit { get }
}

/// A bare number is seconds (`--auto-lock 90`, `--request-timeout 0.5`).
public enum BareSeconds: BareNumberUnit {
    /// `TimeUnit.seconds`.
    public static let unit = TimeUnit.seconds
}

/// A bare number is minutes (`--validity-minutes 60`).
public enum BareMinutes: BareNumberUnit {
    /// ``TimeUnit/minutes``.
    public static let unit = TimeUnit.minutes
}

/// A bare number is days (`--days 7`, `--validity-days 365`).
public enum BareDays: BareNumberUnit {
    /// ``TimeUnit/days``.
    public static let unit = TimeUnit.days
}

/// A length of time given on the command line; every option that takes one has this syntax: a
/// number and a unit, `90s`, `15m`, `2h` or `1d`. The number is decimal digits, optionally with a
/// fraction of at most three digits (`1.5h`, `0.25s`); the duration is kept to the millisecond.
/// A bare number counts in `Bare`'s unit (see ``BareNumberUnit``). Anything else — a sign, a
/// space, another unit, more than nine digits before the point, more than 10 years — is not a
/// duration, and the parser refuses it with a usage error (exit 64). Each option checks its own
/// range afterwards.
public struct DurationArgument<Bare: BareNumberUnit>: ExpressibleByArgument, Sendable, Hashable {
    /// The length, in milliseconds.
    public let milliseconds: Int64
    /// The argument as it was written, for messages.
    public let text: String

    /// The longest duration any option can be given: 10 years of 365 days.
    public static var maximumMilliseconds: Int64 { 10 * 365 * 86400 * 1000 }

    /// `text` read as a duration, or nil when it is not one.
    public init?(argument text: String) {
        guard let milliseconds = Self.milliseconds(text) else { return nil }
        self.milliseconds = milliseconds
        self.text = text
    }

    /// `value` `unit`s, as an option's default (`DurationArgument(7, .days)`); at most 10 years.
    public init(_ value: Int, _ unit: TimeUnit) {
        precondition(value >= 0 && Int64(value) <= Self.maximumMilliseconds / (unit.seconds * 1000), "out of range")
        milliseconds = Int64(value) * unit.seconds * 1000
        text = "\(value)\(unit.suffix)"
    }

    /// The length as a `Duration`.
    public var duration: Duration { .milliseconds(milliseconds) }

    /// The length in seconds.
    public var seconds: Double { Double(milliseconds) / 1000 }

    /// The length in whole `unit`s, or nil when it is not a whole number of them.
    public func whole(_ unit: TimeUnit) -> Int? {
        let perUnit = unit.seconds * 1000
        return milliseconds % perUnit == 0 ? Int(milliseconds / perUnit) : nil
    }

    /// A default value as help shows it: as written.
    public var defaultValueDescription: String { text }

    private static func milliseconds(_ text: String) -> Int64? {
        let unit = TimeUnit.allCases.first { text.last == $0.suffix } ?? Bare.unit
        let number = TimeUnit.allCases.contains { text.last == $0.suffix } ? text.dropLast() : Substring(text)
        let parts = number.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = parts.first, (1...9).contains(whole.count), whole.utf8.allSatisfy(isDigit) else { return nil }
        var fraction = parts.count == 2 ? parts[1] : ""
        guard parts.count == 1 || (1...3).contains(fraction.count), fraction.utf8.allSatisfy(isDigit) else {
            return nil
        }
        while fraction.count < 3 { fraction += "0" }
        guard let integer = Int64(whole), let thousandths = Int64(fraction) else { return nil }
        // At most 999_999_999.999 of a unit of at most 86_400_000 ms: below 2^63, no overflow.
        let total = (integer * 1000 + thousandths) * unit.seconds
        return total <= maximumMilliseconds ? total : nil
    }
}

private func isDigit(_ byte: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }
