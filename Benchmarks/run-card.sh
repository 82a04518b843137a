#!/usr/bin/env bash
# The card path on a PIV card behind a real pcscd (issue 31): our virtual PIV card
# (Tests/VirtualPIVCard) in a vpcd reader, OpenSC's PIV driver, keys made on the card. Each job is
# timed against pkcs11-tool doing the same work on the same card in the same rounds, and counted in
# APDUs (the card's own counter): listing the certificates, logging in and signing once, and a
# whole SP 800-157 derivation (our one command; for pkcs11-tool the card's part of it: the listing,
# the login and the signature — the CA's and the new keys' work has no card in it).
# SMOKE=1: the debug build, one round (see Benchmarks/common.sh). Needs root or user namespaces.
source "$(dirname "$0")/common.sh"
if [ "$smoke" = 1 ]; then rounds=1; else rounds=10; fi
machine
build_products dcprovision
opensc=/usr/lib/x86_64-linux-gnu/opensc-pkcs11.so
card=Tests/VirtualPIVCard/virtual-card
work=$(mktemp -d)
trap '"$card" stop "$work/cards" >/dev/null 2>&1; rm -rf "$work"' EXIT
export HOME=$work
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/ca.key" -out "$work/ca.pem" \
  -subj "/O=Derived Credentials Test/CN=Bench Card Issuer" -days 30 \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
"$card" start "$work/cards" >/dev/null
"$card" provision "$work/cards" --ca-cert "$work/ca.pem" --ca-key "$work/ca.key" >/dev/null
export PCSCLITE_CSOCK_NAME=$work/cards/run/pcscd/pcscd.comm
# The card's throw-away PIN: a file for dcprovision; pkcs11-tool takes it only on its command line.
printf '123456\n' >"$work/pin"; chmod 600 "$work/pin"
"$bin/dcprovision" testca init "$work/ca-derive" >/dev/null
# The CRL of the card's issuer, for the derivation's revocation check.
mkdir -p "$work/crl"; : >"$work/crl/index.txt"
printf '[ca]\ndefault_ca=d\n[d]\ndatabase=%s/crl/index.txt\ndefault_md=sha256\ncrlnumber=%s/crl/number\n' "$work" "$work" >"$work/crl.cnf"
echo 01 >"$work/crl/number"
openssl ca -gencrl -config "$work/crl.cnf" -keyfile "$work/ca.key" -cert "$work/ca.pem" -crldays 7 -out "$work/ca.crl" 2>/dev/null
echo hello >"$work/data"

list_ours="$bin/dcprovision objects 'pkcs11:manufacturer=piv_II;type=cert'"
# dcprovision as a user runs it loads every module p11-kit registers (on the machines measured:
# OpenSC, p11-kit-trust, SoftHSM2); the same with OpenSC's module alone is timed too.
list_ours_opensc="$list_ours --module $opensc"
list_theirs="pkcs11-tool --module $opensc -O --type cert"
sign_theirs="pkcs11-tool --module $opensc --login --pin 123456 --sign --id 01 -m ECDSA-SHA256 -i $work/data -o $work/sig"
derive_ours="$bin/dcprovision convert --pkcs11 pkcs11:manufacturer=piv_II --layout piv --derive --testca $work/ca-derive --card-trust-anchor $work/ca.pem --crl $work/ca.crl --pin-file $work/pin --out-dir $work/out --force"
derive_theirs="$list_theirs >/dev/null && $sign_theirs"

python3 Benchmarks/interleave.py "$rounds" "true" \
  "dcprovision objects=$list_ours" "dcprovision objects --module opensc=$list_ours_opensc" \
  "pkcs11-tool -O=$list_theirs" \
  "dcprovision --derive=$derive_ours" "pkcs11-tool -O, --login --sign=$derive_theirs" \
  "pkcs11-tool --login --sign=$sign_theirs" | tee "$work/times" | head -n -1

# APDUs each job sends, from the card's own counter, each from a card whose PIN is not verified:
# a card keeps its PIN verified after a program ends (neither tool's job ends with an APDU that
# logs the card out, and pcscd does not reset it), so a job would otherwise start from whatever
# the one before it left.
apdus() { # NAME COMMAND: prints "NAME: TOTAL (INS n, …)" and sets apdus_total
  opensc-tool -s 00:20:FF:80 >/dev/null 2>&1 || { echo "could not log the card out" >&2; exit 1; }
  "$card" control "$work/cards" 1 reset-stats >/dev/null
  bash -c "$2" >/dev/null 2>"$work/stderr" || { cat "$work/stderr" >&2; echo "failed: $2" >&2; exit 1; }
  "$card" control "$work/cards" 1 stats >"$work/stats"
  python3 - "$1" "$work/stats" <<'PY'
import json, sys
s = json.loads(open(sys.argv[2]).read().strip())
print(f"APDUs, {sys.argv[1]}: {s['total']} (" + ", ".join(f"{k} {v}" for k, v in s["by_ins"].items()) + ")")
PY
  apdus_total=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().strip())["total"])' "$work/stats")
}
apdus "dcprovision objects (listing)" "$list_ours"; ours_list=$apdus_total
apdus "pkcs11-tool -O --type cert (listing)" "$list_theirs"; theirs_list=$apdus_total
apdus "dcprovision --derive (whole derivation)" "$derive_ours"; ours_derive=$apdus_total
apdus "pkcs11-tool --login --sign (one signature)" "$sign_theirs"; theirs_sign=$apdus_total
echo "APDUs, pkcs11-tool's card part of a derivation (-O, then --login --sign): $((theirs_list + theirs_sign))"
# The same certificates as pkcs11-tool lists, (id, label) in the same order, and as many as the
# card was given.
bash -c "$list_ours" | sed -n 's/^certificate  id \([0-9a-f]*\)  "\(.*\)"  .*/\1 \2/p' >"$work/ours"
bash -c "$list_theirs" 2>/dev/null | sed -n 's/^  label: *//p; s/^  ID: *//p' | paste - - | awk -F'\t' '{ print $2 " " $1 }' >"$work/theirs"
diff "$work/ours" "$work/theirs" >&2 || { echo "dcprovision's listing differs from pkcs11-tool's" >&2; exit 1; }
provisioned=$(ls "$work"/cards/card-1.*.pem | wc -l)
[ "$(wc -l <"$work/ours")" = "$provisioned" ] || { echo "the listing shows $(wc -l <"$work/ours") certificates, the card holds $provisioned" >&2; exit 1; }
echo "dcprovision lists the same $provisioned certificates as pkcs11-tool (id, label, in order)"
goal "APDUs for the listing, dcprovision / pkcs11-tool (fewer than OpenSC's own tool)" \
  "$(python3 -c "print('%.2f' % ($ours_list / $theirs_list))")" "<" 1
