import ArgumentParser
import CredentialDelivery
import TestCAProvider

// Option values of types CommandLineSupport does not link (it is dcverify's too): checked as the
// command line is parsed, like those in CommandLineSupport's ValueArguments.swift.

/// `passphrase` or `secure-services` (`policy --token-login`).
extension TokenLogin: ExpressibleByArgument {}

/// `expired`, `wrong-key-usage`, `mismatched-key` or `ca-certificate` (`testca issue --negative`).
extension NegativeProfile: ExpressibleByArgument {}
