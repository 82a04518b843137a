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

    @Flag(help: "Never shorten names in the table (they are not shortened when standard output is not a terminal).")
    var wide = false

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
        if format.json {
            try printJSON("report", report)
        } else {
            // -v adds every extension of every certificate, as `openssl x509 -text` prints them.
            let extensions =
                global.verbose
                ? try provided.entries.flatMap { entry in
                    try ([entry.certificate] + entry.keyHistory.map(\.certificate)).map(
                        CertificateDetails.extensionsText)
                } : nil
            Console.print(
                ReportTable(report, wide: wide || !StandardStream.output.isTerminal, extensions: extensions).render())
        }
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
    /// Whether names are printed whole; otherwise a subject is cut at 48 characters.
    let wide: Bool
    /// Each row's extensions as `openssl x509 -text` prints them, in the report's row order; nil
    /// leaves them out.
    let extensions: [String]?

    init(_ report: InspectionReport, wide: Bool = true, extensions: [String]? = nil) {
        self.report = report
        self.wide = wide
        self.extensions = extensions
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
            let subject = row.certificate.subject.escapingControlCharacters
            return [tag, wide ? subject : Self.truncate(subject, 48)] + name + [
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
        for (row, extensions) in zip(report.rows, extensions ?? []) {
            let tag = row.historyIndex.map { "\(row.tag) (history \($0))" } ?? row.tag.rawValue
            out.append("")
            out.append("\(tag): \(row.certificate.subject.escapingControlCharacters)")
            if let names = row.certificate.extendedKeyUsageNames {
                out.append("    Extended key usage: " + names.joined(separator: ", ").escapingControlCharacters)
            }
            // openssl's own lines; Console.print escapes them (their line breaks stay).
            if !extensions.isEmpty { out.append(String(extensions.dropLast())) }
        }
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
