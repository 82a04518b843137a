#!/usr/bin/env bash
# Delivery benchmark (issues 4 and 17): the demo's round trip with cold processes, N sequential
# deliveries (dcprovision send → dcclient handle-url → dcprovision handle-url result) against what
# the same three processes cost started bare, and each tool's start (--version) against
# `openssl version`. Checks that the delivery installed the credential.
# SMOKE=1: the debug build, one demo, 3 deliveries, a few starts (see Benchmarks/common.sh).
# BEFORE=DIR: the earlier build's demo, deliveries and starts in the same rounds.
source "$(dirname "$0")/common.sh"
machine
build_products dcprovision dcclient dcverify
if [ "$smoke" = 1 ]; then N=${N:-3} demos=1 rounds=1 starts=3; else N=${N:-20} demos=5 rounds=3 starts=40; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== demo (every step a cold process), $demos rounds"
earlier=()
[ -z "$before" ] || earlier=("before=$before/dcprovision demo")
python3 Benchmarks/interleave.py "$demos" true "demo=$bin/dcprovision demo" "${earlier[@]}" | tee "$work/demo" | head -n -1
[ -z "$before" ] || speedup "$work/demo" before demo "dcprovision demo"

echo "== $N sequential deliveries, $rounds rounds"
# deliveries BIN: a sandboxed client and provider set up through BIN's command line, inside a
# keyring session of their own (the client keeps its unlocked store key there); prints the wall
# time of one delivery in ms, the mean of N.
deliveries() {
  rm -rf "$work/d" && mkdir -p "$work/d"
  (
    sandbox "$work/d"
    keyctl session - bash -euo pipefail -c '
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
' _ "$work/d" "$1" "$N"
  )
}
after_runs=() before_runs=()
for round in $(seq 1 "$rounds"); do
  after_runs+=("$(deliveries "$bin")")
  [ -z "$before" ] || before_runs+=("$(deliveries "$before")")
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
per=$(median "${after_runs[@]}")
echo "per delivery: $per ms (wall, 3 processes each; median of rounds: ${after_runs[*]})"
if [ -n "$before" ]; then
  was=$(median "${before_runs[@]}")
  echo "speed-up, one delivery: before $was ms, after $per ms: $(python3 -c "print(f'{$was / $per:.2f}')")x (wall, same rounds: ${before_runs[*]})"
fi

start=$(date +%s.%N)
for i in $(seq 1 "$N"); do "$bin/dcprovision" --version >/dev/null; "$bin/dcclient" --help >/dev/null; "$bin/dcprovision" --version >/dev/null; done
end=$(date +%s.%N)
launch=$(python3 -c "print(f'{($end - $start) / $N * 1000:.1f}')")
echo "process launches (the same 3 binaries started bare): $launch ms per delivery"

echo "== start (--version), $starts rounds"
earlier=()
[ -z "$before" ] || earlier=("before-dcprovision=$before/dcprovision --version" "before-dcclient=$before/dcclient --version")
python3 Benchmarks/interleave.py "$starts" true "dcprovision=$bin/dcprovision --version" \
  "dcclient=$bin/dcclient --version" "dcverify=$bin/dcverify --version" "${earlier[@]}" \
  "openssl=openssl version" | tee "$work/start" | head -n -1
if [ -n "$before" ]; then
  speedup "$work/start" before-dcprovision dcprovision "dcprovision --version"
  speedup "$work/start" before-dcclient dcclient "dcclient --version"
fi
slowest=$(tail -n 1 "$work/start" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("%.1f" % (max(r[t]["wall"] for t in ("dcprovision", "dcclient", "dcverify")) * 1000))')

goal "one delivery, ms" "$per" "<=" 60
goal "dcprovision demo, s" "$(tail -n 1 "$work/demo" | python3 -c 'import json, sys; print("%.3f" % json.load(sys.stdin)["demo"]["wall"])')" "<=" 0.5
goal "slowest tool's start (--version), ms" "$slowest" "<=" 12
