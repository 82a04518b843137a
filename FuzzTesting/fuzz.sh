#!/usr/bin/env bash
# Builds the libFuzzer harnesses and runs each for SECONDS (default 60) on its corpus.
# usage: FuzzTesting/fuzz.sh [SECONDS] [TARGET...]
# Exits non-zero when a harness crashes, leaks, hangs or fails to build; the other targets still
# run. A crash leaves its input in FuzzTesting/Artifacts/TARGET/; once fixed, keep it as a
# regression file under Crashers/TARGET/ — every file there is replayed first here, and by the
# ordinary test suite (Tests/*/FuzzSeedTests.swift), so a fixed bug stays fixed.
set -euo pipefail
cd "$(dirname "$0")"
seconds=60
if [ $# -gt 0 ]; then
  [[ "$1" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number, not '$1'" >&2; exit 2; }
  seconds=$1
  shift
fi
all=(FuzzCredentialReader FuzzDeliveryURL FuzzNewMessage FuzzDeliverMessage FuzzResultMessage FuzzAvailableMessage
  FuzzPolicyMessage FuzzAckMessage FuzzDelegationMessage FuzzDeliveryPayload)
targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for target in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $target "* ]] || { echo "fuzz.sh: unknown target '$target' (${all[*]})" >&2; exit 2; }
done

flags=(-c debug -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library)
mkdir -p Artifacts
echo "== building the harnesses (log: FuzzTesting/Artifacts/build.log)"
if ! timeout 3600 swift build "${flags[@]}" >Artifacts/build.log 2>&1; then
  tail -30 Artifacts/build.log >&2
  echo "fuzz.sh: the harnesses do not build" >&2
  exit 1
fi
bin=$(swift build "${flags[@]}" --show-bin-path)
# libFuzzer checks each input for leaks itself; the check at exit would only report OpenSSL's
# process-lifetime state.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:leak_check_at_exit=0}

failed=()
for target in "${targets[@]}"; do
  mkdir -p "Corpus/$target" "Crashers/$target" "Artifacts/$target"
  log="Artifacts/$target.log"
  : >"$log"
  status=0
  crashers=()
  for file in "Crashers/$target"/*; do [ -f "$file" ] && crashers+=("$file"); done
  if ((${#crashers[@]})); then
    echo "== $target: replaying ${#crashers[@]} crasher(s)"
    timeout 600 "$bin/$target" -runs=0 "${crashers[@]}" >>"$log" 2>&1 || status=$?
  fi
  if ((status == 0)); then
    echo "== $target for ${seconds}s"
    seeds=(Seeds/"$target")
    [ "$target" != FuzzCredentialReader ] || seeds=(../Samples/credential)  # the sample credential's PEM files
    # -max_total_time bounds the run and -timeout one input; the outer timeout is for a fuzzer
    # that stops answering altogether.
    timeout $((seconds + 300)) "$bin/$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
      -artifact_prefix="Artifacts/$target/" "Corpus/$target" "${seeds[@]}" >>"$log" 2>&1 || status=$?
  fi
  if ((status != 0)); then
    tail -40 "$log" >&2
    echo "== $target FAILED (status $status); inputs in FuzzTesting/Artifacts/$target/, log in FuzzTesting/$log" >&2
    failed+=("$target")
  else
    tail -2 "$log"
  fi
done
if ((${#failed[@]})); then
  echo "fuzz.sh: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: ${targets[*]}: no crash in ${seconds}s each"
