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
# Goals (docs/BENCHMARKS.md): peak memory <= 32 MiB for a write and a read, a read and a write at
# least half of cat's speed.
# Needs python3, openssl and /usr/bin/time (Debian package `time`).
# SMOKE=1: the debug build, 4 MiB, one round, the same checks; openssl's round trip is checked
# too (see Benchmarks/common.sh).
source "$(dirname "$0")/common.sh"
if [ "$smoke" = 1 ]; then ROUNDS=${ROUNDS:-1} SIZE_MIB=${SIZE_MIB:-4}; else ROUNDS=${ROUNDS:-5} SIZE_MIB=${SIZE_MIB:-1024}; fi
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time: apt-get install time" >&2; exit 1; }
# The client keeps its unlocked store key in the session keyring: the run gets a keyring session
# of its own.
[ -n "${SECURE_FILES_KEYRING:-}" ] || exec env SECURE_FILES_KEYRING=1 keyctl session - bash "$PWD/Benchmarks/run-secure-files.sh" "$@"
machine
build_products dcbench dcprovision dcclient
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sandbox "$work"
# The client set up through the command line, paired and authorized (a secure file needs the
# provider's policy), unlocked with the passphrase.
{
  "$bin/dcprovision" testca init "$work/ca"
  "$bin/dcclient" init --client-scheme org.example.dcclient --provider-scheme org.example.provider --passphrase-file "$work/pass"
  "$bin/dcclient" register
  "$bin/dcprovision" register --provider-scheme org.example.provider --brand Bench --testca "$work/ca"
  "$bin/dcprovision" pair --client-scheme org.example.dcclient
  "$bin/dcprovision" authorize --client-scheme org.example.dcclient
} > "$work/setup.log" 2>&1 || { cat "$work/setup.log" >&2; exit 1; }

head -c "${SIZE_MIB}M" /dev/urandom > "$work/input"
key=$(openssl rand -hex 32) iv=$(openssl rand -hex 16)
openssl enc -aes-256-ctr -K "$key" -iv "$iv" -in "$work/input" -out "$work/input.enc"
"$dcbench" secure-files write bench < "$work/input"

t() { echo "/usr/bin/time -v -a -o $work/rss-$1"; }
python3 Benchmarks/interleave.py "$ROUNDS" "sync; rm -f $work/out" \
  "ours-write=$(t ours-write) $dcbench secure-files write bench < $work/input" \
  "ours-read=$(t ours-read) $dcbench secure-files read bench > $work/out" \
  "cat=$(t cat) cat $work/input > $work/out" \
  "dd-fsync=$(t dd-fsync) dd if=$work/input of=$work/out bs=64K conv=fsync status=none" \
  "openssl-enc=$(t openssl-enc) openssl enc -aes-256-ctr -K $key -iv $iv -in $work/input -out $work/out" \
  "openssl-dec=$(t openssl-dec) openssl enc -d -aes-256-ctr -K $key -iv $iv -in $work/input.enc -out $work/out" \
  | tee "$work/times"

# The last command of the rounds was openssl-dec: the peer's round trip must give the input back too.
cmp -s "$work/input" "$work/out" || { echo "openssl enc -d's output differs from the input" >&2; exit 1; }
"$dcbench" secure-files read bench > "$work/out"
cmp -s "$work/input" "$work/out" || { echo "the secure file read back differs from the input" >&2; exit 1; }
echo "read output is byte-identical to the input (as openssl enc -d's is)"
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
open(f"{work}/goals", "w").write(" ".join(
    f"{rss[name][1]:.1f} {times['cat']['wall'] / times[name]['wall']:.2f}" for name in ("ours-write", "ours-read")) + "\n")
PY
read -r write_rss write_speed read_rss read_speed < "$work/goals"
goal "ours-write peak RSS, MiB" "$write_rss" "<=" 32
goal "ours-read peak RSS, MiB" "$read_rss" "<=" 32
goal "ours-write, share of cat's speed (durable: bound by the disk)" "$write_speed" ">=" 0.5
goal "ours-read, share of cat's speed" "$read_speed" ">=" 0.5
