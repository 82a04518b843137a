#!/usr/bin/env bash
# Token credential benchmark (issue 5): a four-tag credential (authentication, signing,
# encryption, escrow with one retired pair: 5 certificates, 5 keys) read from a SoftHSM2 token and
# converted to DER certificates and PKCS#8 DER keys, and a derived credential (SP 800-157) from a
# card whose keys cannot leave it — each against the peer tools doing the same in the same run,
# round-robin; and the PKCS#11 calls each costs (counted by the test-only wrapper module).
#
# Peers: pkcs11-tool 0.23 cannot read private keys ("sorry, reading private keys not (yet)
# supported") and p11tool cannot export them, so for the export path they read the 5 certificates
# only — less work than dcprovision's. The derive path's peer is the by-hand script: pkcs11-tool
# --sign of a challenge, openssl dgst -verify, then genpkey + req + x509 -req + pkcs8 per tag.
# Checks: the exported certificates byte-identical to pkcs11-tool's, the keys to openssl pkcs8
# -topk8 of the originals; the derived credential's certificates chain to the test CA (openssl
# verify), carry the card certificate's subject (as the by-hand script's do) and match their keys.
# Goals (docs/BENCHMARKS.md): derive faster than the by-hand script; export, the whole credential,
# in at most twice the time pkcs11-tool takes for the certificates alone (half its work).
# Needs a C compiler, libssl-dev, softhsm2, opensc, gnutls-bin, python3.
# SMOKE=1: the debug build, one round, the same checks (see Benchmarks/common.sh).
source "$(dirname "$0")/common.sh"
if [ "$smoke" = 1 ]; then rounds=${ROUNDS:-1}; else rounds=${ROUNDS:-10}; fi
machine
swift build --traits DemoCompanions,TLS --product DCFaultPKCS11 >/dev/null 2>&1
wrapper=$(swift build --traits DemoCompanions,TLS --show-bin-path)/libDCFaultPKCS11.so
build_products dcprovision
module=/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$cc" -O2 -o "$work/put-key" Benchmarks/put-key.c -lcrypto -ldl
softhsm_tokens "$work" Cred Card
printf '123456\n' > "$work/pin"
chmod 600 "$work/pin"
"$bin/dcprovision" testca init "$work/ca" >/dev/null

# A CA for the card certificates, and one key + certificate per slot.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/card-ca.key" -out "$work/card-ca.pem" \
  -subj "/O=Bench Card Issuer/CN=Card CA" -days 30 -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
issue() {  # id keyspec keyusage eku
  openssl genpkey $2 -out "$work/$1.key" 2>/dev/null
  openssl req -new -key "$work/$1.key" -subj "/O=Bench/CN=Card Holder" -out "$work/$1.csr"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,%s\nextendedKeyUsage=%s\n' "$3" "$4" > "$work/$1.ext"
  openssl x509 -req -in "$work/$1.csr" -CA "$work/card-ca.pem" -CAkey "$work/card-ca.key" -set_serial "0x$(openssl rand -hex 8)" \
    -days "$5" -sha256 -extfile "$work/$1.ext" -outform DER -out "$work/$1.der" 2>/dev/null
}
p256="-algorithm EC -pkeyopt ec_paramgen_curve:P-256"
issue 01 "$p256" digitalSignature "clientAuth,1.3.6.1.4.1.311.20.2.2" 30
issue 02 "-algorithm EC -pkeyopt ec_paramgen_curve:P-384" digitalSignature,nonRepudiation emailProtection 30
issue 03 "-algorithm RSA -pkeyopt rsa_keygen_bits:2048" keyEncipherment emailProtection 30
issue 05 "$p256" keyAgreement emailProtection 10
issue 06 "$p256" keyAgreement emailProtection 20
for id in 01 02 03 05 06; do
  pkcs11-tool --module $module --token-label Cred --login --pin 123456 --write-object "$work/$id.der" --type cert --id $id --label "cert $id" >/dev/null 2>&1
  "$work/put-key" $module Cred 123456 $id "$work/$id.key"
done
for id in 01 02 03; do  # the card: keys written by pkcs11-tool, sensitive and not extractable
  pkcs11-tool --module $module --token-label Card --login --pin 123456 --write-object "$work/$id.der" --type cert --id $id --label "cert $id" >/dev/null 2>&1
  pkcs11-tool --module $module --token-label Card --login --pin 123456 --write-object "$work/$id.key" --type privkey --id $id --label "key $id" >/dev/null 2>&1
done

cat > "$work/pkcs11-tool-certs.sh" <<SCRIPT
#!/usr/bin/env bash
set -e
for id in 01 02 03 05 06; do pkcs11-tool --module \$1 --token-label Cred --read-object --type cert --id \$id -o $work/out-tool/\$id.der 2>/dev/null; done
SCRIPT
cat > "$work/p11tool-certs.sh" <<SCRIPT
#!/usr/bin/env bash
set -e
for id in 01 02 03 05 06; do p11tool --provider \$1 --export "pkcs11:token=Cred;type=cert;id=%\$id" --outder --outfile $work/out-p11tool/\$id.der 2>/dev/null; done
SCRIPT
cat > "$work/by-hand-derive.sh" <<SCRIPT
#!/usr/bin/env bash
# Prove possession with the card, then one new key and certificate per tag from the test CA.
set -e
d=$work/out-hand; m=\$1
head -c 32 /dev/urandom > \$d/challenge
openssl dgst -sha256 -binary \$d/challenge > \$d/digest  # SoftHSM, like many cards, has CKM_ECDSA but not CKM_ECDSA_SHA256
pkcs11-tool --module \$m --token-label Card --login --pin 123456 --sign --mechanism ECDSA --signature-format openssl --id 01 -i \$d/digest -o \$d/signature 2>/dev/null
openssl x509 -inform DER -in $work/01.der -pubkey -noout > \$d/card.pub
openssl dgst -sha256 -verify \$d/card.pub -signature \$d/signature \$d/challenge >/dev/null
subject=\$(openssl x509 -inform DER -in $work/01.der -noout -subject -nameopt compat | sed 's/^subject=//')
for tag in authentication signing encryption; do
  case \$tag in authentication) ku=digitalSignature;; signing) ku=digitalSignature,nonRepudiation;; encryption) ku=keyAgreement;; esac
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,%s\n' \$ku > \$d/\$tag.ext
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out \$d/\$tag.key
  openssl req -new -key \$d/\$tag.key -subj "\$subject" -out \$d/\$tag.csr
  openssl x509 -req -in \$d/\$tag.csr -CA $work/ca/issuing.pem -CAkey $work/ca/issuing.key -set_serial 0x\$(openssl rand -hex 16) -days 365 -sha256 -extfile \$d/\$tag.ext -outform DER -out \$d/\$tag.der 2>/dev/null
  openssl pkcs8 -topk8 -nocrypt -in \$d/\$tag.key -outform DER -out \$d/\$tag.key.der
done
SCRIPT
chmod +x "$work"/*.sh
prepare="rm -rf $work/out-*; mkdir -p $work/out-tool $work/out-p11tool $work/out-hand"
dc="$bin/dcprovision convert --pin-file $work/pin"

echo "== Export path: a four-tag credential (5 certificates, 5 keys) from the token to DER + PKCS#8 DER"
python3 Benchmarks/interleave.py "$rounds" "$prepare" \
  "dcprovision=$dc --pkcs11 pkcs11:token=Cred --layout piv --module $module --out-dir $work/out-dc" \
  "pkcs11-tool=$work/pkcs11-tool-certs.sh $module" \
  "p11tool=$work/p11tool-certs.sh $module" | tee "$work/export-times" | head -n -1
eval "$prepare"
$dc --pkcs11 pkcs11:token=Cred --layout piv --module $module --out-dir "$work/out-dc" >/dev/null
"$work/pkcs11-tool-certs.sh" $module
ls "$work/out-dc"
for id in 01:authentication 02:signing 03:encryption 06:escrow 05:escrow-history-1; do
  cmp -s "$work/out-tool/${id%%:*}.der" "$work/out-dc/${id##*:}.cert.der" ||
    { echo "the ${id##*:} certificate differs from pkcs11-tool's (id ${id%%:*})" >&2; exit 1; }
  openssl pkcs8 -topk8 -nocrypt -in "$work/${id%%:*}.key" -outform DER | cmp -s - "$work/out-dc/${id##*:}.key.der" ||
    { echo "the ${id##*:} key differs from openssl pkcs8 -topk8 of the original (id ${id%%:*})" >&2; exit 1; }
done
echo "certificates byte-identical to pkcs11-tool's, keys to openssl pkcs8 -topk8 of the originals"

echo "== Derive path (SP 800-157): prove possession on the card, three new P-256 keys certified by the test CA"
python3 Benchmarks/interleave.py "$rounds" "$prepare" \
  "dcprovision=$dc --pkcs11 pkcs11:token=Card --layout piv --derive --testca $work/ca --card-trust-anchor $work/card-ca.pem --allow-unchecked-revocation --key-algorithm p256 --module $module --out-dir $work/out-dc" \
  "by-hand=$work/by-hand-derive.sh $module" | tee "$work/derive-times" | head -n -1
# The derived credential: each certificate chains to the test CA, names the card certificate's
# subject (the by-hand script's certificates do) and certifies the key written beside it.
eval "$prepare"
$dc --pkcs11 pkcs11:token=Card --layout piv --derive --testca "$work/ca" --card-trust-anchor "$work/card-ca.pem" \
  --allow-unchecked-revocation --key-algorithm p256 --module $module --out-dir "$work/out-dc" >/dev/null 2>&1 ||
  { echo "dcprovision convert --derive failed" >&2; exit 1; }
"$work/by-hand-derive.sh" $module || { echo "the by-hand derive script failed" >&2; exit 1; }
card_subject() { openssl x509 "$@" -noout -subject -nameopt compat; }
anchor=(-CAfile "$work/ca/root.pem" -untrusted "$work/ca/issuing.pem")
for tag in authentication signing encryption; do
  cert=$work/out-dc/$tag.cert.der
  [ -f "$cert" ] && [ -f "$work/out-dc/$tag.key.der" ] || { echo "the derived credential has no $tag certificate and key" >&2; exit 1; }
  openssl verify "${anchor[@]}" <(openssl x509 -inform DER -in "$cert") >/dev/null ||
    { echo "the derived $tag certificate does not chain to the test CA" >&2; exit 1; }
  [ "$(card_subject -inform DER -in "$cert")" = "$(card_subject -inform DER -in "$work/out-hand/$tag.der")" ] ||
    { echo "the derived $tag certificate's subject differs from the by-hand script's (the card's)" >&2; exit 1; }
  [ "$(openssl x509 -inform DER -in "$cert" -noout -pubkey)" = "$(openssl pkey -inform DER -in "$work/out-dc/$tag.key.der" -pubout)" ] ||
    { echo "the derived $tag key does not match its certificate" >&2; exit 1; }
done
echo "derived certificates chain to the test CA, name the card's subject as the by-hand script's do, and match their keys"

count() { awk '{ total += $2 } END { print total }' "$@"; }
eval "$prepare"
DC_FAULT_CALL_LOG=$work/calls-export $dc --pkcs11 pkcs11:token=Cred --layout piv --module "$wrapper" --out-dir "$work/out-dc" >/dev/null
DC_FAULT_CALL_LOG=$work/calls-derive $dc --pkcs11 pkcs11:token=Card --layout piv --derive --testca "$work/ca" --card-trust-anchor "$work/card-ca.pem" --allow-unchecked-revocation --module "$wrapper" --out-dir "$work/out-dc2" >/dev/null
for id in 01 02 03 05 06; do
  DC_FAULT_CALL_LOG=$work/calls-tool-$id pkcs11-tool --module "$wrapper" --token-label Cred --read-object --type cert --id $id -o "$work/out-tool/$id.der" 2>/dev/null
  DC_FAULT_CALL_LOG=$work/calls-p11tool-$id p11tool --provider "$wrapper" --export "pkcs11:token=Cred;type=cert;id=%$id" --outder --outfile "$work/out-p11tool/$id.der" 2>/dev/null
done
DC_FAULT_CALL_LOG=$work/calls-sign pkcs11-tool --module "$wrapper" --token-label Card --login --pin 123456 --sign --mechanism ECDSA --id 01  -i <(head -c 32 /dev/urandom) -o "$work/sig" 2>/dev/null
echo "PKCS#11 calls (token-facing functions counted by the wrapper):"
echo "  export, whole credential: dcprovision $(count "$work/calls-export");  certificates only: pkcs11-tool $(count "$work"/calls-tool-*), p11tool $(count "$work"/calls-p11tool-*)"
echo "  derive: dcprovision $(count "$work/calls-derive") (whole job);  pkcs11-tool --sign alone: $(count "$work/calls-sign")"
echo "dcprovision export:"; sed 's/^/  /' "$work/calls-export"
echo "dcprovision derive:"; sed 's/^/  /' "$work/calls-derive"

ratios=$(python3 - "$work/export-times" "$work/derive-times" <<'PY'
import json, sys
export, derive = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:])
print("%.2f %.2f %.2f" % (export["pkcs11-tool"]["wall"] / export["dcprovision"]["wall"],
                          export["p11tool"]["wall"] / export["dcprovision"]["wall"],
                          derive["by-hand"]["wall"] / derive["dcprovision"]["wall"]))
PY
)
read -r export_tool export_p11tool derive_hand <<<"$ratios"
echo "export (whole credential against certificates only): pkcs11-tool / dcprovision ${export_tool}x, p11tool / dcprovision ${export_p11tool}x, wall"
goal "export: pkcs11-tool (certificates only) / dcprovision (whole credential), wall" "$export_tool" ">=" 0.5
goal "derive: by-hand script / dcprovision, wall (faster than the by-hand script)" "$derive_hand" ">" 1
