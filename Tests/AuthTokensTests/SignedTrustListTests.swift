import AuthTokens
import CredentialCoding
import DerivedCredentials
import Foundation
import TestSupport
import Testing

@Suite("The signed trust list and the fetched trust it feeds", .ownThreads, .timeLimit(.minutes(1)))
struct SignedTrustListTests {
    let provider: TokenSigningKey
    let issuing: TokenSigningKey
    let revoked = RevocationList(revokedDelegations: ["d-1"])

    init() throws {
        provider = try TokenSigningKey.generate()
        issuing = try TokenSigningKey.generate()
    }

    func list(_ number: Int64, key: TokenSigningKey? = nil, revocations: RevocationList? = nil, issued: Int64 = 1000)
        throws -> SignedTrustList
    {
        try SignedTrustList.sign(
            number: number, issued: issued, nextUpdate: issued + 3600, issuers: TrustedIssuers([issuing.publicKey]),
            revocations: revocations ?? revoked, key: key ?? provider)
    }

    @Test("A list signed by the trusted key reads back whole: number, times, issuers and revocations")
    func roundTrip() throws {
        let signed = try list(7)
        let read = try SignedTrustList(verifying: signed.bytes, with: provider.publicKey)
        #expect(read == signed)
        #expect(read.number == 7 && read.issued == 1000 && read.nextUpdate == 4600)
        #expect(read.issuers == TrustedIssuers([issuing.publicKey]))
        #expect(read.revocations.revokedDelegations == ["d-1"])
        #expect(read.revocations.issued == 1000)
    }

    @Test("Refused: another key, a changed payload, alg none, a wrong typ, a missing or unknown member, junk")
    func refusals() throws {
        let signed = try list(3)
        let other = try TokenSigningKey.generate()
        // Signed by another key: its kid names that key; and with the trusted key's kid, the signature fails.
        #expect(throws: DCError.self) {
            try SignedTrustList(verifying: try list(3, key: other).bytes, with: provider.publicKey)
        }
        let parts = signed.compact.split(separator: ".").map(String.init)
        func payload(_ json: String) -> String { Base64URL.encode(Array(json.utf8)) }
        let forged = [parts[0], payload(#"{"v":1}"#), parts[2]].joined(separator: ".")
        let none = [payload(#"{"alg":"none","kid":"x","typ":"dc-trust+jws"}"#), parts[1], ""].joined(separator: ".")
        for bad in [forged, none, "", "{}", parts[0] + "." + parts[1]] {
            #expect(throws: DCError.self, "\(bad.prefix(40))") {
                try SignedTrustList(verifying: Array(bad.utf8), with: provider.publicKey)
            }
        }
        // Well signed but malformed payloads: each is refused after the signature verifies.
        let issuers = String(decoding: TrustedIssuers([issuing.publicKey]).jwks().dropLast(), as: UTF8.self)
        let content = #""revokedIssuerKeys":[],"revokedDelegations":[],"retiredContainers":[]"#
        for json in [
            #"{"v":1,"number":1,"issued":5,"nextUpdate":9,"issuers":\#(issuers)}"#,
            #"{"v":2,"number":1,"issued":5,"nextUpdate":9,"issuers":\#(issuers),\#(content)}"#,
            #"{"v":1,"number":0,"issued":5,"nextUpdate":9,"issuers":\#(issuers),\#(content)}"#,
            #"{"v":1,"number":1,"issued":9,"nextUpdate":5,"issuers":\#(issuers),\#(content)}"#,
            #"{"v":1,"number":1,"issued":5,"nextUpdate":9,"issuers":\#(issuers),\#(content),"extra":1}"#,
            #"{"v":1,"number":1,"issued":5,"nextUpdate":9,"issuers":{"keys":[1]},\#(content)}"#,
        ] {
            let jws = try CompactJWS.sign(
                payload: json, type: SignedTrustList.type, keyID: provider.publicKey.thumbprint, key: provider)
            #expect(throws: DCError.self, "\(json)") {
                try SignedTrustList(verifying: Array(jws.text.utf8), with: provider.publicKey)
            }
        }
    }

    @Test(
        "Fetched trust: a higher number replaces, a lower one, another key or junk is refused and the last good stays")
    func fetchedTrust() throws {
        let trust = FetchedTrust(key: provider.publicKey, maximumAge: .seconds(30))
        let now = Date(timeIntervalSince1970: 1000)
        #expect(trust.issuers(at: now) == .empty)
        #expect(trust.freshness(at: now).isStale && !trust.freshness(at: now).loaded)
        let two = try list(2)
        #expect(try trust.offer(two.bytes, at: now) == .accepted(number: 2))
        #expect(try trust.offer(two.bytes, at: now) == .unchanged(number: 2))
        let three = try list(3, revocations: RevocationList(revokedDelegations: ["d-1", "d-2"]))
        #expect(try trust.offer(three.bytes, at: now) == .accepted(number: 3))
        #expect(try trust.offer(three.bytes, at: now) == .unchanged(number: 3))
        for refused in [
            try list(2).bytes, try list(9, key: try TokenSigningKey.generate()).bytes, Array("{not a jws".utf8),
            try list(3, revocations: .empty).bytes,
        ] {
            #expect(throws: DCError.self) { try trust.offer(refused, at: now) }
            #expect(trust.number == 3)
            #expect(trust.revocations.revokedDelegations == ["d-1", "d-2"])
            #expect(trust.freshness(at: now).lastError != nil)
        }
        #expect(trust.issuers(at: now) == TrustedIssuers([issuing.publicKey]))
        // Fresh until the bound after the last confirmation, then empty (every token 101).
        trust.confirm(at: now)
        #expect(trust.freshness(at: now).lastError == nil)
        #expect(!trust.freshness(at: now.addingTimeInterval(29)).isStale)
        let stale = trust.freshness(at: now.addingTimeInterval(31))
        #expect(stale.isStale && stale.loaded && stale.number == 3 && stale.staleReason != nil)
        #expect(trust.issuers(at: now.addingTimeInterval(31)) == .empty)
        // Past the list's own next update by more than the bound, even when just confirmed.
        let late = now.addingTimeInterval(3600 + 31)
        trust.confirm(at: late)
        #expect(trust.freshness(at: late).isStale)
        #expect(trust.issuers(at: late) == .empty)
    }
}
