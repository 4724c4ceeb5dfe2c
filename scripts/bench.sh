#!/usr/bin/env bash
# make bench: runs every benchmark built under BUILD/bench, then the fleet
# benchmarks of bench/*.sh (the learning proof, fleet scaling). Each prints
# its figures next to a reference measured in the same run (ratios, since
# these machines are shared and noisy). LH_BENCH_ONLY=name runs one.
set -euo pipefail
build=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
only=${LH_BENCH_ONLY:-}
found=0
for b in "$build"/bench/bench_* "$src"/bench/*.sh; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  [ -z "$only" ] || [ "$name" = "$only" ] || [ "${name%.sh}" = "$only" ] || continue
  found=1
  echo "== $name"
  case "$b" in
    *.sh) "$b" "$build" ;;
    *) "$b" ;;
  esac
  echo
done
if [ $found -eq 0 ]; then
  echo "bench: no benchmark ${only:+called $only }under $build/bench or bench/"
  exit 1
fi
