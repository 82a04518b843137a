#!/usr/bin/env bash
# Token listing benchmark (issue 5): list the certificates of a SoftHSM2 token holding 50 of them,
# with dcprovision objects (release build), pkcs11-tool -O and p11tool --list-all-certs, round-robin;
# and the number of PKCS#11 calls dcprovision makes (counted by the test-only wrapper module).
# SMOKE=1: the debug build, 5 certificates, one round (see Benchmarks/common.sh).
source "$(dirname "$0")/common.sh"
if [ "$smoke" = 1 ]; then certificates=5 rounds=1; else certificates=50 rounds=15; fi
machine
swift build --traits DemoCompanions,TLS --product DCFaultPKCS11 >/dev/null 2>&1
wrapper=$(swift build --traits DemoCompanions,TLS --show-bin-path)/libDCFaultPKCS11.so
build_products dcprovision
module=/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
softhsm_tokens "$work" Bench
for i in $(seq -w 1 "$certificates"); do
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout /dev/null -subj "/CN=Bench $i" -days 30 -outform DER -out "$work/c.der" 2>/dev/null
  pkcs11-tool --module $module --token-label Bench --login --pin 123456 --write-object "$work/c.der" --type cert --id "$(printf '%02x' $((10#$i)))" --label "cert $i" >/dev/null 2>&1
done
# With BEFORE (see common.sh), the earlier build lists in the same rounds.
earlier=()
[ -z "$before" ] || earlier=("before=$before/dcprovision objects 'pkcs11:token=Bench;type=cert' --module $module")
python3 Benchmarks/interleave.py "$rounds" "true" \
  "dcprovision=$bin/dcprovision objects 'pkcs11:token=Bench;type=cert' --module $module" "${earlier[@]}" \
  "pkcs11-tool=pkcs11-tool --module $module --token-label Bench -O --type cert" \
  "p11tool=p11tool --provider $module --list-all-certs 'pkcs11:token=Bench'" | tee "$work/times" | head -n -1
[ -z "$before" ] || speedup "$work/times" before dcprovision "dcprovision objects, $certificates certificates"
# The same certificates as pkcs11-tool lists: (id, label, subject) for each, in the same order.
"$bin/dcprovision" objects 'pkcs11:token=Bench;type=cert' --module $module |
  sed -n 's/^certificate  id \([0-9a-f]*\)  "\(.*\)"  .*/\1 \2/p; s/^    subject: \(.*\)/\1/p' | paste - - >"$work/ours"
pkcs11-tool --module $module --token-label Bench -O --type cert 2>/dev/null |
  sed -n 's/^  label: *//p; s/^  subject: *DN: //p; s/^  ID: *//p' | paste - - - |
  awk -F'\t' '{ print $3 " " $1 "\t" $2 }' >"$work/theirs"
diff "$work/ours" "$work/theirs" >&2 || { echo "dcprovision's listing differs from pkcs11-tool's" >&2; exit 1; }
echo "dcprovision lists the same $(wc -l <"$work/ours") certificates as pkcs11-tool (id, label, subject, in order)"
# The counting wrapper is itself a PKCS#11 module, so every tool can be counted the same way.
count() { awk '{ total += $2 } END { print total }' "$1"; }
DC_FAULT_CALL_LOG=$work/calls-dc "$bin/dcprovision" objects 'pkcs11:token=Bench;type=cert' --module "$wrapper" >/dev/null
DC_FAULT_CALL_LOG=$work/calls-tool pkcs11-tool --module "$wrapper" --token-label Bench -O --type cert >/dev/null 2>&1
DC_FAULT_CALL_LOG=$work/calls-p11tool p11tool --provider "$wrapper" --list-all-certs 'pkcs11:token=Bench' >/dev/null 2>&1
echo "PKCS#11 calls for the listing (token-facing functions): dcprovision $(count "$work/calls-dc"), pkcs11-tool $(count "$work/calls-tool"), p11tool $(count "$work/calls-p11tool")"
echo "dcprovision's:"; sed 's/^/  /' "$work/calls-dc"
echo "pkcs11-tool's:"; sed 's/^/  /' "$work/calls-tool"
[ "$(count "$work/calls-dc")" -le 59 ] || { echo "dcprovision made more PKCS#11 calls than the 59 of issue 5" >&2; exit 1; }
ratio=$(tail -n 1 "$work/times" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("%.2f" % (r["pkcs11-tool"]["wall"] / r["dcprovision"]["wall"]))')
goal "pkcs11-tool / dcprovision, wall (faster than pkcs11-tool)" "$ratio" ">" 1
