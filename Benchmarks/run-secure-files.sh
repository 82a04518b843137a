#!/usr/bin/env bash
# Secure files benchmark: a 1 GiB file of random bytes written into a secure file and read back
# out (dcbench secure-files write|read: ManagedClient.secureFiles streaming 64 KiB AES-256-GCM
# chunks from and to a descriptor, release build), against the same bytes copied by cat and
# encrypted / decrypted by openssl enc -aes-256-ctr, all on the same disk (a temporary directory),
# round-robin, ROUNDS (5) rounds; median wall time, throughput and the ratios, and the peak resident
# memory of every command (/usr/bin/time -v, "Maximum resident set size"). The read's output must be
# byte-identical to the input, else the script fails.
# Caching: nothing is dropped from the page cache (that needs privileges and would disturb the
# other jobs on a shared machine). The input is made just before and is read warm from the page
# cache by every command; before each command the script runs `sync`, so that no command pays for
# the writeback of the previous one's output. cat and openssl leave their output dirty in the page
# cache; a secure-file write fsyncs its file and directory before it returns (it is durable), so
# `dd conv=fsync` (a copy that fsyncs once at the end) is reported as well.
# Needs python3, openssl and /usr/bin/time (Debian package `time`).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
SIZE_MIB=${SIZE_MIB:-1024}
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time: apt-get install time" >&2; exit 1; }
swift build -c release --product dcbench >/dev/null
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -m 0700 "$work/home" "$work/run"
export HOME=$work/home XDG_RUNTIME_DIR=$work/run XDG_DATA_HOME=$work/home/.local/share \
  XDG_CONFIG_HOME=$work/home/.config XDG_DATA_DIRS=$work/share XDG_CONFIG_DIRS=$work/etc
"$bin/dcbench" secure-files init

head -c "${SIZE_MIB}M" /dev/urandom > "$work/input"
key=$(openssl rand -hex 32) iv=$(openssl rand -hex 16)
openssl enc -aes-256-ctr -K "$key" -iv "$iv" -in "$work/input" -out "$work/input.enc"
"$bin/dcbench" secure-files write bench < "$work/input"

t() { echo "/usr/bin/time -v -a -o $work/rss-$1"; }
python3 Benchmarks/interleave.py "$ROUNDS" "sync; rm -f $work/out" \
  "ours-write=$(t ours-write) $bin/dcbench secure-files write bench < $work/input" \
  "ours-read=$(t ours-read) $bin/dcbench secure-files read bench > $work/out" \
  "cat=$(t cat) cat $work/input > $work/out" \
  "dd-fsync=$(t dd-fsync) dd if=$work/input of=$work/out bs=64K conv=fsync status=none" \
  "openssl-enc=$(t openssl-enc) openssl enc -aes-256-ctr -K $key -iv $iv -in $work/input -out $work/out" \
  "openssl-dec=$(t openssl-dec) openssl enc -d -aes-256-ctr -K $key -iv $iv -in $work/input.enc -out $work/out" \
  | tee "$work/times"

"$bin/dcbench" secure-files read bench > "$work/out"
cmp "$work/input" "$work/out" && echo "read output is byte-identical to the input"
stored=$(find "$HOME" -path '*/store/files/*' -type f -printf '%s')
echo "secure file on disk: $stored bytes for $((SIZE_MIB * 1048576)) bytes of content"

python3 - "$work" "$SIZE_MIB" <<'PY'
import json, re, statistics, sys
work, mib = sys.argv[1], int(sys.argv[2])
times = json.loads(open(f"{work}/times").read().splitlines()[-1])
rss = {}
for name in times:
    kib = [int(v) for v in re.findall(r"Maximum resident set size \(kbytes\): (\d+)", open(f"{work}/rss-{name}").read())]
    rss[name] = (statistics.median(kib) / 1024, max(kib) / 1024)
print(f"\n{'command':12} {'wall':>9} {'MiB/s':>8} {'cpu':>9} {'peak RSS median / max':>24}")
for name, r in times.items():
    print(f"{name:12} {r['wall']:8.2f}s {mib / r['wall']:8.0f} {r['cpu']:8.2f}s {rss[name][0]:10.1f} / {rss[name][1]:.1f} MiB")
for ours, peer in [("ours-write", "cat"), ("ours-read", "cat"), ("ours-write", "dd-fsync"),
                   ("ours-write", "openssl-enc"), ("ours-read", "openssl-dec")]:
    print(f"{ours} / {peer}: {times[ours]['wall'] / times[peer]['wall']:.2f}x the time "
          f"({times[peer]['wall'] / times[ours]['wall']:.2f} of its speed)")
for name in ("ours-write", "ours-read"):
    speed = times["cat"]["wall"] / times[name]["wall"]
    print(f"{name}: peak RSS {rss[name][1]:.1f} MiB (target <= 32: {'met' if rss[name][1] <= 32 else 'MISSED'}), "
          f"{speed:.2f} of cat's speed (target >= 0.5: {'met' if speed >= 0.5 else 'MISSED'})")
PY
