#!/usr/bin/env bash
# Delivery benchmark (issue 4): the demo's round trip with cold processes, and N sequential
# deliveries (dcprovision send → dcclient handle-url → dcprovision handle-url result), with a
# breakdown: process launches (a bare start of each binary), fsync (counted with strace, timed
# per call), and the rest (crypto: issuing, sealing, opening, validating).
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product dcprovision >/dev/null
swift build -c release --product dcclient >/dev/null
bin=$(swift build -c release --show-bin-path)
N=${N:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== demo (cold processes), 5 runs"
for i in 1 2 3 4 5; do "$bin/dcprovision" demo | grep -o "Done in .*"; done

echo "== $N sequential deliveries"
export HOME=$work/home XDG_DATA_DIRS=$work/share XDG_CONFIG_DIRS=$work/etc
printf 'pass\n' > "$work/pass"
"$bin/dcprovision" testca init "$work/ca" >/dev/null
"$bin/dcclient" init --client-scheme org.example.dcclient --provider-scheme org.example.dcprovision --passphrase-file "$work/pass" >/dev/null
"$bin/dcclient" register >/dev/null
"$bin/dcprovision" register --provider-scheme org.example.dcprovision --brand Bench --testca "$work/ca" >/dev/null
"$bin/dcprovision" testca issue "$work/ca" --out-dir "$work/cred" >/dev/null
send=("$bin/dcprovision" send --manifest "$work/cred/manifest.json" --brand Bench --provider-scheme org.example.dcprovision --client-scheme org.example.dcclient)
start=$(date +%s.%N)
for i in $(seq 1 "$N"); do "${send[@]}" >/dev/null; done
end=$(date +%s.%N)
per=$(python3 -c "print(f'{($end - $start) / $N * 1000:.1f}')")
echo "per delivery: $per ms (wall, 3 processes each)"

start=$(date +%s.%N)
for i in $(seq 1 "$N"); do "$bin/dcprovision" --version >/dev/null; "$bin/dcclient" --help >/dev/null; "$bin/dcprovision" --version >/dev/null; done
end=$(date +%s.%N)
launch=$(python3 -c "print(f'{($end - $start) / $N * 1000:.1f}')")
echo "process launches (the same 3 binaries started bare): $launch ms per delivery"

strace -f -c -e trace=fsync -o "$work/strace.txt" "${send[@]}" >/dev/null
calls=$(awk '/fsync/ {print $4}' "$work/strace.txt")
python3 - "$work" <<'PY'
import os, sys, time
d = os.path.join(sys.argv[1], "fs")
os.mkdir(d)
t = time.perf_counter()
for i in range(50):
    fd = os.open(os.path.join(d, f"f{i}"), os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"x" * 2000); os.fsync(fd); os.close(fd)
print(f"one fsync of a small new file on this disk: {(time.perf_counter() - t) / 50 * 1000:.2f} ms")
PY
echo "fsync calls per delivery: $calls"
