"""An independent peer for the auth token tests: PyJWT (Debian python3-jwt) and pyca/cryptography.

Run with /usr/bin/python3 (the distribution's, which has jwt). Reads one JSON object on stdin and
writes one on stdout.

  verify     {"token": "<delegation>~<token>", "jwks": {...}}
             Verifies the delegation under the JWKS key its kid names and the token under the
             delegation's cnf.jwk, with PyJWT; recomputes the RFC 7638 thumbprint of every key.
  make       {"delegation": {claims without cnf}, "token": {claims}, "alg": "ES256" | "HS256"}
             Makes keys, a JWKS and a token with PyJWT, as another implementation would.
  hmac       {"secret": "<hex>", "machineID": "...", "userID": "..."}
             The shared user id: base64url(HMAC-SHA-256(secret, machineID + userID)).
"""

import base64
import hashlib
import hmac
import json
import sys

import jwt
from cryptography.hazmat.primitives.asymmetric import ec


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def thumbprint(jwk):
    canonical = json.dumps({k: jwk[k] for k in ("crv", "kty", "x", "y")}, separators=(",", ":"), sort_keys=True)
    return b64url(hashlib.sha256(canonical.encode()).digest())


def public_jwk(private_key):
    numbers = private_key.public_key().public_numbers()
    return {"kty": "EC", "crv": "P-256", "x": b64url(numbers.x.to_bytes(32, "big")),
            "y": b64url(numbers.y.to_bytes(32, "big"))}


def verify(request):
    delegation_text, token_text = request["token"].split("~")
    keys = jwt.PyJWKSet.from_dict(request["jwks"])
    header = jwt.get_unverified_header(delegation_text)
    by_kid = {key.key_id: key for key in keys.keys}
    issuer = by_kid[header["kid"]]
    delegation = jwt.decode(delegation_text, issuer.key, algorithms=["ES256"], options={"verify_aud": False})
    token_header = jwt.get_unverified_header(token_text)
    token_key = jwt.PyJWK(dict(delegation["cnf"]["jwk"]), algorithm="ES256")
    token = jwt.decode(token_text, token_key.key, algorithms=["ES256"], options={"verify_aud": False})
    return {
        "delegationHeader": header, "tokenHeader": token_header,
        "delegation": delegation, "token": token,
        "thumbprints": {key["kid"]: thumbprint(key) for key in request["jwks"]["keys"]},
        "cnfThumbprint": thumbprint(delegation["cnf"]["jwk"]),
    }


def make(request):
    issuer_key = ec.generate_private_key(ec.SECP256R1())
    token_key = ec.generate_private_key(ec.SECP256R1())
    issuer_jwk = public_jwk(issuer_key)
    kid = thumbprint(issuer_jwk)
    claims = dict(request["delegation"])
    claims["cnf"] = {"jwk": public_jwk(token_key)}
    delegation = jwt.encode(claims, issuer_key, algorithm="ES256", headers={"kid": kid, "typ": "dc-dlg+jwt"})
    if request.get("alg", "ES256") == "HS256":
        token = jwt.encode(request["token"], "a shared secret", algorithm="HS256", headers={"typ": "dc-auth+jwt"})
    else:
        token = jwt.encode(request["token"], token_key, algorithm="ES256", headers={"typ": "dc-auth+jwt"})
    return {"token": delegation + "~" + token, "jwks": {"keys": [dict(issuer_jwk, kid=kid, use="sig", alg="ES256")]}}


def shared_user_id(request):
    message = (request["machineID"] + request["userID"]).encode()
    return {"sharedUserID": b64url(hmac.new(bytes.fromhex(request["secret"]), message, hashlib.sha256).digest())}


command = sys.argv[1]
request = json.load(sys.stdin)
result = {"verify": verify, "make": make, "hmac": shared_user_id}[command](request)
json.dump(result, sys.stdout)
