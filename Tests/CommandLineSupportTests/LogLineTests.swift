import CommandLineSupport
import Foundation
import Logging
import TestSupport
import Testing

/// The tools' log lines (dcverify logs one per verification, dcprovision with --verbose).
@Suite("Log lines", .ownThreads, .timeLimit(.minutes(1)))
struct LogLineTests {
    /// Logs `message` with `metadata` through a handler writing to a pipe, and returns what came.
    func logged(
        _ message: Logger.Message, _ metadata: Logger.Metadata, level: Logger.Level = .info,
        format: LogLineHandler.Format = .text
    ) throws -> String {
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]) }
        var logger = Logger(label: "test") {
            LogLineHandler(label: $0, level: .info, descriptor: ends[1], format: format)
        }
        logger[metadataKey: "dc.logger"] = "base"
        logger.log(level: level, message, metadata: metadata)
        close(ends[1])
        return String(decoding: try FileHandle(fileDescriptor: ends[0]).readToEnd() ?? Data(), as: UTF8.self)
    }

    @Test("one line: UTC time with milliseconds, level, label, message, sorted key=value metadata")
    func format() throws {
        let line = try logged("verified", ["dc.code": "100", "dc.app": "org.example.mail"])
        #expect(line.firstMatch(of: #/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z /#) != nil, "\(line)")
        #expect(line.hasSuffix(" info test: verified dc.app=org.example.mail dc.code=100 dc.logger=base\n"), "\(line)")
        #expect(try logged("quiet", [:], level: .debug).isEmpty, "a level below the handler's is written")
    }

    @Test(
        "JSON lines: one object a line that Python's json module reads back to the same text, whatever the message and values hold"
    )
    func jsonLines() throws {
        let hostile = "a \"quote\", a \\ backslash\nnew line\r\t\u{1}\u{7F}\u{85}\u{2028}\u{2029} é 𝄞 {\"k\":1}"
        let line = try logged("\(hostile)", ["dc.reason": .string(hostile), "plain": "x"], format: .json)
        #expect(line.split(separator: "\n").count == 1 && line.hasSuffix("}\n"), "\(line)")
        let read = try run(
            "/usr/bin/python3",
            [
                "-c",
                """
                import json, sys
                entry = json.loads(sys.stdin.read())
                assert entry["message"] == entry["reason"] == sys.argv[1], entry
                assert entry["level"] == "info" and entry["label"] == "test" and entry["plain"] == "x"
                assert entry["logger"] == "base" and entry["time"].endswith("Z")
                print("ok")
                """, hostile,
            ], stdin: Array(line.utf8))
        #expect(read.stdoutText == "ok\n", "\(read.stderrText) \(line)")
    }

    @Test(
        "the time is the clock's, to the millisecond, across second boundaries (the seconds part is reused within a second); a logger without metadata of its own writes the event's"
    )
    func timeAndPlainMetadata() throws {
        let parser = ISO8601DateFormatter()
        parser.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for _ in 0..<3 {
            var ends: [Int32] = [0, 0]
            #expect(pipe(&ends) == 0)
            defer { close(ends[0]) }
            let logger = Logger(label: "test") { LogLineHandler(label: $0, level: .info, descriptor: ends[1]) }
            let before = Date()
            logger.info("tick", metadata: ["dc.code": "100"])
            let after = Date()
            close(ends[1])
            let line = String(decoding: try FileHandle(fileDescriptor: ends[0]).readToEnd() ?? Data(), as: UTF8.self)
            #expect(line.hasSuffix(" info test: tick dc.code=100\n"), "\(line)")
            let stamp = try #require(parser.date(from: String(line.prefix(24))), "\(line)")
            #expect(stamp >= before.addingTimeInterval(-0.001) && stamp <= after, "\(stamp) not in \(before)…\(after)")
            // The next round starts in the next second.
            Thread.sleep(until: Date(timeIntervalSince1970: (after.timeIntervalSince1970 + 1).rounded(.down) + 0.01))
        }
    }

    @Test("a value or message carrying a newline, a quote or an = cannot forge a second line or field")
    func injection() throws {
        let hostile = "x\n2026-01-01T00:00:00.000Z info test: verified dc.code=100 \"\u{1B}[2J\u{2028}"
        let line = try logged("refused \(hostile)", ["dc.reason": "\(hostile)"])
        #expect(line.filter { $0 == "\n" }.count == 1 && line.hasSuffix("\n"), "\(line)")
        #expect(!line.contains("\u{1B}") && !line.contains("\u{2028}"), "\(line)")
        let escaped = #"x\n2026-01-01T00:00:00.000Z info test: verified dc.code=100 \"\u{1b}[2J\u{2028}"#
        #expect(line.contains(#"test: "refused "# + escaped + #"" "#), "\(line)")
        #expect(line.contains(#"dc.reason=""# + escaped + #"""#), "\(line)")
        // A logfmt reader finds the message and the two real fields, nothing else.
        #expect(Self.fields(line).map(\.key) == ["", "dc.logger", "dc.reason"], "\(Self.fields(line))")
    }

    /// The message (key "") and the `key=value` fields after the label, quoted values unescaped
    /// only as far as a reader must to find where they end.
    static func fields(_ line: String) -> [(key: String, value: String)] {
        guard let start = line.range(of: " test: ") else { return [] }
        var rest = Substring(line[start.upperBound...].dropLast())
        func token() -> String {
            guard rest.first == "\"" else {
                let end = rest.firstIndex(where: { $0 == " " || $0 == "=" }) ?? rest.endIndex
                defer { rest = rest[end...] }
                return String(rest[..<end])
            }
            var value = ""
            var index = rest.index(after: rest.startIndex)
            while index < rest.endIndex, rest[index] != "\"" {
                if rest[index] == "\\" { index = rest.index(after: index) }
                value.append(rest[index])
                index = rest.index(after: index)
            }
            rest = rest[rest.index(after: index)...]
            return value
        }
        var fields = [(key: "", value: token())]
        while rest.first == " " {
            rest = rest.dropFirst()
            let key = token()
            guard rest.first == "=" else { return fields + [(key: "?" + key, value: "")] }
            rest = rest.dropFirst()
            fields.append((key: key, value: token()))
        }
        return fields
    }
}
