#!/usr/bin/env bash
# bench/bench_ep.sh [BUILD] [bench_ep options]: experts across ranks
# ([learner] expert_parallel, ARCHITECTURE.md §5) in one command. Builds
# bench_ep in BUILD (default build/, configured with CUDA off when it has
# no CMakeCache.txt yet), then runs it: 256 experts top 8 and 1024 top 16
# at P = 1, 2 and 4 ranks under mpirun (one group, R = P), printing per P
# the step time against P = 1's, the all-to-all's time, share of the step
# and bytes against the all-reduce data-parallel would move, and per-rank
# memory (the expert shard's table against 1/P, the resident set measured)
# with the targets' PASS / MISS. Under half a minute on 2 cores.
# Options go to bench_ep: --steps N, --max-experts E, --busy-poll.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$src/build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  build=$1
  shift
fi
launcher=()
command -v ccache > /dev/null 2>&1 && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$src" -B "$build" -DLH_CUDA=off "${launcher[@]}" > /dev/null
fi
if ! out=$(cmake --build "$build" -j"$(nproc)" --target bench_ep 2>&1); then
  echo "$out"
  echo "bench_ep.sh: the build failed"
  exit 1
fi
echo "bench_ep.sh: $(nproc) cores (nproc), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
exec "$build/bench/bench_ep" "$@"
