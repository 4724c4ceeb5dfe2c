#!/usr/bin/env bash
# bench/shared_prefix.sh [BUILD]: what sharing a group's prefix saves
# (docs/actors.md "Shared prefixes"), each figure against its
# reference from the same run: bench_shared_prefix on needle at
# LH_PREFIX_TOKENS (65536) tokens with groups of 8, the demo model
# (examples/model.ini) at its init, one thread on each side. Its last line:
#   shared prefix: actor A.AAx, store S.SSx, learner exact L.LLx
# (episodes per second shared over unshared, store bytes of a group
# unshared over shared, one exact-mode step's time unshared over shared);
# before it the share of trained tokens whose advantage is 0 with flat
# groups left out (target 0) and kept, and a step of 96 calc episodes
# with the learner's prefix tree against one without it.
set -euo pipefail
build=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
cmake --build "$build" --target bench_shared_prefix > /dev/null
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$build/bench/bench_shared_prefix" --tokens "${LH_PREFIX_TOKENS:-65536}" \
  --group 8 --model "$src/examples/model.ini" --dir "$dir"
