#!/usr/bin/env bash
# Delivery benchmark (issue 4): the demo's round trip with cold processes, and N sequential
# deliveries (dcprovision send → dcclient handle-url → dcprovision handle-url result), and what the
# same three processes cost started bare. Checks that the delivery installed the credential.
# SMOKE=1: the debug build, one demo, 3 deliveries (see Benchmarks/common.sh).
source "$(dirname "$0")/common.sh"
machine
build_products dcprovision dcclient
if [ "$smoke" = 1 ]; then N=${N:-3} demos=1; else N=${N:-20} demos=5; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== demo (cold processes), $demos runs"
for i in $(seq 1 "$demos"); do "$bin/dcprovision" demo | grep -o "Done in .*"; done

echo "== $N sequential deliveries"
# A sandboxed client and provider, set up through the command line, inside a keyring session of
# their own (the client keeps its unlocked store key there).
sandbox "$work"
per=$(keyctl session - bash -euo pipefail -c '
work=$1 bin=$2 N=$3
"$bin/dcprovision" testca init "$work/ca" >/dev/null
"$bin/dcclient" init --client-scheme org.example.dcclient --provider-scheme org.example.dcprovision --passphrase-file "$work/pass" >/dev/null
"$bin/dcclient" register >/dev/null
"$bin/dcprovision" register --provider-scheme org.example.dcprovision --brand Bench --testca "$work/ca" >/dev/null
"$bin/dcprovision" pair --client-scheme org.example.dcclient >/dev/null
"$bin/dcprovision" testca issue "$work/ca" --out-dir "$work/cred" >/dev/null
send=("$bin/dcprovision" send --manifest "$work/cred/manifest.json" --brand Bench --provider-scheme org.example.dcprovision --client-scheme org.example.dcclient)
"${send[@]}" >/dev/null
"$bin/dcclient" list | grep -q "test CA" || { echo "the delivery did not install the credential" >&2; exit 1; }
start=$(date +%s.%N)
for i in $(seq 1 "$N"); do "${send[@]}" >/dev/null; done
end=$(date +%s.%N)
python3 -c "print(f\"{($end - $start) / $N * 1000:.1f}\")"
' _ "$work" "$bin" "$N")
echo "per delivery: $per ms (wall, 3 processes each)"

start=$(date +%s.%N)
for i in $(seq 1 "$N"); do "$bin/dcprovision" --version >/dev/null; "$bin/dcclient" --help >/dev/null; "$bin/dcprovision" --version >/dev/null; done
end=$(date +%s.%N)
launch=$(python3 -c "print(f'{($end - $start) / $N * 1000:.1f}')")
echo "process launches (the same 3 binaries started bare): $launch ms per delivery"

goal "one delivery, ms" "$per" "<=" 60
