#!/usr/bin/env bash
# bench/scale.sh [BUILD]: the seed's sizes, each figure next to its
# reference from the same run (docs/benchmarks.md):
#
#   1. bench/scale_memory.sh: the actor's peak resident memory at 64K, 256K
#      and 1M context tokens against 4K (target <= 1.5x), and the prefill
#      rate at the largest size against 4K (target >= 0.8);
#   2. bench/scale_train.sh: policy tokens trained per second on 256K-token
#      episodes in stored-state mode against 4K-token episodes (target
#      >= 0.5), with exact recomputation for reference, and the stray of
#      the log-probabilities from exact;
#   3. bench_router: routing time per token at 1024 experts top 16 against
#      16 top 2 (target: at most their router FLOPs ratio + 20%), and the
#      router simulation's MaxVio at 1024 top 16 (target <= 0.5, no dead
#      expert) and at 16 top 2;
#   4. the demo's MaxVio (16 experts) after its RL phase (target <= 0.3):
#      read from the store of a `make demo` run, LH_SCALE_DEMO_DB (default
#      demo-run/replay.db); a missing store is said, not made (the demo
#      takes minutes: run `make demo` first).
#
# LH_SCALE_PARTS picks the parts ("memory train router demo", the default,
# all four); each part's own variables size it (see its script).
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
parts=${LH_SCALE_PARTS:-memory train router demo}
demo_db=${LH_SCALE_DEMO_DB:-demo-run/replay.db}
echo "== bench/scale.sh: load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"

for part in $parts; do
  case $part in
    memory)
      echo "-- 1. actor memory and prefill rate against the context"
      "$here/scale_memory.sh" "$build" ;;
    train)
      echo "-- 2. long episodes: stored-state training against short episodes"
      "$here/scale_train.sh" "$build" ;;
    router)
      echo "-- 3. routing at 1024 experts, and balancing in the router simulation"
      "$build/bench/bench_router" ;;
    demo)
      echo "-- 4. MaxVio of the demo model (16 experts) after the demo's RL phase"
      if [ ! -f "$demo_db" ]; then
        echo "scale: no demo store at $demo_db (run \`make demo\`, or set LH_SCALE_DEMO_DB)"
        continue
      fi
      # MaxVio per layer and step (train_step_layers); the figure is the
      # mean over the last 10 steps of the largest layer's, with the mean
      # layer's and the first 10 steps' beside it (the reference: where the
      # run began). Target 0.3.
      sqlite3 -readonly "$demo_db" "
        WITH per_step AS (
          SELECT step, max(maxvio) AS worst, avg(maxvio) AS mean FROM train_step_layers GROUP BY step),
        ranked AS (
          SELECT *, row_number() OVER (ORDER BY step DESC) AS from_end,
                    row_number() OVER (ORDER BY step) AS from_start FROM per_step)
        SELECT printf('steps %d; last 10 steps: MaxVio of the worst layer %.3f, of the mean layer %.3f '
                      '(target 0.3); first 10 steps: %.3f and %.3f; dead experts in the last step: %s',
                      (SELECT count(*) FROM per_step),
                      (SELECT avg(worst) FROM ranked WHERE from_end <= 10),
                      (SELECT avg(mean) FROM ranked WHERE from_end <= 10),
                      (SELECT avg(worst) FROM ranked WHERE from_start <= 10),
                      (SELECT avg(mean) FROM ranked WHERE from_start <= 10),
                      (SELECT coalesce(dead, 'not recorded') FROM train_steps ORDER BY step DESC LIMIT 1));" ;;
    *)
      echo "scale: unknown part '$part' (memory, train, router, demo)" >&2
      exit 2 ;;
  esac
done
