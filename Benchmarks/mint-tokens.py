#!/usr/bin/env python3
"""Mints auth tokens for the verification benchmark, written from the format's documentation with
pyca/cryptography alone (Debian python3-cryptography), not with the Swift code: an independent
implementation of the token format.

usage: mint-tokens.py DIR --tokens N [--delegations D] [--lifetime S] > tokens.txt

DIR holds the issuing key (issuer-key.pem, made on first use and kept, so the issuers file the
service reads does not change between calls), the issuers JWKS (issuers.jwks) and an empty
revocation list (revocations.json), both written only when missing. The N tokens go to standard
output, one per line: token i is made under delegation i mod D, so D = 1 gives N tokens sharing
one delegation and D = N gives N tokens with a delegation each. Every delegation certifies a
client token key of its own. Tokens are valid from now for S seconds (at most 600, the default).

The format (Sources/AuthTokens): a token is `<delegation JWS>~<token JWS>`, both compact ES256
JWS (P-256, the signature the raw 64-byte r||s, base64url without padding everywhere).
  delegation header  {"alg":"ES256","kid":<issuing key's RFC 7638 thumbprint>,"typ":"dc-dlg+jwt"}
  delegation payload {"v":1,"iss":…,"jti":<32 lower-case hex>,"sub":…,"app":…,"ctr":…,
                      "cnf":{"jwk":{"kty":"EC","crv":"P-256","x":…,"y":…}},"nbf":N,"exp":N}
                     (exp - nbf at most 86 400 s)
  token header       {"alg":"ES256","typ":"dc-auth+jwt"}
  token payload      {"v":1,"dlg":<the delegation's jti>,"ch":…,"srv":…,"iat":N,"exp":N}
                     (exp - iat at most 600 s, and not after the delegation's exp)
JSON is written with members in the documented order and no white space, as the Swift side writes it.
"""

import argparse
import base64
import hashlib
import json
import os
import secrets
import sys
import time

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


# The order of the P-256 group.
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def compact(value) -> str:
    # Python keeps a dict's insertion order: members come out in the order they are written below.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def coordinates(key: ec.EllipticCurvePrivateKey) -> tuple[str, str]:
    numbers = key.public_key().public_numbers()
    return b64url(numbers.x.to_bytes(32, "big")), b64url(numbers.y.to_bytes(32, "big"))


def thumbprint(x: str, y: str) -> str:
    # RFC 7638: the required members of an EC JWK, sorted, no white space.
    canonical = compact({"crv": "P-256", "kty": "EC", "x": x, "y": y})
    return b64url(hashlib.sha256(canonical.encode("ascii")).digest())


def jws(header: dict, payload: dict, key: ec.EllipticCurvePrivateKey) -> str:
    signing_input = b64url(compact(header).encode()) + "." + b64url(compact(payload).encode())
    r, s = decode_dss_signature(key.sign(signing_input.encode("ascii"), ec.ECDSA(hashes.SHA256())))
    # The low-S form, the one encoding the verifier accepts (s <= n/2, n the P-256 order).
    s = min(s, P256_ORDER - s)
    return signing_input + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


def write_new(path: str, text: str) -> None:
    """Writes `text` to `path` atomically (a temporary file renamed over it)."""
    temporary = path + ".tmp"
    with open(temporary, "w") as file:
        file.write(text)
    os.replace(temporary, path)


def issuing_key(directory: str) -> ec.EllipticCurvePrivateKey:
    """The issuing key in DIR, made (with issuers.jwks and revocations.json) on first use."""
    pem = os.path.join(directory, "issuer-key.pem")
    if os.path.exists(pem):
        with open(pem, "rb") as file:
            return serialization.load_pem_private_key(file.read(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    x, y = coordinates(key)
    jwk = {"kty": "EC", "crv": "P-256", "kid": thumbprint(x, y), "use": "sig", "alg": "ES256", "x": x, "y": y}
    write_new(os.path.join(directory, "issuers.jwks"), compact({"keys": [jwk]}) + "\n")
    revocations = {"v": 1, "issued": int(time.time()), "revokedIssuerKeys": [], "revokedDelegations": [],
                   "retiredContainers": []}
    write_new(os.path.join(directory, "revocations.json"), compact(revocations) + "\n")
    write_new(pem, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()).decode("ascii"))
    return key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--delegations", type=int, default=1)
    parser.add_argument("--lifetime", type=int, default=600)
    args = parser.parse_args()
    if not (1 <= args.delegations <= args.tokens and 1 <= args.lifetime <= 600):
        parser.error("need 1 <= delegations <= tokens and 1 <= lifetime <= 600")

    issuer = issuing_key(args.directory)
    kid = thumbprint(*coordinates(issuer))
    now = int(time.time())
    delegations = []  # (compact delegation, jti, client key, exp)
    for index in range(args.delegations):
        client = ec.generate_private_key(ec.SECP256R1())
        x, y = coordinates(client)
        jti = secrets.token_hex(16)
        not_before = now - 60
        claims = {
            "v": 1, "iss": "bench.example", "jti": jti, "sub": f"user{index}", "app": "com.example.bench",
            "ctr": f"container-{index}", "cnf": {"jwk": {"kty": "EC", "crv": "P-256", "x": x, "y": y}},
            "nbf": not_before, "exp": not_before + 86_400,
        }
        text = jws({"alg": "ES256", "kid": kid, "typ": "dc-dlg+jwt"}, claims, issuer)
        delegations.append((text, jti, client, claims["exp"]))

    out = sys.stdout
    for index in range(args.tokens):
        text, jti, client, delegation_expires = delegations[index % args.delegations]
        claims = {
            "v": 1, "dlg": jti, "ch": secrets.token_urlsafe(16), "srv": "app.example", "iat": now,
            "exp": min(now + args.lifetime, delegation_expires),
        }
        out.write(text + "~" + jws({"alg": "ES256", "typ": "dc-auth+jwt"}, claims, client) + "\n")


if __name__ == "__main__":
    main()
