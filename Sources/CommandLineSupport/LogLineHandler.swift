import Foundation
import Logging
import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The tools' swift-log backend: one line per event on standard error, written with one
/// `write(2)`.
///
/// ```text
/// 2026-11-23T23:10:04.125Z info dcverify: verified dc.app=org.example.mail dc.code=100
/// 2026-11-23T23:10:05.002Z info dcverify: "not verified" dc.code=102 dc.reason="the token has expired"
/// ```
///
/// The time is UTC with milliseconds (swift-log's `StreamLogHandler` asks for the local time zone,
/// which makes glibc look at `/etc/localtime` for every line: a system call per log line on a
/// service that logs every request). Metadata follows the message as `key=value`, sorted by key.
/// The message or a value with a space, a quote, an `=`, a backslash or a character outside
/// printable ASCII is quoted, with `"` and `\` escaped and control characters written as `\n`,
/// `\t` or `\u{…}`: a line is always one line, and nothing a request carries can forge another
/// line or another field.
///
/// With ``Format/json`` each event is one JSON object on one line (JSON Lines), for log
/// collectors: `time`, `level`, `label`, `message`, then the metadata with the `dc.` prefix left
/// out, every value a string:
///
/// ```text
/// {"time":"2026-11-23T23:10:04.125Z","level":"info","label":"dcverify","message":"verified","app":"org.example.mail","code":"100"}
/// ```
public struct LogLineHandler: LogHandler {
    /// The least severe level written: the shared ``LevelSetting``'s, when the handler follows
    /// one, until this logger sets a level of its own.
    public var logLevel: Logger.Level {
        get { ownLevel ?? setting?.level ?? .info }
        set { ownLevel = newValue }
    }
    private var ownLevel: Logger.Level?
    private let setting: LevelSetting?
    /// Metadata added to every line of this logger.
    public var metadata: Logger.Metadata = [:]
    private let label: String
    private let descriptor: Int32
    private let format: Format

    /// How a line is written.
    public enum Format: Sendable {
        /// The message, then `key=value` pairs.
        case text
        /// One JSON object a line.
        case json
    }

    /// A handler for the logger `label`, writing lines of at least `level` to `descriptor`
    /// (standard error unless told), as `format` says.
    public init(label: String, level: Logger.Level, descriptor: Int32 = 2, format: Format = .text) {
        self.label = label
        self.ownLevel = level
        self.setting = nil
        self.descriptor = descriptor
        self.format = format
    }

    /// A handler for the logger `label` whose level is `setting`'s, now and after it changes (a
    /// service that re-reads its configuration on SIGHUP).
    public init(label: String, following setting: LevelSetting, descriptor: Int32 = 2, format: Format = .text) {
        self.label = label
        self.ownLevel = nil
        self.setting = setting
        self.descriptor = descriptor
        self.format = format
    }

    /// A log level that every handler following it reads at each event, so that changing it
    /// changes what every logger writes from then on.
    public final class LevelSetting: Sendable {
        private let value: Atomic<UInt8>

        /// A setting of `level`.
        public init(_ level: Logger.Level) { value = Atomic(Self.index(level)) }

        /// The level in force.
        public var level: Logger.Level {
            let index = Int(value.load(ordering: .relaxed))
            return Logger.Level.allCases[min(index, Logger.Level.allCases.count - 1)]
        }

        /// Makes `level` the level in force.
        public func set(_ level: Logger.Level) { value.store(Self.index(level), ordering: .relaxed) }

        private static func index(_ level: Logger.Level) -> UInt8 {
            UInt8(Logger.Level.allCases.firstIndex(of: level) ?? 0)
        }
    }

    /// One metadata value of this logger.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Writes `event` as one line.
    public func log(event: LogEvent) {
        if format == .json { return logJSON(event) }
        var line = [UInt8]()
        line.reserveCapacity(160)
        Self.appendTimestamp(to: &line)
        line.append(UInt8(ascii: " "))
        line.append(contentsOf: event.level.rawValue.utf8)
        line.append(UInt8(ascii: " "))
        line.append(contentsOf: label.utf8)
        line.append(contentsOf: ": ".utf8)
        Self.appendValue("\(event.message)", to: &line)
        // No merge when only one side has metadata (the usual case: a service's logger has none
        // of its own): a merge rehashes every key.
        var all = event.metadata ?? metadata
        if let explicit = event.metadata, !metadata.isEmpty { all = metadata.merging(explicit) { _, new in new } }
        for (key, value) in all.sorted(by: { $0.key < $1.key }) {
            line.append(UInt8(ascii: " "))
            Self.appendValue(key, to: &line)
            line.append(UInt8(ascii: "="))
            Self.appendValue(value.description, to: &line)
        }
        line.append(UInt8(ascii: "\n"))
        TerminalLine.makeRoom()
        Self.write(line, to: descriptor)
    }

    /// Writes `event` as one JSON object on one line.
    private func logJSON(_ event: LogEvent) {
        var line = [UInt8]()
        line.reserveCapacity(200)
        line.append(contentsOf: #"{"time":""#.utf8)
        Self.appendTimestamp(to: &line)
        line.append(contentsOf: #"","level":"#.utf8)
        Self.appendJSONString(event.level.rawValue, to: &line)
        line.append(contentsOf: #","label":"#.utf8)
        Self.appendJSONString(label, to: &line)
        line.append(contentsOf: #","message":"#.utf8)
        Self.appendJSONString("\(event.message)", to: &line)
        var all = event.metadata ?? metadata
        if let explicit = event.metadata, !metadata.isEmpty { all = metadata.merging(explicit) { _, new in new } }
        for (key, value) in all.sorted(by: { $0.key < $1.key }) {
            line.append(UInt8(ascii: ","))
            Self.appendJSONString(key.hasPrefix("dc.") ? String(key.dropFirst(3)) : key, to: &line)
            line.append(UInt8(ascii: ":"))
            Self.appendJSONString(value.description, to: &line)
        }
        line.append(contentsOf: "}\n".utf8)
        Self.write(line, to: descriptor)
    }

    /// `text` as a JSON string (RFC 8259): quoted, with `"`, `\\`, control characters, the C1
    /// controls and the Unicode line separators escaped, so that a line is always one line.
    static func appendJSONString(_ text: String, to line: inout [UInt8]) {
        line.append(UInt8(ascii: "\""))
        appendEscaped(text, to: &line, json: true)
        line.append(UInt8(ascii: "\""))
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`, from the real-time clock, without the time zone database. The
    /// part up to the seconds is made once a second and reused.
    static func appendTimestamp(to line: inout [UInt8]) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let second = now.tv_sec
        let text = lastSecond.withLock { last -> [UInt8] in
            if last.second != second {
                var text: [UInt8] = []
                text.reserveCapacity(20)
                formatSeconds(second, into: &text)
                last = (second, text)
            }
            return last.text
        }
        line.append(contentsOf: text)
        line.append(UInt8(ascii: "0") + UInt8(now.tv_nsec / 100_000_000 % 10))
        line.append(UInt8(ascii: "0") + UInt8(now.tv_nsec / 10_000_000 % 10))
        line.append(UInt8(ascii: "0") + UInt8(now.tv_nsec / 1_000_000 % 10))
        line.append(UInt8(ascii: "Z"))
    }

    /// The formatted `YYYY-MM-DDTHH:MM:SS.` of the last second a line was logged in.
    private static let lastSecond = Mutex<(second: Int, text: [UInt8])>((-1, []))

    /// `YYYY-MM-DDTHH:MM:SS.` for `seconds` since 1970, UTC.
    private static func formatSeconds(_ seconds: Int, into line: inout [UInt8]) {
        var seconds = seconds
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func digits(_ value: Int, _ count: Int) {
            var divisor = 1
            for _ in 1..<count { divisor *= 10 }
            var rest = value
            while divisor > 0 {
                line.append(UInt8(ascii: "0") + UInt8(rest / divisor % 10))
                rest %= divisor
                divisor /= 10
            }
        }
        digits(Int(parts.tm_year) + 1900, 4)
        line.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mon) + 1, 2)
        line.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mday), 2)
        line.append(UInt8(ascii: "T"))
        digits(Int(parts.tm_hour), 2)
        line.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_min), 2)
        line.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_sec), 2)
        line.append(UInt8(ascii: "."))
    }

    /// `text` as it is when it needs no quotes, else quoted and escaped.
    static func appendValue(_ text: String, to line: inout [UInt8]) {
        let plain =
            !text.isEmpty
            && text.utf8.allSatisfy {
                $0 > 32 && $0 < 127 && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "=") && $0 != UInt8(ascii: "\\")
            }
        if plain {
            line.append(contentsOf: text.utf8)
            return
        }
        line.append(UInt8(ascii: "\""))
        appendEscaped(text, to: &line)
        line.append(UInt8(ascii: "\""))
    }

    /// `text` with `"`, `\` and control characters (and the Unicode line separators) escaped;
    /// the other control characters as `\u{…}`, or with `json` as JSON's `\uXXXX`.
    static func appendEscaped(_ text: String, to line: inout [UInt8], json: Bool = false) {
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": line.append(contentsOf: #"\""#.utf8)
            case "\\": line.append(contentsOf: #"\\"#.utf8)
            case "\n": line.append(contentsOf: #"\n"#.utf8)
            case "\r": line.append(contentsOf: #"\r"#.utf8)
            case "\t": line.append(contentsOf: #"\t"#.utf8)
            case _
            where scalar.value < 32 || scalar.value == 127 || (0x80...0x9F).contains(scalar.value)
                || scalar.value == 0x2028 || scalar.value == 0x2029:
                let hex = String(scalar.value, radix: 16)
                let escape = json ? "\\u" + String(repeating: "0", count: 4 - hex.count) + hex : "\\u{\(hex)}"
                line.append(contentsOf: escape.utf8)
            default: line.append(contentsOf: String(scalar).utf8)
            }
        }
    }

    /// Writes all of `line`; a line that cannot be written is dropped (a log must not stop the
    /// program).
    private static func write(_ line: [UInt8], to descriptor: Int32) {
        line.withUnsafeBytes { _ = Descriptors.writeAll($0, to: descriptor) }
    }
}
