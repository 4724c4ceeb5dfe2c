#!/usr/bin/env bash
# make bench: runs every benchmark built under BUILD/bench. Each prints its
# figures next to a reference measured in the same run (ratios, since these
# machines are shared and noisy).
set -euo pipefail
build=${1:-build}
found=0
for b in "$build"/bench/bench_*; do
  [ -x "$b" ] || continue
  found=1
  echo "== $(basename "$b")"
  "$b"
  echo
done
if [ $found -eq 0 ]; then
  echo "bench: no benchmark built under $build/bench"
  exit 1
fi
