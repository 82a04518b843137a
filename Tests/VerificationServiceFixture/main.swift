// A verification service for the tests: the library's server with a table verifier. Every other
// test runs `dcverify serve` with real tokens; this fake exists for what the real verifier cannot
// do, a verification that takes seconds (`delay`), so that a request is still in flight when the
// shutdown test sends SIGTERM.
//
//   VerificationServiceFixture --table FILE --port-file FILE [--request-timeout S]
//       [--tls-certificate F --tls-key F] [--jwks F] [--log-level L]
//
// The table is a JSON object: token → {"code": 100|101|102|103, "challenge", "server", "user",
// "app", "container", "created", "delay"} (delay: seconds the verification takes, to hold a
// request in flight). A token not in the table is 101.
import AuthTokens
import Foundation
import Logging
import VerificationService

struct Entry: Decodable {
    var code: Int
    var challenge: String?
    var server: String?
    var user: String?
    var app: String?
    var container: String?
    var created: Int64?
    var delay: Double?
}

/// Maps fixed token strings to verdicts (stands in for AuthTokenVerifier, see the header).
struct TableVerifier: TokenVerifying {
    let table: [String: Entry]

    func verify(_ token: String, now: Date) -> TokenVerdict {
        guard let entry = table[token] else { return TokenVerdict(.failure(.init(.invalid, "not in the table"))) }
        if let delay = entry.delay { Thread.sleep(forTimeInterval: delay) }
        if entry.code == 100 {
            return TokenVerdict(
                .success(
                    .init(
                        challenge: entry.challenge ?? "", serverName: entry.server ?? "", userID: entry.user ?? "",
                        appID: entry.app ?? "", containerID: entry.container ?? "", version: 1,
                        creationTime: entry.created ?? 0)))
        }
        let failure = TokenVerdict.Failure(rawValue: entry.code) ?? .invalid
        return TokenVerdict(.failure(.init(failure, "the table says \(entry.code)")))
    }
}

var options: [String: String] = [:]
var arguments = CommandLine.arguments.dropFirst()
while let name = arguments.popFirst() {
    guard name.hasPrefix("--"), let value = arguments.popFirst() else {
        FileHandle.standardError.write(Data("usage: see the header of main.swift\n".utf8))
        exit(64)
    }
    options[String(name.dropFirst(2))] = value
}
let level = options["log-level"].flatMap { Logger.Level(rawValue: $0) } ?? .info
LoggingSystem.bootstrap { label in
    var handler = StreamLogHandler.standardError(label: label)
    handler.logLevel = level
    return handler
}
let logger = Logger(label: "dcverify")
do {
    let table = try JSONDecoder().decode(
        [String: Entry].self, from: Data(contentsOf: URL(fileURLWithPath: options["table"] ?? "")))
    var configuration = ServiceConfiguration(listen: ListenAddress(host: "127.0.0.1", port: 0), threads: 2)
    configuration.portFile = options["port-file"]
    configuration.jwksFile = options["jwks"]
    if let seconds = options["request-timeout"].flatMap(Double.init) {
        configuration.requestTimeout = .milliseconds(Int64(seconds * 1000))
    }
    if let certificate = options["tls-certificate"], let key = options["tls-key"] {
        configuration.tls = TLSFiles(certificate: certificate, key: key)
    }
    let server = try VerificationServer(
        configuration: configuration, verifier: TableVerifier(table: table), logger: logger,
        onReload: { logger.notice("reload hook called") })
    try await server.run()
} catch {
    FileHandle.standardError.write(Data("VerificationServiceFixture: \(error)\n".utf8))
    exit(1)
}
