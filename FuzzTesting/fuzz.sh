#!/usr/bin/env bash
# Builds the libFuzzer harnesses and runs each for SECONDS (default 60) on its corpus.
# usage: FuzzTesting/fuzz.sh [SECONDS] [TARGET...]
# A crash leaves crash-* in FuzzTesting/; keep it as a regression file under Crashers/TARGET/
# once fixed — every file there is replayed first, so a fixed bug stays fixed.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}; shift || true
targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(FuzzCredentialReader FuzzDeliveryURL FuzzDeliveryPayload)
swift build -c debug -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library >/dev/null
bin=$(swift build -c debug -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library --show-bin-path)
# libFuzzer checks each input for leaks itself; the check at exit would only report OpenSSL's
# process-lifetime state.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:leak_check_at_exit=0}
for target in "${targets[@]}"; do
  mkdir -p "Corpus/$target" "Crashers/$target"
  if [ -n "$(ls -A "Crashers/$target")" ]; then "$bin/$target" -runs=0 "Crashers/$target"/*; fi
  echo "== $target for ${seconds}s"
  seeds=(Seeds/"$target")
  [ "$target" != FuzzCredentialReader ] || seeds=(../Samples/credential)  # the sample credential's PEM files
  "$bin/$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 "Corpus/$target" "${seeds[@]}" 2>&1 | tail -3
done
