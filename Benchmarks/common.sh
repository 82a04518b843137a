# Sourced by every Benchmarks/run-*.sh. Two modes:
#
#   default  the products built as scripts/install builds them (-c release --static-swift-stdlib
#            --traits TLS: the TLS trait only, not the default DemoCompanions),
#            full sizes, several rounds; each runner ends with its ratio against the peer and the
#            goal, "met" or "NOT met".
#   SMOKE=1  for CI (scripts/test): the debug build the tests already use (no release build paid
#            for), small inputs, one or two rounds, a few seconds. It checks that the outputs still
#            agree with the peer's, byte for byte where the work is deterministic; it prints the
#            timings but does not judge them (a debug build on a loaded CI machine says nothing
#            about speed).
#
# BEFORE=DIR (optional) names an earlier build's products, as Benchmarks/build-before.sh prints it:
# the runners of issue 17's goals then time it in the same rounds as the current build and print
# the speed-up, before ÷ after. Smoke runs ignore it.
set -euo pipefail
# Every runner runs in a session keyring of its own, as a login has one (pam_keyinit): the client
# keeps its unlocked store key there (it is written to no disk file), and nothing of it reaches
# the caller's keyrings.
if [ -z "${DC_BENCH_SESSION_KEYRING:-}" ] && command -v keyctl >/dev/null; then
  exec env DC_BENCH_SESSION_KEYRING=1 keyctl session - bash "${BASH_SOURCE[1]}" "$@"
fi
cd "$(dirname "${BASH_SOURCE[1]}")/.."
smoke=${SMOKE:-0}
# The smoke build is the tests' own (scripts/test builds with these traits), so nothing recompiles.
if [ "$smoke" = 1 ]; then build_flags=(--traits DemoCompanions,TLS); else build_flags=(-c release --static-swift-stdlib --traits TLS); fi
# dcbench lives in a package of its own (Benchmarks/Package.swift), built only when a runner asks;
# it takes no traits.
if [ "$smoke" = 1 ]; then bench_flags=(); else bench_flags=(-c release --static-swift-stdlib); fi
before=$([ "$smoke" = 1 ] || echo "${BEFORE:-}")
if [ -n "$before" ] && [ ! -x "$before/dcprovision" ]; then echo "BEFORE=$before holds no dcprovision" >&2; exit 1; fi

# A C compiler for the floors and helpers written in C: the system's, or the clang the Swift
# toolchain brings.
cc=$(command -v cc || command -v clang || echo cc)

# build_products PRODUCT...: builds them for this mode and sets $bin to their directory; dcbench,
# built in its own package, is then $dcbench.
build_products() {
  local product log
  log=$(mktemp)
  for product in "$@"; do
    if [ "$product" = dcbench ]; then
      swift build --package-path Benchmarks "${bench_flags[@]}" --product dcbench >"$log" 2>&1 \
        || { cat "$log" >&2; rm -f "$log"; exit 1; }
      dcbench=$(swift build --package-path Benchmarks "${bench_flags[@]}" --show-bin-path)/dcbench
    else
      swift build "${build_flags[@]}" --product "$product" >"$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; exit 1; }
    fi
  done
  rm -f "$log"
  bin=$(swift build "${build_flags[@]}" --show-bin-path)
}

# sandbox DIR: HOME, XDG_RUNTIME_DIR and every XDG_* directory under DIR (home and run made
# 0700), and a client passphrase in DIR/pass (0600): a runner touches nothing of the user's.
sandbox() {
  mkdir -p -m 0700 "$1/home" "$1/run"
  export HOME=$1/home XDG_RUNTIME_DIR=$1/run XDG_DATA_HOME=$1/home/.local/share \
    XDG_CONFIG_HOME=$1/home/.config XDG_STATE_HOME=$1/home/.local/state XDG_CACHE_HOME=$1/home/.cache \
    XDG_DATA_DIRS=$1/share XDG_CONFIG_DIRS=$1/etc
  printf 'bench passphrase\n' >"$1/pass"
  chmod 600 "$1/pass"
}

# softhsm_tokens DIR LABEL...: SoftHSM2 keeping its tokens in DIR/tokens (SOFTHSM2_CONF exported),
# with an empty token for each LABEL: SO PIN 12345678, user PIN 123456.
softhsm_tokens() {
  local dir=$1 label
  shift
  mkdir -p "$dir/tokens"
  printf 'directories.tokendir = %s/tokens\nobjectstore.backend = file\nlog.level = ERROR\n' "$dir" >"$dir/softhsm2.conf"
  export SOFTHSM2_CONF=$dir/softhsm2.conf
  for label in "$@"; do
    softhsm2-util --init-token --free --label "$label" --so-pin 12345678 --pin 123456 >/dev/null
  done
}

# bench_client DIR: in the sandbox `sandbox DIR` made (dcprovision and dcclient on PATH), a test CA
# (DIR/home/ca, P-256) and the managed app `bench` paired with it and holding a credential: its
# PKCS#11 token is "dcclient bench", its passphrase DIR/pass. Arguments after DIR go to
# `dcprovision pair` (such as --user-id ID). The commands' output goes to DIR/setup.log, shown when
# one fails.
bench_client() {
  local dir=$1
  shift
  (
    cd "$dir/home"
    dcprovision testca init ca --key-algorithm p256 --quiet
    dcclient init --client-scheme org.example.dcclient --provider-scheme org.example.provider --app bench \
      --passphrase-file "$dir/pass"
    dcclient register
    dcprovision register --provider-scheme org.example.provider --brand Bench --testca ca \
      --option common-name="Bench User"
    dcprovision pair --client-scheme org.example.dcclient "$@"
    dcclient request
  ) >"$dir/setup.log" 2>&1 || { cat "$dir/setup.log" >&2; exit 1; }
}
export -f bench_client

# machine: one line saying where and when the numbers were taken.
machine() {
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores), $(uname -r), $(openssl version | cut -d' ' -f1-2)," \
    "$(date -u '+%Y-%m-%d %H:%M UTC')$([ "$smoke" = 1 ] && echo ', SMOKE (debug build, not judged)')"
}

# goal WHAT VALUE OP TARGET: prints "WHAT: VALUE (goal OP TARGET): met" (or "NOT met"); OP is >=,
# >, <= or <. In smoke mode the line says it is not judged.
goal() {
  python3 - "$smoke" "$@" <<'PY'
import sys
smoke, what, value, op, target = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], float(sys.argv[5])
met = {">=": value >= target, ">": value > target, "<=": value <= target, "<": value < target}[op]
verdict = "smoke run, not judged" if smoke == "1" else ("met" if met else "NOT met")
print(f"{what}: {value:g} (goal {op} {target:g}): {verdict}")
PY
}

# speedup JSON BEFORE AFTER [WHAT]: from interleave.py's last line in the file JSON, prints
# "speed-up WHAT: before B ms, after A ms, N.NNx (wall)".
speedup() {
  python3 - "$@" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
b, a = r[sys.argv[2]]["wall"], r[sys.argv[3]]["wall"]
what = sys.argv[4] if len(sys.argv) > 4 else sys.argv[3]
print(f"speed-up, {what}: before {b * 1000:.1f} ms, after {a * 1000:.1f} ms: {b / a:.2f}x (wall, same rounds)")
PY
}
