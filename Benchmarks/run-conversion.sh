#!/usr/bin/env bash
# Conversion benchmark (issue 2): 200 PEM key+certificate pairs (P-256) → DER certificates and
# PKCS#8 DER keys, three ways in the same run:
#   dcprovision  one `dcprovision convert` process (release build), strict checks, fsync'd atomic writes
#   openssl-cli  an `openssl x509` + `openssl pkcs8 -topk8` loop, one process per file (the peer tool)
#   floor        a C program making the same OpenSSL calls in a tight loop (with and without fsync)
# Needs a C compiler, libssl-dev and python3. Prints medians (wall and CPU) and the ratios, and
# checks that dcprovision's outputs are byte-identical to the openssl CLI's. SMOKE=1: the debug
# build, 10 pairs, one round, the byte-identical check (see Benchmarks/common.sh).
source "$(dirname "$0")/common.sh"
if [ "$smoke" = 1 ]; then pairs=${PAIRS:-10} fast_rounds=1 slow_rounds=1; else pairs=${PAIRS:-200} fast_rounds=15 slow_rounds=${OPENSSL_ROUNDS:-3}; fi
work=Benchmarks/work/conversion-$pairs
mkdir -p "$work/in"
machine

build_products dcprovision
bin=$bin/dcprovision
"$cc" -O2 -o "$work/conversion-floor" Benchmarks/conversion-floor.c -lcrypto

if [ "$(ls "$work/in" | wc -l)" -ne $((pairs * 2)) ]; then
  rm -f "$work"/in/*
  for i in $(seq -w 1 "$pairs"); do
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/in/pair-$i.key" \
      -out "$work/in/pair-$i.crt" -subj "/CN=Benchmark $i" -days 365 2>/dev/null
  done
fi

cat > "$work/openssl-loop.sh" <<'LOOP'
#!/usr/bin/env bash
set -e
in=$1 out=$2
for crt in "$in"/*.crt; do
  stem=$(basename "$crt" .crt)
  openssl x509 -in "$crt" -outform DER -out "$out/$stem.cert.der"
  openssl pkcs8 -topk8 -nocrypt -in "$in/$stem.key" -outform DER -out "$out/$stem.key.der"
done
LOOP
chmod +x "$work/openssl-loop.sh"

# Commands run round-robin (interleave.py), so the noise of a shared VM hits all of them alike.
# Each round writes into a fresh directory. The previous round's output is moved aside, not
# deleted, until the end: on ext4, creating 400 files right after deleting 400 makes the inode
# allocator skip the recently deleted inodes one by one (recently_deleted, find_inode_bit), ≈ 50 ms
# of kernel time per run that a conversion into a new directory does not otherwise pay.
mkdir -p "$work/trash"
trap 'rm -rf "$work/trash"' EXIT
prepare="mv $work/out $work/trash/\$(date +%s%N) 2>/dev/null; mkdir -p $work/out"
# With BEFORE (see common.sh), the earlier build converts in the same rounds.
earlier=()
[ -z "$before" ] || earlier=("before=$before/dcprovision convert $work/in/* --out-dir $work/out/x")
echo "== dcprovision vs the floor ($fast_rounds rounds)"
python3 Benchmarks/interleave.py "$fast_rounds" "$prepare" \
  "dcprovision=$bin convert $work/in/* --out-dir $work/out/x" "${earlier[@]}" \
  "floor=$work/conversion-floor $work/out $work/in/*" \
  "floor-fsync=$work/conversion-floor --fsync $work/out $work/in/*" | tee "$work/fast.txt" | head -n -1
[ -z "$before" ] || speedup "$work/fast.txt" before dcprovision "dcprovision convert, $pairs pairs"
echo "== dcprovision vs the openssl CLI loop ($slow_rounds rounds)"
python3 Benchmarks/interleave.py "$slow_rounds" "$prepare" \
  "dcprovision=$bin convert $work/in/* --out-dir $work/out/x" \
  "openssl-cli=$work/openssl-loop.sh $work/in $work/out" | tee "$work/slow.txt" | head -n -1

# The outputs must agree byte for byte.
rm -rf "$work/a" "$work/b" && mkdir -p "$work/a" "$work/b"
"$bin" convert "$work"/in/* --out-dir "$work/a" >/dev/null
"$work/openssl-loop.sh" "$work/in" "$work/b"
diff -r "$work/a" "$work/b" || { echo "the outputs differ from the openssl CLI's" >&2; exit 1; }
[ "$(ls "$work/a" | wc -l)" -eq $((pairs * 2)) ] || { echo "expected $((pairs * 2)) outputs" >&2; exit 1; }
echo "outputs byte-identical to the openssl CLI's ($((pairs * 2)) files)"

read -r cli_wall cli_cpu floor_wall floor_cpu < <(python3 - "$work/fast.txt" "$work/slow.txt" <<'PY'
import json, sys
fast, slow = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:])
print(slow['openssl-cli']['wall'] / slow['dcprovision']['wall'], slow['openssl-cli']['cpu'] / slow['dcprovision']['cpu'],
      fast['dcprovision']['wall'] / fast['floor-fsync']['wall'], fast['dcprovision']['cpu'] / fast['floor-fsync']['cpu'])
PY
)
printf 'dcprovision / floor-fsync: wall %.2fx, cpu %.2fx\n' "$floor_wall" "$floor_cpu"
printf 'openssl-cli / dcprovision: cpu %.1fx\n' "$cli_cpu"
goal "openssl-cli / dcprovision, wall" "$(printf '%.1f' "$cli_wall")" ">=" 30
