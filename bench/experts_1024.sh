#!/usr/bin/env bash
# bench/experts_1024.sh [BUILD] [bench_experts options]: what a thousand
# experts cost and whether they learn and balance, in one command.
#   1. bench_experts (built in BUILD, default build/): a learner step of
#      examples/experts_1024.ini's model (1,024 experts top 16) against the
#      16-expert demo model of equal routed compute, in the same run, at one
#      rank and at expert_parallel = 2, each split into routing, the
#      all-to-all, the experts' products and the rest (target: at most 1.5x
#      the 16-expert step at one rank).
#   2. the latest learning runs, as bench/learn.sh recorded them
#      (LH_EXPERTS_RECORD, default BUILD/bench-learn-experts_1024/record.txt,
#      from `bench/learn.sh BUILD experts_1024`; and the 16-expert run's,
#      BUILD/bench-learn/record.txt, from `bench/learn.sh BUILD calc`):
#      held-out greedy success before and after RL, the worst layer's
#      MaxVio and the dead experts over the RL steps after 20 (targets:
#      +15 points and within 5 of the 16-expert model; MaxVio <= 0.5, no
#      dead expert). The last line's MaxVio is the run's: each expert's
#      load summed over those steps (the loss-free balancing paper's global
#      form); the line before it gives the per-step figures too, and the
#      hottest rank's excess a step with the experts over 2 and 8 ranks (what
#      a step's imbalance costs under expert_parallel). A run not recorded
#      yet is said, and its figures are n/a. With the run's store beside its
#      record, bench/maxvio_floor.py
#      prints how low a step's MaxVio could go on those episodes: with a
#      router that sends each distinct context to random experts, with a
#      balanced assignment of them, and, each distinct context routed
#      once as the learner's prefix tree trains it, with random experts
#      and with experts chosen by the context's last token alone.
# Its last line is
#   1024 experts: step S.SSx, maxvio M.MM, dead D, gain G.G points
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$src/build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  build=$(cd "$1" && pwd)
  shift
fi
launcher=()
command -v ccache > /dev/null 2>&1 && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$src" -B "$build" -DLH_CUDA=off "${launcher[@]}" > /dev/null
fi
if ! out=$(cmake --build "$build" -j"$(nproc)" --target bench_experts 2>&1); then
  echo "$out"
  echo "experts_1024.sh: the build failed"
  exit 1
fi
echo "experts_1024.sh: $(nproc) cores (nproc), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
out=$("$build/bench/bench_experts" "$@" | tee /dev/stderr)
step=$(sed -n 's/^step_ratio P=1 \([0-9.]*\).*/\1/p' <<< "$out")

# A field of a record.txt line (key=value pairs); n/a when absent.
field() { sed -n "s/.*\\b$2=\\([^ ]*\\).*/\\1/p" "$1" 2>/dev/null | head -1; }
record=${LH_EXPERTS_RECORD:-$build/bench-learn-experts_1024/record.txt}
base=$build/bench-learn/record.txt
maxvio=n/a dead=n/a gain=n/a
if [ -f "$record" ]; then
  maxvio=$(field "$record" maxvio_run) dead=$(field "$record" dead) gain=$(field "$record" gain)
  echo "learning run ($record, $(date -u -r "$record" '+%Y-%m-%d %H:%M UTC')): greedy before $(field "$record" before)," \
    "after $(field "$record" after), gain $gain points; worst layer's MaxVio over RL steps >= 20: over the run's" \
    "summed load $maxvio, per step mean $(field "$record" maxvio) and largest $(field "$record" maxvio_max);" \
    "dead experts $dead;" \
    "the hottest rank's excess per step, the experts over 2 / 8 ranks, $(field "$record" rank2) / $(field "$record" rank8)"
  if [ -f "$base" ]; then
    echo "16-expert run ($base): greedy before $(field "$base" before), after $(field "$base" after)," \
      "gain $(field "$base" gain) points; MaxVio mean $(field "$base" maxvio)"
  else
    echo "16-expert run: none recorded ($base; bench/learn.sh $build calc)"
  fi
else
  echo "learning run: none recorded ($record; bench/learn.sh $build experts_1024)"
fi
# The learning run's own floor for a step's MaxVio (bench/maxvio_floor.py):
# its steps' repeated contexts route alike under any router.
if [ -f "$record" ] && [ -f "$(dirname "$record")/replay.db" ]; then
  /usr/bin/python3 "$src/bench/maxvio_floor.py" "$build/cli/longhaul" "$(dirname "$record")/replay.db" ||
    echo "maxvio_floor: not measured"
fi
echo "1024 experts: step ${step:-n/a}x, maxvio $maxvio, dead $dead, gain $gain points"
