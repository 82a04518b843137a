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
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
COUNT=${COUNT:-20}

build=(-c release --static-swift-stdlib)
for product in dcbench dcprovision; do
  swift build "${build[@]}" --product "$product" >/dev/null
done
# A shared library: built as scripts/install builds it, without --static-swift-stdlib.
swift build -c release --product dcclient-pkcs11 >/dev/null
bin=$(swift build "${build[@]}" --show-bin-path)
module=$(swift build -c release --show-bin-path)/libdcclient-pkcs11.so
softhsm=/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/home" "$work/run" "$work/tokens"
chmod 700 "$work/home" "$work/run"
export HOME=$work/home XDG_RUNTIME_DIR=$work/run XDG_DATA_HOME=$work/home/.local/share \
  XDG_CONFIG_HOME=$work/home/.config XDG_STATE_HOME=$work/home/.local/state XDG_CACHE_HOME=$work/home/.cache \
  XDG_DATA_DIRS=$work/usr/share XDG_CONFIG_DIRS=$work/etc/xdg PATH="$bin:$PATH"
printf 'bench passphrase\n' >"$work/pass.txt"
chmod 600 "$work/pass.txt"
printf 'directories.tokendir = %s/tokens\nobjectstore.backend = file\nlog.level = ERROR\n' "$work" >"$work/softhsm2.conf"
export SOFTHSM2_CONF=$work/softhsm2.conf
softhsm2-util --init-token --free --label Bench --so-pin 12345678 --pin 123456 >/dev/null
pkcs11-tool --module "$softhsm" --token-label Bench --login --pin 123456 --keypairgen --key-type EC:prime256v1 \
  --id 02 --label sign >/dev/null 2>&1
printf '123456\n' >"$work/softhsm.pin"
head -c 32 /dev/urandom >"$work/digest"

keyctl session - bash -euo pipefail -c '
work=$1 module=$2 softhsm=$3 bin=$4 ROUNDS=$5 DURATION=$6 COUNT=$7
cd "$work/home"
{
  dcprovision testca init ca --key-algorithm p256 --quiet
  dcclient init --client-scheme org.example.dcclient --provider-scheme org.example.provider --client-id bench \
    --passphrase-file "$work/pass.txt"
  dcclient register
  dcprovision register --provider-scheme org.example.provider --brand Bench --testca ca --option common-name="Bench User"
  dcprovision pair --client-scheme org.example.dcclient
  dcclient request
} >"$work/setup.log" 2>&1 || { cat "$work/setup.log" >&2; exit 1; }

echo "date: $(date -u "+%Y-%m-%d %H:%M UTC")"
echo "cpu: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | xargs) ($(nproc) cores)"
echo "openssl: $(openssl version)"
echo "softhsm2: $(dpkg-query -W -f="\${Version}" softhsm2), opensc: $(dpkg-query -W -f="\${Version}" opensc)"
echo "load average at start: $(cut -d" " -f1-3 /proc/loadavg)"
echo "== $ROUNDS rounds, in-process, ${DURATION}s each, core 1"
for round in $(seq "$ROUNDS"); do
  speed=$(taskset -c 1 openssl speed -seconds 5 ecdsap256 2>/dev/null | awk "/256 bits ecdsa/ {print \$(NF-1)}")
  echo "  round$round  openssl speed ecdsap256: $speed sign/s"
  echo "  round$round  dcclient module: $(taskset -c 1 "$bin/dcbench" pkcs11-sign "$module" "dcclient bench" 02 "$work/pass.txt" "$DURATION")"
  echo "  round$round  softhsm2:        $(taskset -c 1 "$bin/dcbench" pkcs11-sign "$softhsm" Bench 02 "$work/softhsm.pin" "$DURATION")"
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
per_process "dcclient module" "$module" "dcclient bench" "$(cat "$work/pass.txt")"
per_process "softhsm2       " "$softhsm" Bench 123456
echo "load average at the end: $(cut -d" " -f1-3 /proc/loadavg)"
' bench "$work" "$module" "$softhsm" "$bin" "$ROUNDS" "$DURATION" "$COUNT" | tee "$work/results.txt"

python3 - "$work/results.txt" <<'PY'
import re, statistics, sys
text = open(sys.argv[1]).read()
speed = [float(x) for x in re.findall(r"openssl speed ecdsap256: ([\d.]+) sign/s", text)]
ours = [float(x) for x in re.findall(r"dcclient module: ([\d.]+) signatures/s", text)]
soft = [float(x) for x in re.findall(r"softhsm2: +([\d.]+) signatures/s", text)]
ours_cpu = [float(x) for x in re.findall(r"dcclient module: [\d.]+ signatures/s, [\d.]+ us wall and ([\d.]+) us CPU", text)]
if speed and ours and soft:
    s, o, h = statistics.median(speed), statistics.median(ours), statistics.median(soft)
    print(f"\nMedians: openssl {s:.0f} sign/s ({1e6 / s:.1f} us), module {o:.0f}/s ({1e6 / o:.1f} us), softhsm2 {h:.0f}/s ({1e6 / h:.1f} us)")
    ratio = (1e6 / o) / (1e6 / s)
    print(f"Goal: the module within 2x of raw OpenSSL per signature: {ratio:.2f}x ({'met' if ratio <= 2 else 'missed'})")
    print(f"Goal: faster than SoftHSM2 in-process: {o / h:.2f}x its rate ({'met' if o > h else 'missed'})")
PY
