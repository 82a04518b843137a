#!/usr/bin/env bash
# Conversion benchmark (issue 2): 200 PEM key+certificate pairs (P-256) → DER certificates and
# PKCS#8 DER keys, three ways in the same run:
#   dcprovision  one `dcprovision convert` process (release build), strict checks, fsync'd atomic writes
#   openssl-cli  an `openssl x509` + `openssl pkcs8 -topk8` loop, one process per file (the peer tool)
#   floor        a C program making the same OpenSSL calls in a tight loop (with and without fsync)
# Needs a C compiler, libssl-dev and python3. Prints medians (wall and CPU) and the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${PAIRS:-200}
work=Benchmarks/work
mkdir -p "$work/in"

swift build -c release --product dcprovision >/dev/null
bin=$(swift build -c release --show-bin-path)/dcprovision
cc -O2 -o "$work/conversion-floor" Benchmarks/conversion-floor.c -lcrypto

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
prepare="rm -rf $work/out && mkdir -p $work/out"
echo "== dcprovision vs the floor (15 rounds)"
python3 Benchmarks/interleave.py 15 "$prepare" \
  "dcprovision=$bin convert $work/in/* --out-dir $work/out/x" \
  "floor=$work/conversion-floor $work/out $work/in/*" \
  "floor-fsync=$work/conversion-floor --fsync $work/out $work/in/*" | tee "$work/fast.txt" | head -n -1
echo "== dcprovision vs the openssl CLI loop (${OPENSSL_ROUNDS:-3} rounds)"
python3 Benchmarks/interleave.py "${OPENSSL_ROUNDS:-3}" "$prepare" \
  "dcprovision=$bin convert $work/in/* --out-dir $work/out/x" \
  "openssl-cli=$work/openssl-loop.sh $work/in $work/out" | tee "$work/slow.txt" | head -n -1

# The outputs must agree byte for byte.
rm -rf "$work/a" "$work/b" && mkdir -p "$work/a" "$work/b"
"$bin" convert "$work"/in/* --out-dir "$work/a" >/dev/null
"$work/openssl-loop.sh" "$work/in" "$work/b"
diff -r "$work/a" "$work/b" && echo "outputs identical to the openssl CLI's ($(ls "$work/a" | wc -l) files)"

python3 - "$work/fast.txt" "$work/slow.txt" <<'PY'
import json, sys
fast, slow = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:])
def ratio(a, b, key): return a[key] / b[key]
print(f"openssl-cli / dcprovision: wall {ratio(slow['openssl-cli'], slow['dcprovision'], 'wall'):.1f}x, "
      f"cpu {ratio(slow['openssl-cli'], slow['dcprovision'], 'cpu'):.1f}x (goal >= 30x)")
print(f"dcprovision / floor-fsync: wall {ratio(fast['dcprovision'], fast['floor-fsync'], 'wall'):.2f}x, "
      f"cpu {ratio(fast['dcprovision'], fast['floor-fsync'], 'cpu'):.2f}x (goal <= 1.5x)")
print(f"dcprovision / floor (no fsync): wall {ratio(fast['dcprovision'], fast['floor'], 'wall'):.2f}x, "
      f"cpu {ratio(fast['dcprovision'], fast['floor'], 'cpu'):.2f}x")
PY
