#!/usr/bin/env bash
# Regenerates the sample credential in this folder with the openssl CLI: a sample CA and a
# four-tag derived credential (escrow with one retired pair) following the FPKI derived-PIV
# profiles. These keys are PUBLIC SAMPLES: never trust this CA or use these keys for anything.
set -euo pipefail
cd "$(dirname "$0")"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/ca.key"
openssl req -x509 -new -key "$work/ca.key" -subj "/O=Derived Credentials Sample/CN=Sample Root CA (do not trust)" \
  -days 3650 -sha256 -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
  -out ca.pem

issue() { # name keyspec keyUsage eku
  local name=$1 spec=$2 ku=$3 eku=$4
  openssl genpkey $spec -out "$work/$name.key"
  openssl req -new -key "$work/$name.key" -subj "/O=Derived Credentials Sample/CN=Alice Example ($name)" -out "$work/$name.csr"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,%s\nextendedKeyUsage=%s\nsubjectAltName=email:alice@example.com\n' \
    "$ku" "$eku" > "$work/$name.ext"
  openssl x509 -req -in "$work/$name.csr" -CA ca.pem -CAkey "$work/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days 3650 -sha256 -extfile "$work/$name.ext" -out "$work/$name.crt" 2>/dev/null
  cat "$work/$name.crt" "$work/$name.key" > "$name.pem"
}
P256="-algorithm EC -pkeyopt ec_paramgen_curve:P-256"
issue authentication "$P256" digitalSignature "clientAuth,1.3.6.1.4.1.311.20.2.2"
issue signing "$P256" digitalSignature,nonRepudiation emailProtection
issue encryption "-algorithm RSA -pkeyopt rsa_keygen_bits:2048" keyEncipherment emailProtection
issue escrow "$P256" keyAgreement emailProtection
issue escrow-retired "$P256" keyAgreement emailProtection
echo "sample credential written to $(pwd)"
