import DerivedCredentials
import Foundation

/// `dcverify serve --config FILE`: a JSON object whose keys are the long flag names without the
/// dashes, such as `{"listen": "0.0.0.0:8443", "tls-certificate": "server.pem", "threads": 2}`.
/// A flag on the command line wins over the same key in the file; relative paths in the file are
/// relative to the file's directory. An unknown key, or a value of the wrong type, is a usage
/// error: a misspelt setting never passes silently.
struct ConfigurationFile: Decodable, Equatable {
    var issuers: String?
    var revocations: String?
    var jwks: String?
    var listen: String?
    var tlsCertificate: String?
    var tlsKey: String?
    var portFile: String?
    var threads: Int?
    var requestTimeout: Double?
    var headTimeout: Double?
    var maxConnections: Int?
    var maxConnectionsPerAddress: Int?
    var logLevel: String?
    var logFormat: String?
    var metricsListen: String?
    var trustURL: String?
    var trustKey: String?
    var trustCA: String?
    var trustMaxAge: Double?
    var trustOverHTTP: Bool?

    enum CodingKeys: String, CodingKey, CaseIterable {
        case issuers, revocations, jwks, listen, threads
        case tlsCertificate = "tls-certificate"
        case tlsKey = "tls-key"
        case portFile = "port-file"
        case requestTimeout = "request-timeout"
        case headTimeout = "head-timeout"
        case maxConnections = "max-connections"
        case maxConnectionsPerAddress = "max-connections-per-address"
        case logLevel = "log-level"
        case logFormat = "log-format"
        case metricsListen = "metrics-listen"
        case trustURL = "trust-url"
        case trustKey = "trust-key"
        case trustCA = "trust-ca"
        case trustMaxAge = "trust-max-age"
        case trustOverHTTP = "trust-over-http"
    }

    init() {}

    /// Reads and checks `path`; relative paths in it become relative to its directory.
    static func read(_ path: String) throws -> ConfigurationFile {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            let missing = !FileManager.default.fileExists(atPath: path)
            throw DCError(missing ? .fileNotFound : .ioError, "cannot read the configuration file", subject: path)
        }
        guard data.count <= 1 << 20 else {
            throw DCError(.usage, "the configuration file is over 1 MiB", subject: path)
        }
        guard let settings = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            throw DCError(.usage, "the configuration file is not a JSON object", subject: path)
        }
        let known = Set(CodingKeys.allCases.map(\.rawValue))
        if let unknown = settings.keys.filter({ !known.contains($0) }).sorted().first {
            throw DCError(
                .usage, "unknown setting '\(unknown.escapingControlCharacters)'", subject: path,
                hint: "the settings are: \(known.sorted().joined(separator: ", "))")
        }
        var file: ConfigurationFile
        do {
            file = try JSONDecoder().decode(ConfigurationFile.self, from: data)
        } catch DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context) {
            let key = context.codingPath.first?.stringValue ?? "?"
            throw DCError(.usage, "the setting '\(key)' has a value of the wrong type", subject: path)
        } catch {
            throw DCError(.usage, "the configuration file cannot be read as settings", subject: path)
        }
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent()
        func resolve(_ value: String?) -> String? {
            guard let value, !value.hasPrefix("/") else { return value }
            return directory.appendingPathComponent(value).path
        }
        file.issuers = resolve(file.issuers)
        file.revocations = resolve(file.revocations)
        file.jwks = resolve(file.jwks)
        file.tlsCertificate = resolve(file.tlsCertificate)
        file.tlsKey = resolve(file.tlsKey)
        file.portFile = resolve(file.portFile)
        file.trustKey = resolve(file.trustKey)
        file.trustCA = resolve(file.trustCA)
        return file
    }
}
