#!/usr/bin/env bash
# Builds an earlier commit's products the way scripts/install built them at that commit (release,
# --static-swift-stdlib; --disable-default-traits from the commit that added the DemoCompanions
# trait on, --traits TLS from the one that added the TLS trait) and prints the directory that holds
# them, dcbench among them (built in Benchmarks/ where it is a package of its own, and linked in):
#
#   BEFORE=$(bash Benchmarks/build-before.sh COMMIT [DIR]) bash Benchmarks/run-conversion.sh
#
# The runners that know BEFORE (conversion, issuance, token listing, delivery) time the earlier
# build in the same rounds as the current one and print how many times faster the current one is,
# so a change's before and after come from the same window. The commit's tree is exported with
# git archive into DIR (default Benchmarks/work/before-<commit>), once; a second call only builds.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=$(git rev-parse --verify "${1:?usage: Benchmarks/build-before.sh COMMIT [DIR]}^{commit}")
tree=${2:-Benchmarks/work/before-${commit:0:12}}
if [ ! -e "$tree/Package.swift" ]; then
  mkdir -p "$tree"
  git archive "$commit" | tar -x -C "$tree"
fi
# The current checkout's resolved dependency versions, so that both builds use the same ones.
[ -e "$tree/Package.resolved" ] || [ ! -e Package.resolved ] || cp Package.resolved "$tree/"
cd "$tree"
flags=(-c release --static-swift-stdlib)
if grep -q '"TLS"' Package.swift; then
  traits=(--traits TLS)
elif grep -q DemoCompanions Package.swift; then
  traits=(--disable-default-traits)
else
  traits=()
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
products=(dcprovision dcclient dcverify)
[ -e Benchmarks/Package.swift ] || products+=(dcbench)
for product in "${products[@]}"; do
  swift build "${flags[@]}" "${traits[@]}" --product "$product" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
done
bin=$(swift build "${flags[@]}" "${traits[@]}" --show-bin-path)
if [ -e Benchmarks/Package.swift ]; then
  swift build --package-path Benchmarks "${flags[@]}" --product dcbench >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  ln -sf "$(swift build --package-path Benchmarks "${flags[@]}" --show-bin-path)/dcbench" "$bin/dcbench"
fi
echo "$bin"
