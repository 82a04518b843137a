#!/usr/bin/env bash
# PKCS#11 module benchmark (issue 16): P-256 signatures through libdcclient-pkcs11.so against raw
# OpenSSL signing and against SoftHSM2, in the same run, everything measured on core 1 (taskset).
#
#   in-process: dcbench pkcs11-sign (release) holds a logged-in session and loops C_SignInit +
#               C_Sign (CKM_ECDSA over a 32-byte digest) for DURATION seconds, once with our module
#               and the installed credential's signing key, once with SoftHSM2 and a P-256 key it
#               generated; `openssl speed -seconds 5 ecdsap256` is raw OpenSSL signing on one core.
#   per process: pkcs11-tool --login --sign, COUNT times for each module: what a script pays per
#               signature (loading the module, C_Login, one signature). Our C_Login unlocks the
#               client's store with the passphrase (PBKDF2, 200 000 iterations), so that number is
#               the passphrase check, as it should be; SoftHSM2's PIN check is cheaper by design.
#
# dcbench and the tools are built as scripts/install builds them (release, --static-swift-stdlib),
# the module as scripts/install builds it (release, before it sets the RUNPATH to the runtime it
# installs beside it). The client is set up through the command line in a scratch HOME, as the
# README does, inside a `keyctl session` of its own. Environment: ROUNDS (3), DURATION (5), COUNT (20).
#
# Checks, in both modes: the signing certificate pkcs11-tool reads through the module is
# byte-identical to the installed credential's (dcclient show signing --pem); signatures made
# through the module with pkcs11-tool (CKM_ECDSA over the digest, CKM_ECDSA_SHA256 over a message)
# verify with openssl (pkeyutl -verify, dgst -sha256 -verify) under that certificate's key, as
# SoftHSM2's (CKM_ECDSA, the one it has) verify under its key. Goals (docs/BENCHMARKS.md): the
# module within 2x of raw OpenSSL per signature, in-process; faster than SoftHSM2 in-process.
# SMOKE=1: the debug builds (the module too), one round of 1 s, 2 runs per process, the same checks
# (see Benchmarks/common.sh).
source "$(dirname "$0")/common.sh"
if [ "$smoke" = 1 ]; then
  ROUNDS=${ROUNDS:-1} DURATION=${DURATION:-1} COUNT=${COUNT:-2} SPEED_SECONDS=1
else
  ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-5} COUNT=${COUNT:-20} SPEED_SECONDS=5
fi
machine

build_products dcbench dcprovision dcclient
# A shared library: built as scripts/install builds it, without --static-swift-stdlib (in smoke
# mode, the debug build).
if [ "$smoke" = 1 ]; then module_build=(--traits DemoCompanions,TLS); else module_build=(-c release --traits TLS); fi
swift build "${module_build[@]}" --product dcclient-pkcs11 >/dev/null 2>&1 || {
  swift build "${module_build[@]}" --product dcclient-pkcs11 >&2
  exit 1
}
module=$(swift build "${module_build[@]}" --show-bin-path)/libdcclient-pkcs11.so
softhsm=/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sandbox "$work"
export PATH="$bin:$PATH"
softhsm_tokens "$work" Bench
pkcs11-tool --module "$softhsm" --token-label Bench --login --pin 123456 --keypairgen --key-type EC:prime256v1 \
  --id 02 --label sign >/dev/null 2>&1
printf '123456\n' >"$work/softhsm.pin"
head -c 32 /dev/urandom >"$work/digest"
head -c 1000 /dev/urandom >"$work/message"

keyctl session - bash -euo pipefail -c '
work=$1 module=$2 softhsm=$3 bin=$4 ROUNDS=$5 DURATION=$6 COUNT=$7 SPEED_SECONDS=$8 dcbench=$9
bench_client "$work"
cd "$work/home"

# The module against the peers: the certificate as the client has it, signatures openssl verifies.
pass=$(cat "$work/pass")
fail() { echo "$*" >&2; exit 1; }
dcclient show signing --pem 2>/dev/null | openssl x509 -outform DER >"$work/signing.der" ||
  fail "dcclient show signing --pem does not give the installed signing certificate"
pkcs11-tool --module "$module" --token-label "dcclient bench" --login --pin "$pass" --read-object --type cert --id 02 \
  -o "$work/module-signing.der" >/dev/null 2>&1 || fail "pkcs11-tool cannot read the signing certificate through the module"
cmp -s "$work/signing.der" "$work/module-signing.der" ||
  fail "the signing certificate read through the module differs from the installed credential"
openssl x509 -inform DER -in "$work/signing.der" -noout -pubkey >"$work/module.pub"
pkcs11-tool --module "$softhsm" --token-label Bench --read-object --type pubkey --id 02 -o "$work/softhsm.pub.der" >/dev/null 2>&1 &&
  openssl pkey -pubin -inform DER -in "$work/softhsm.pub.der" -out "$work/softhsm.pub" ||
  fail "cannot read the public key of SoftHSM2 with pkcs11-tool"
signs() {  # name module token pin public-key [ECDSA-SHA256: SoftHSM2 has only CKM_ECDSA]
  pkcs11-tool --module "$2" --token-label "$3" --login --pin "$4" --sign --id 02 -m ECDSA --signature-format openssl \
    -i "$work/digest" -o "$work/raw.sig" >/dev/null 2>&1 || fail "$1: pkcs11-tool --sign -m ECDSA failed"
  openssl pkeyutl -verify -pubin -inkey "$5" -in "$work/digest" -sigfile "$work/raw.sig" >/dev/null ||
    fail "$1: the CKM_ECDSA signature does not verify with openssl pkeyutl -verify"
  [ "${6:-}" = ECDSA-SHA256 ] || return 0
  pkcs11-tool --module "$2" --token-label "$3" --login --pin "$4" --sign --id 02 -m ECDSA-SHA256 --signature-format openssl \
    -i "$work/message" -o "$work/sha256.sig" >/dev/null 2>&1 || fail "$1: pkcs11-tool --sign -m ECDSA-SHA256 failed"
  openssl dgst -sha256 -verify "$5" -signature "$work/sha256.sig" "$work/message" >/dev/null ||
    fail "$1: the CKM_ECDSA_SHA256 signature does not verify with openssl dgst -sha256 -verify"
}
signs "dcclient module" "$module" "dcclient bench" "$pass" "$work/module.pub" ECDSA-SHA256
signs "softhsm2" "$softhsm" Bench 123456 "$work/softhsm.pub"
echo "checks: the module gives the installed signing certificate byte for byte; its signatures (ECDSA, ECDSA-SHA256) verify with openssl, as the ECDSA one of SoftHSM2 does"

echo "date: $(date -u "+%Y-%m-%d %H:%M UTC")"
echo "cpu: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | xargs) ($(nproc) cores)"
echo "openssl: $(openssl version)"
echo "softhsm2: $(dpkg-query -W -f="\${Version}" softhsm2), opensc: $(dpkg-query -W -f="\${Version}" opensc)"
echo "load average at start: $(cut -d" " -f1-3 /proc/loadavg)"
echo "== $ROUNDS rounds, in-process, ${DURATION}s each, core 1"
for round in $(seq "$ROUNDS"); do
  speed=$(taskset -c 1 openssl speed -seconds "$SPEED_SECONDS" ecdsap256 2>/dev/null | awk "/256 bits ecdsa/ {print \$(NF-1)}")
  echo "  round$round  openssl speed ecdsap256: $speed sign/s"
  echo "  round$round  dcclient module: $(taskset -c 1 "$dcbench" pkcs11-sign "$module" "dcclient bench" 02 "$work/pass" "$DURATION")"
  echo "  round$round  softhsm2:        $(taskset -c 1 "$dcbench" pkcs11-sign "$softhsm" Bench 02 "$work/softhsm.pin" "$DURATION")"
done
echo "== per process: pkcs11-tool --login --sign, $COUNT times each, core 1"
per_process() {
  local name=$1 module=$2 token=$3 pin=$4
  local start end
  start=$(date +%s%N)
  for _ in $(seq "$COUNT"); do
    taskset -c 1 pkcs11-tool --module "$module" --token-label "$token" --login --pin "$pin" --sign --id 02 -m ECDSA \
      -i "$work/digest" -o "$work/signature" >/dev/null 2>&1
  done
  end=$(date +%s%N)
  echo "  $name: $(( (end - start) / COUNT / 1000 )) us per pkcs11-tool run"
}
per_process "dcclient module" "$module" "dcclient bench" "$(cat "$work/pass")"
per_process "softhsm2       " "$softhsm" Bench 123456
echo "load average at the end: $(cut -d" " -f1-3 /proc/loadavg)"
' bench "$work" "$module" "$softhsm" "$bin" "$ROUNDS" "$DURATION" "$COUNT" "$SPEED_SECONDS" "$dcbench" | tee "$work/results.txt"

python3 - "$work/results.txt" "$work/goals" <<'PY'
import re, statistics, sys
text = open(sys.argv[1]).read()
speed = [float(x) for x in re.findall(r"openssl speed ecdsap256: ([\d.]+) sign/s", text)]
ours = [float(x) for x in re.findall(r"dcclient module: ([\d.]+) signatures/s", text)]
soft = [float(x) for x in re.findall(r"softhsm2: +([\d.]+) signatures/s", text)]
ours_cpu = [float(x) for x in re.findall(r"dcclient module: [\d.]+ signatures/s, [\d.]+ us wall and ([\d.]+) us CPU", text)]
if speed and ours and soft:
    s, o, h = statistics.median(speed), statistics.median(ours), statistics.median(soft)
    print(f"\nMedians: openssl {s:.0f} sign/s ({1e6 / s:.1f} us), module {o:.0f}/s ({1e6 / o:.1f} us), softhsm2 {h:.0f}/s ({1e6 / h:.1f} us)")
    open(sys.argv[2], "w").write(f"{(1e6 / o) / (1e6 / s):.2f} {o / h:.2f}\n")
else:
    sys.exit("no rates in the results")
PY
read -r per_signature softhsm_ratio < "$work/goals"
goal "the module per signature / raw OpenSSL's, in-process" "$per_signature" "<=" 2
goal "the module's rate / SoftHSM2's, in-process (faster than SoftHSM2)" "$softhsm_ratio" ">" 1
