#!/usr/bin/env bash
# What the PKCS#11 module costs the program that loads it (issue 33): memory and time, against
# SoftHSM2 doing the same in the same run, everything on core 1 (taskset).
#
#   memory and load: Benchmarks/module-footprint.c (a small C program) loads a module, initializes
#               it and finds every object of its first token without logging in, COUNT times each;
#               the medians of the mapped (VmSize) and resident (VmRSS) memory that added, and of
#               the time it took.
#   per process: pkcs11-tool, COUNT times each: -L (load, list), and one signature (--sign, CKM_ECDSA
#               over a 32-byte digest). SoftHSM2 needs --login for it, with its PIN; the module is
#               timed with --login (the store passphrase, whose PBKDF2 of 200 000 iterations is the
#               point of it) and without, under the provider's `--token-login secure-services`
#               policy, where the unlocked client's keys need no PIN.
#
# BEFORE_MODULE=PATH (optional): an earlier build of the module, measured in the same rounds (the
# numbers docs/BENCHMARKS.md gives before and after). FIREFOX=1 (optional): the memory each module
# adds to Firefox ESR's main process too (below). Goals: per process at most 2x SoftHSM2's
# time, at most 15 MiB resident added. Environment: COUNT (20). SMOKE=1: the debug module, COUNT 3,
# the same checks, nothing judged (see Benchmarks/common.sh).
source "$(dirname "$0")/common.sh"
if [ "$smoke" = 1 ]; then COUNT=${COUNT:-3}; else COUNT=${COUNT:-20}; fi
machine

build_products dcprovision dcclient
if [ "$smoke" = 1 ]; then module_build=(--traits DemoCompanions,TLS); else module_build=(-c release --traits TLS); fi
swift build "${module_build[@]}" --product dcclient-pkcs11 >/dev/null 2>&1 || {
  swift build "${module_build[@]}" --product dcclient-pkcs11 >&2
  exit 1
}
module=$(swift build "${module_build[@]}" --show-bin-path)/libdcclient-pkcs11.so
softhsm=/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so
before_module=$([ "$smoke" = 1 ] || echo "${BEFORE_MODULE:-}")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$cc" -O2 -o "$work/module-footprint" Benchmarks/module-footprint.c $(pkg-config --cflags p11-kit-1) -ldl
sandbox "$work"
export PATH="$bin:$PATH"
softhsm_tokens "$work" Bench
pkcs11-tool --module "$softhsm" --token-label Bench --login --pin 123456 --keypairgen --key-type EC:prime256v1 \
  --id 02 --label sign >/dev/null 2>&1
# A certificate too, so that both tokens show objects without a login (SoftHSM2 keeps its keys
# private): self-signed by a key of openssl's, as the toolkit's token has its credential's.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/cert.key" -subj /CN=Bench \
  -outform DER -out "$work/cert.der" >/dev/null 2>&1
pkcs11-tool --module "$softhsm" --token-label Bench --login --pin 123456 --write-object "$work/cert.der" \
  --type cert --id 02 --label sign >/dev/null 2>&1
head -c 32 /dev/urandom >"$work/digest"

bench_client "$work"
cd "$work/home"
pass=$(cat "$work/pass")
fail() { echo "$*" >&2; exit 1; }

# footprint NAME MODULE: COUNT runs of module-footprint on core 1; prints the medians.
footprint() {
  local run
  for run in $(seq "$COUNT"); do taskset -c 1 "$work/module-footprint" "$2" || fail "$1: module-footprint failed"; done \
    | python3 -c '
import json, statistics, sys
rows = [json.loads(line) for line in sys.stdin]
if any(row["objects"] == 0 for row in rows): sys.exit(sys.argv[1] + ": no objects found without a login")
vm = statistics.median(r["vm_after"] - r["vm_before"] for r in rows) / 1024
rss = statistics.median(r["rss_after"] - r["rss_before"] for r in rows) / 1024
ms = statistics.median(r["ms"] for r in rows)
objects = rows[0]["objects"]
print(f"{sys.argv[1]}\t{vm:.1f}\t{rss:.1f}\t{ms:.2f}\t{objects}")' "$1"
}
# per_process NAME COMMAND...: the median wall time of COUNT runs on core 1, in ms.
per_process() {
  local name=$1 run
  shift
  for run in $(seq "$COUNT"); do
    local started=$(date +%s%N)
    taskset -c 1 "$@" >/dev/null 2>&1 || fail "$name: $* failed"
    echo $(( $(date +%s%N) - started ))
  done | python3 -c 'import statistics, sys; print(f"{statistics.median(int(l) for l in sys.stdin) / 1e6:.1f}")'
}

echo "date: $(date -u "+%Y-%m-%d %H:%M UTC")"
echo "cpu: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | xargs) ($(nproc) cores)"
echo "softhsm2: $(dpkg-query -W -f="\${Version}" softhsm2), opensc: $(dpkg-query -W -f="\${Version}" opensc)"
echo "load average at start: $(cut -d" " -f1-3 /proc/loadavg)"
echo "== loading the module, initializing it, finding a token's objects: medians of $COUNT runs, core 1"
echo "module	mapped MiB added	resident MiB added	ms	objects"
footprint "softhsm2" "$softhsm" | tee "$work/softhsm.fp"
[ -z "$before_module" ] || footprint "dcclient module, before" "$before_module"
footprint "dcclient module" "$module" | tee "$work/module.fp"

echo "== per process, pkcs11-tool: medians of $COUNT runs, core 1, ms"
softhsm_list=$(per_process "softhsm2 -L" pkcs11-tool --module "$softhsm" -L)
softhsm_sign=$(per_process "softhsm2 --login --sign" pkcs11-tool --module "$softhsm" --token-label Bench --login \
  --pin 123456 --sign --id 02 -m ECDSA -i "$work/digest" -o "$work/sig")
echo "softhsm2: -L $softhsm_list, --login --sign $softhsm_sign"
if [ -n "$before_module" ]; then
  echo "dcclient module, before: -L $(per_process "before -L" pkcs11-tool --module "$before_module" -L)," \
    "--login --sign $(per_process "before --login --sign" pkcs11-tool --module "$before_module" --token-label \
      "dcclient bench" --login --pin "$pass" --sign --id 02 -m ECDSA -i "$work/digest" -o "$work/sig")"
fi
module_list=$(per_process "module -L" pkcs11-tool --module "$module" -L)
module_login_sign=$(per_process "module --login --sign" pkcs11-tool --module "$module" --token-label "dcclient bench" \
  --login --pin "$pass" --sign --id 02 -m ECDSA -i "$work/digest" -o "$work/sig")
openssl x509 -in <(dcclient show signing --pem 2>/dev/null) -noout -pubkey >"$work/module.pub"
pkcs11-tool --module "$module" --token-label "dcclient bench" --login --pin "$pass" --sign --id 02 -m ECDSA \
  --signature-format openssl -i "$work/digest" -o "$work/check.sig" >/dev/null 2>&1 &&
  openssl pkeyutl -verify -pubin -inkey "$work/module.pub" -in "$work/digest" -sigfile "$work/check.sig" >/dev/null ||
  fail "the module's signature does not verify with openssl"
dcprovision policy --client-scheme org.example.dcclient --token-login secure-services >>"$work/setup.log" 2>&1 ||
  fail "dcprovision policy --token-login secure-services failed: $(tail -n 3 "$work/setup.log")"
if [ -n "$before_module" ]; then
  echo "dcclient module, before: --sign without a login (secure-services) $(per_process "before --sign (no login)" \
    pkcs11-tool --module "$before_module" --token-label "dcclient bench" --sign --id 02 -m ECDSA -i "$work/digest" \
    -o "$work/sig")"
fi
module_sign=$(per_process "module --sign (no login)" pkcs11-tool --module "$module" --token-label "dcclient bench" \
  --sign --id 02 -m ECDSA -i "$work/digest" -o "$work/sig")
echo "dcclient module: -L $module_list, --login --sign $module_login_sign, --sign without a login (secure-services) $module_sign"

# FIREFOX=1: Firefox ESR, headless, a fresh profile with the module added to its NSS database by
# modutil (none, SoftHSM2, before, after), about:blank; the main process's VmSize and VmRSS 12 s
# after start, ROUNDS_FIREFOX (3) times each, medians, and what each module added to the run
# without one. Firefox loads a module into its main process at start.
firefox_memory() {
  local profile pid
  profile=$(mktemp -d "$work/firefox-XXXXXX")
  certutil -N -d "sql:$profile" --empty-password
  if [ "$1" != none ]; then
    modutil -add module -libfile "$1" -dbdir "sql:$profile" -force </dev/null >/dev/null 2>&1 || fail "modutil -add $1 failed"
  fi
  firefox-esr --headless --no-remote --profile "$profile" about:blank >/dev/null 2>&1 &
  pid=$!
  sleep 12
  awk '/^VmSize|^VmRSS/ { printf "%s ", $2 }' "/proc/$pid/status"
  echo
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}
if [ "${FIREFOX:-0}" = 1 ] && [ "$smoke" != 1 ]; then
  echo "== Firefox ESR $(firefox-esr --version 2>/dev/null | awk '{print $NF}'), main process 12 s after start: medians of ${ROUNDS_FIREFOX:-3} runs"
  for round in $(seq "${ROUNDS_FIREFOX:-3}"); do
    for entry in none:none softhsm2:"$softhsm" ${before_module:+before:"$before_module"} after:"$module"; do
      echo "${entry%%:*} $(firefox_memory "${entry#*:}")"
    done
  done | python3 -c '
import statistics, sys
rows = {}
for line in sys.stdin:
    name, vm, rss = line.split()
    rows.setdefault(name, []).append((int(vm), int(rss)))
base = [statistics.median(v for v, _ in rows["none"]), statistics.median(r for _, r in rows["none"])]
for name, values in rows.items():
    vm, rss = statistics.median(v for v, _ in values), statistics.median(r for _, r in values)
    print(f"{name}\tVmRSS {rss / 1024:.1f} MiB\tadded: mapped {(vm - base[0]) / 1024:.1f} MiB, resident {(rss - base[1]) / 1024:.1f} MiB")'
fi
echo "load average at the end: $(cut -d" " -f1-3 /proc/loadavg)"
echo

resident=$(cut -f3 "$work/module.fp")
goal "resident memory the module adds to a program, MiB" "$resident" "<=" 15
goal "pkcs11-tool -L, the module's time / SoftHSM2's" "$(python3 -c "print(round($module_list / $softhsm_list, 2))")" "<=" 2
goal "one signature per process, the module (no login) / SoftHSM2 (--login)" \
  "$(python3 -c "print(round($module_sign / $softhsm_sign, 2))")" "<=" 2
echo "one signature per process with the store passphrase (--login), the module / SoftHSM2:" \
  "$(python3 -c "print(round($module_login_sign / $softhsm_sign, 2))") (the passphrase's PBKDF2, by design; not a goal)"
