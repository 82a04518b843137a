"""An independent peer for the auth token tests: PyJWT (Debian python3-jwt) and pyca/cryptography.

Run with /usr/bin/python3 (the distribution's, which has jwt). Reads one JSON object on stdin and
writes one on stdout.

  verify     {"token": "<delegation>~<token>", "jwks": {...}}
             Verifies the delegation under the JWKS key its kid names and the token under the
             delegation's cnf.jwk, with PyJWT; recomputes the RFC 7638 thumbprint of every key.
  make       {"delegation": {claims without cnf}, "token": {claims}, "alg": "ES256" | "HS256"}
             Makes keys, a JWKS and a token with PyJWT, as another implementation would; its ES256
             signatures are put in the low-S form (s <= n/2), as our rule asks of every signer.
  twin       {"jws": "<compact JWS>", "jwk": {"x": ..., "y": ...}}
             The high-S twin of a low-S ES256 JWS: the same r, s replaced by n - s (plain integer
             arithmetic on the P-256 order). Before answering, shows that the twin is a valid
             ES256 signature that differs from the original: pyca/cryptography's ECDSA verifies it
             and PyJWT decodes it under the key.
  hmac       {"secret": "<hex>", "machineID": "...", "userID": "..."}
             The shared user id: base64url(HMAC-SHA-256(secret, machineID + userID)).
  identity-verify
             {"token": "<identity JWT>", "jwk": {"x": ..., "y": ...}, "audience": ..., "issuer": ...}
             Verifies an identity JWT as a relying party would: PyJWT, ES256 only, under the key,
             with aud and iss checked and exp, iat, iss, sub and aud required; the kid must be the
             key's RFC 7638 thumbprint.
  identity-make
             {"claims": {...}}
             Makes a key and an identity JWT with PyJWT (header kid = the key's thumbprint, typ
             JWT), low-S as our rule asks; answers the token and the key's x and y.
"""

import base64
import hashlib
import hmac
import json
import sys

import jwt
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

# The order of the P-256 group (SEC 2, secp256r1), written out rather than taken from a library.
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def with_s(compact, choose):
    """compact with its signature's s replaced by choose(s)."""
    head, payload, signature = compact.split(".")
    raw = b64url_decode(signature)
    r, s = int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")
    return head + "." + payload + "." + b64url(r.to_bytes(32, "big") + choose(s).to_bytes(32, "big"))


def low_s(compact):
    return with_s(compact, lambda s: P256_ORDER - s if s > P256_ORDER // 2 else s)


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
    delegation = low_s(
        jwt.encode(claims, issuer_key, algorithm="ES256", headers={"kid": kid, "typ": "dc-dlg+jwt"}))
    if request.get("alg", "ES256") == "HS256":
        token = jwt.encode(request["token"], "a shared secret", algorithm="HS256", headers={"typ": "dc-auth+jwt"})
    else:
        token = low_s(jwt.encode(request["token"], token_key, algorithm="ES256", headers={"typ": "dc-auth+jwt"}))
    return {"token": delegation + "~" + token, "jwks": {"keys": [dict(issuer_jwk, kid=kid, use="sig", alg="ES256")]}}


def twin(request):
    original = request["jws"]
    x, y = (int.from_bytes(b64url_decode(request["jwk"][name]), "big") for name in ("x", "y"))
    public_key = ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
    raw = b64url_decode(original.split(".")[2])
    s = int.from_bytes(raw[32:], "big")
    if not 0 < s <= P256_ORDER // 2:
        raise SystemExit("the original signature is not low-S")
    made = with_s(original, lambda s: P256_ORDER - s)
    signing_input = made.rsplit(".", 1)[0].encode()
    twin_raw = b64url_decode(made.split(".")[2])
    twin_s = int.from_bytes(twin_raw[32:], "big")
    # Raises InvalidSignature unless (r, n - s) is a valid ECDSA P-256/SHA-256 signature.
    public_key.verify(
        encode_dss_signature(int.from_bytes(twin_raw[:32], "big"), twin_s), signing_input, ec.ECDSA(hashes.SHA256()))
    # PyJWT checks the signature only (no claim is looked at), as a JOSE peer would.
    payload = jwt.api_jws.decode(made, public_key, algorithms=["ES256"])
    return {"twin": made, "differs": made != original, "highS": twin_s > P256_ORDER // 2,
            "payload": payload.decode()}


def shared_user_id(request):
    message = (request["machineID"] + request["userID"]).encode()
    return {"sharedUserID": b64url(hmac.new(bytes.fromhex(request["secret"]), message, hashlib.sha256).digest())}


def identity_verify(request):
    x, y = (int.from_bytes(b64url_decode(request["jwk"][name]), "big") for name in ("x", "y"))
    public_key = ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
    header = jwt.get_unverified_header(request["token"])
    if header.get("kid") != thumbprint(dict(request["jwk"], kty="EC", crv="P-256")):
        raise SystemExit("the kid is not the key's thumbprint")
    claims = jwt.decode(
        request["token"], public_key, algorithms=["ES256"], audience=request["audience"], issuer=request["issuer"],
        options={"require": ["exp", "iat", "iss", "sub", "aud"]})
    return {"header": header, "claims": claims}


def identity_make(request):
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = public_jwk(key)
    token = low_s(jwt.encode(request["claims"], key, algorithm="ES256", headers={"kid": thumbprint(jwk), "typ": "JWT"}))
    return {"token": token, "x": jwk["x"], "y": jwk["y"]}


command = sys.argv[1]
request = json.load(sys.stdin)
result = {"verify": verify, "make": make, "twin": twin, "hmac": shared_user_id, "identity-verify": identity_verify,
          "identity-make": identity_make}[command](request)
json.dump(result, sys.stdout)
