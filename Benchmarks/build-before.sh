#!/usr/bin/env bash
# Builds an earlier commit's products the way the runners build the current tree (release,
# --static-swift-stdlib, as scripts/install does) and prints the directory that holds them:
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
cd "$tree"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for product in dcprovision dcclient dcverify dcbench; do
  swift build -c release --static-swift-stdlib --product "$product" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
done
swift build -c release --static-swift-stdlib --show-bin-path
