import CredentialCoding
import DerivedCredentials
import Foundation

/// The conformance kit every provider runs — the built-in ones, the samples, and any vendor's.
///
/// It returns a ``Report`` instead of asserting, so it works under Swift Testing, XCTest or a
/// plain executable:
///
/// ```swift
/// @Test func conforms() async {
///     let report = await ProviderConformance.check(
///         MyProvider(), request: ProviderRequest(options: ["account": ["alice"]]),
///         failingRequests: [ProviderRequest(options: [:])])
///     #expect(report.failures.isEmpty, "\(report)")
/// }
/// ```
public enum ProviderConformance {
    /// One check that failed, and why.
    public struct Failure: Sendable, CustomStringConvertible {
        /// The check's name, a sentence such as `each tag appears once`.
        public var check: String
        /// What was wrong, for a person: the provider's error or the value that broke the rule.
        public var message: String
        /// `check: message`.
        public var description: String { "\(check): \(message)" }
    }

    /// The outcome of ``check(_:request:failingRequests:validateProfiles:trustAnchors:)``: every check by name.
    public struct Report: Sendable, CustomStringConvertible {
        /// The id of the provider checked.
        public var provider: String
        /// The names of the checks that passed, in the order they ran.
        public var passed: [String] = []
        /// The checks that failed, in the order they ran.
        public var failures: [Failure] = []
        /// True when no check failed.
        public var isConforming: Bool { failures.isEmpty }
        /// A summary line with the counts, then one `✘ check: message` line per failure.
        public var description: String {
            (["\(provider): \(passed.count) checks passed, \(failures.count) failed"] + failures.map { "  ✘ \($0)" })
                .joined(separator: "\n")
        }

        mutating func record(_ check: String, _ failure: String?) {
            if let failure { failures.append(Failure(check: check, message: failure)) } else { passed.append(check) }
        }
    }

    /// Checks `provider`:
    /// - the descriptor (id, name, version, option names);
    /// - `request` succeeds, and its entries are strict DER certificates with PKCS#8 keys that
    ///   match them, one entry per tag, key history only on escrow and at most 20 pairs, and a
    ///   credential can be built from them; with `validateProfiles`, they also pass validation;
    /// - a call in a cancelled task throws `CancellationError` promptly;
    /// - each of `failingRequests` fails with a `DCError` whose description is one line.
    public static func check(
        _ provider: any CredentialProvider, request: ProviderRequest, failingRequests: [ProviderRequest] = [],
        validateProfiles: Bool = true, trustAnchors: [Certificate] = []
    ) async -> Report {
        var report = Report(provider: provider.descriptor.id)
        checkDescriptor(provider.descriptor, &report)

        do {
            let provided = try await provider.provide(request)
            report.record("provide succeeds", nil)
            checkEntries(provided, &report)
            if validateProfiles {
                let verdict = CredentialValidator(trustAnchors: trustAnchors, intermediates: provided.chain)
                    .validate(entries: provided.entries)
                report.record(
                    "entries pass validation",
                    verdict.passes() ? nil : verdict.errors.map(\.description).joined(separator: "; "))
            }
        } catch {
            report.record("provide succeeds", "threw \(error)")
        }

        await checkCancellation(provider, request, &report)

        for (index, failing) in failingRequests.enumerated() {
            let check = "failing request \(index) throws a one-line DCError"
            do {
                _ = try await provider.provide(failing)
                report.record(check, "it succeeded")
            } catch let error as DCError {
                report.record(check, error.description.contains("\n") ? "the description has several lines" : nil)
            } catch {
                report.record(check, "threw \(type(of: error)), not DCError: \(error)")
            }
        }
        return report
    }

    static func checkDescriptor(_ descriptor: ProviderDescriptor, _ report: inout Report) {
        let idCharacters =
            descriptor.id.hasPrefix("exec:")
            || (!descriptor.id.isEmpty && descriptor.id.allSatisfy { $0.isLowercase || $0.isNumber || $0 == "-" })
        report.record(
            "descriptor id is lowercase letters, digits and '-' (or exec:PATH)",
            idCharacters ? nil : "id '\(descriptor.id)'")
        report.record("descriptor has a display name", descriptor.displayName.isEmpty ? "empty" : nil)
        report.record("descriptor has a version", descriptor.version.isEmpty ? "empty" : nil)
        let names = descriptor.options.map(\.name)
        report.record(
            "option names are unique and non-empty",
            Set(names).count == names.count && !names.contains("") ? nil : "options \(names)")
    }

    static func checkEntries(_ provided: ProvidedCredential, _ report: inout Report) {
        report.record("there is at least one entry", provided.entries.isEmpty ? "no entries" : nil)
        let tags = provided.entries.map(\.tag)
        report.record("each tag appears once", Set(tags).count == tags.count ? nil : "tags \(tags)")
        let reader = CredentialReader()
        var problems: [String] = []
        for entry in provided.entries {
            if !entry.keyHistory.isEmpty && entry.tag != .escrow { problems.append("\(entry.tag) has a key history") }
            if entry.keyHistory.count > CredentialEntry.maximumKeyHistory { problems.append("key history too long") }
            for (index, pair) in ([entry.certifiedKey] + entry.keyHistory).enumerated() {
                let place = index == 0 ? "\(entry.tag)" : "\(entry.tag) history \(index - 1)"
                do {
                    let certificate = try reader.certificate(der: pair.certificate.derBytes, source: place)
                    let key = try pair.privateKey.withPKCS8DER {
                        try reader.privateKey(pkcs8: Array($0), source: place)
                    }
                    _ = try KeyMaterial.paired(certificates: [certificate], privateKey: key, source: place)
                } catch {
                    problems.append("\(error)")
                }
            }
        }
        report.record(
            "certificates are strict DER, keys PKCS#8 that match them, history only on escrow",
            problems.isEmpty ? nil : problems.joined(separator: "; "))
        do {
            _ = try provided.credential(
                name: provided.suggestedName ?? "conformance", serialNumber: provided.suggestedSerialNumber ?? "1",
                expirationDate: provided.suggestedExpirationDate ?? Date().addingTimeInterval(86400))
            report.record("a credential can be built from the entries", nil)
        } catch {
            report.record("a credential can be built from the entries", "\(error)")
        }
    }

    static func checkCancellation(
        _ provider: any CredentialProvider, _ request: ProviderRequest, _ report: inout Report
    ) async {
        let check = "a cancelled call throws CancellationError within 5 s"
        // The task cancels itself before calling the provider, so a fast provider cannot finish
        // before the cancellation lands; the time is taken inside the task, so a busy executor's
        // scheduling delay does not count against the provider.
        let task = Task { () -> (Result<ProvidedCredential, any Error>, Duration) in
            withUnsafeCurrentTask { $0?.cancel() }
            let started = ContinuousClock.now
            do {
                let provided = try await provider.provide(request)
                return (.success(provided), ContinuousClock.now - started)
            } catch {
                return (.failure(error), ContinuousClock.now - started)
            }
        }
        let (result, elapsed) = await task.value
        do {
            _ = try result.get()
            report.record(check, "it completed instead")
        } catch is CancellationError {
            report.record(check, elapsed < .seconds(5) ? nil : "took \(elapsed)")
        } catch {
            report.record(check, "threw \(error) instead")
        }
    }
}
