import ArgumentParser
import CommandLineSupport
import CredentialCoding
import DerivedCredentials
import Foundation

struct Inspect: AsyncParsableCommand, OutputCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "Load, convert and validate a credential; print a table or JSON.",
        discussion: """
            Sources: --pem TAG=CERT[,KEY] (repeatable; several escrow files form the key history, \
            newest first), --pkcs12 FILE --tag TAG (or --pkcs12 TAG=FILE), --manifest FILE, \
            --classify CERT[,KEY], --testca DIR, --provider ID|exec:PATH [--option KEY=VALUE]. \
            Tags: authentication, signing, encryption, escrow. Exits 65 when validation finds an \
            error (or, with --strict, a warning), 79 when a certificate is revoked, 75 when --crl or \
            --ocsp was given and a status could not be checked (unless --allow-unchecked-revocation).
            """
    )

    @OptionGroup(title: "Source") var source: SourceOptions<PINOptions>

    @OptionGroup var trust: TrustAnchorOptions

    @Flag(help: "Treat warnings as errors.")
    var strict = false

    @OptionGroup var format: JSONOutputOptions

    @OptionGroup var passphrase: PromptingPassphraseOptions
    @OptionGroup var global: GlobalOptions

    func validate() throws {
        if source.isEmpty {
            throw ValidationError("give a source: --pem, --pkcs12, --manifest, --classify, --testca or --provider")
        }
    }

    @OptionGroup var output: OutputOptions

    func run() async throws {
        global.bootstrapLogging()
        let provided = try await source.provide(passphrase: passphrase)
        let validator = CredentialValidator(
            trustAnchors: try trust.certificates(), intermediates: provided.chain,
            revocation: try source.revocationPolicy())
        let verdict = validator.validate(entries: provided.entries)
        let report = try InspectionReport(
            entries: provided.entries, verdict: verdict, strict: strict, friendlyNames: provided.friendlyNames)
        if format.json { try printJSON("report", report) } else { Console.print(ReportTable(report).render()) }
        if !report.valid {
            if let failure = verdict.revocationFailure { throw failure }
            throw DCError(
                .validationFailed,
                "the credential fails validation: \(report.errorCount) error(s), \(report.warningCount) warning(s)"
                    + (strict ? " (strict)" : ""))
        }
    }
}

/// The human-readable form of an ``InspectionReport``. Names from inside certificates are printed
/// with control characters escaped.
struct ReportTable {
    let report: InspectionReport

    init(_ report: InspectionReport) {
        self.report = report
    }

    func render() -> String {
        let day = DateFormatter()
        day.dateFormat = "yyyy-MM-dd"
        day.timeZone = TimeZone(identifier: "UTC")
        day.locale = Locale(identifier: "en_US_POSIX")
        let showNames = report.rows.contains { $0.friendlyName != nil }
        let header = ["TAG", "SUBJECT"] + (showNames ? ["NAME"] : []) + ["KEY", "NOT BEFORE", "NOT AFTER", "CHECKS"]
        let rows: [[String]] = report.rows.map { row in
            let errors = row.findings.filter { $0.severity == .error }.count
            let warnings = row.findings.filter { $0.severity == .warning }.count
            let checks =
                errors + warnings == 0
                ? "ok"
                : [errors > 0 ? "\(errors) error(s)" : nil, warnings > 0 ? "\(warnings) warning(s)" : nil]
                    .compactMap { $0 }.joined(separator: ", ")
            let tag = row.historyIndex.map { "\(row.tag) (history \($0))" } ?? row.tag.rawValue
            let name = showNames ? [row.friendlyName.map { "\"\($0.escapingControlCharacters)\"" } ?? ""] : []
            return [tag, Self.truncate(row.certificate.subject.escapingControlCharacters, 48)] + name + [
                row.certificate.keyAlgorithm, row.certificate.notBefore.map(day.string) ?? "?",
                row.certificate.notAfter.map(day.string) ?? "?", checks,
            ]
        }
        let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max() ?? 0 }
        func line(_ cells: [String]) -> String {
            zip(cells, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  ")
                .trimmingCharacters(in: .whitespaces)
        }
        var out = ([header] + rows).map(line)
        let findings = report.rows.flatMap(\.findings) + report.findings
        if !findings.isEmpty {
            out.append("")
            out += findings.map { "  " + $0.description.escapingControlCharacters }
        }
        out.append("")
        let summary = "\(report.errorCount) error(s), \(report.warningCount) warning(s)"
        out.append((report.valid ? "valid" : "INVALID") + ": " + summary + (report.strict ? " (strict)" : ""))
        return out.joined(separator: "\n")
    }

    private static func truncate(_ text: String, _ length: Int) -> String {
        text.count <= length ? text : String(text.prefix(length - 1)) + "…"
    }
}
