#!/usr/bin/env bash
# bench/scale_train.sh [BUILD]: learner policy tokens trained per second on
# long episodes in stored-state mode, against short episodes (target
# >= 0.5), with exact recomputation on the long episodes for
# reference, and how far each mode's log-probabilities stray from exact
# (docs/learner.md "Stored state").
#
# Each figure is one learner step of bench_state (the real trainer over a
# real SQLite store) on EPISODES episodes of one group whose last POLICY
# tokens the policy sampled (a document, then the answer), the demo model
# unless LH_SCALE_TRAIN_MODEL names a model ini. The learner's weights are
# LAG optimizer steps (3e-4 per parameter) past the actor's, whose states
# the stored mode starts from, one every INTERVAL tokens.
#
# Sizes are parameters (environment):
#   LH_SCALE_TRAIN_SHORT (4096)  LH_SCALE_TRAIN_LONG (262144)
#   LH_SCALE_TRAIN_POLICY (1024) LH_SCALE_TRAIN_EPISODES (2)
#   LH_SCALE_TRAIN_WINDOW (2048) LH_SCALE_TRAIN_INTERVAL (256)
#   LH_SCALE_TRAIN_BURN_IN (64)  LH_SCALE_TRAIN_LAG (1)
#   LH_SCALE_TRAIN_EXACT_LONG (1: also run exact mode on the long episodes)
#   LH_SCALE_TRAIN_REPEAT (3: each step is timed that many times, the
#     shortest counts; exact on the long episodes once, it takes minutes)
#   LH_SCALE_TRAIN_STRAY (1: the stray from exact on SHORT episodes, a state
#     every 64 tokens, for burn-in 0, 64 and 256 at lag 1 and 100)
# Every side runs one thread (OPENBLAS_NUM_THREADS=1, the learner's default
# blas_threads); the load average is printed with the figures.
set -euo pipefail
build=${1:-build}
bin=$(cd "$build" && pwd)/bench/bench_state
short=${LH_SCALE_TRAIN_SHORT:-4096}
long=${LH_SCALE_TRAIN_LONG:-262144}
policy=${LH_SCALE_TRAIN_POLICY:-1024}
episodes=${LH_SCALE_TRAIN_EPISODES:-2}
window=${LH_SCALE_TRAIN_WINDOW:-2048}
interval=${LH_SCALE_TRAIN_INTERVAL:-256}
burn_in=${LH_SCALE_TRAIN_BURN_IN:-64}
lag=${LH_SCALE_TRAIN_LAG:-1}
exact_long=${LH_SCALE_TRAIN_EXACT_LONG:-1}
stray=${LH_SCALE_TRAIN_STRAY:-1}
repeat=${LH_SCALE_TRAIN_REPEAT:-3}
model=${LH_SCALE_TRAIN_MODEL:-}
work=$(mktemp -d /tmp/lh_scale_train_XXXXXX)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

run() {  # MODE TOKENS [INTERVAL BURN_IN LAG] -> one bench_state line
  local args=(--mode "$1" --tokens "$2" --policy "$policy" --episodes "$episodes" --window "$window"
              --interval "${3:-$interval}" --burn-in "${4:-$burn_in}" --lag "${5:-$lag}" --dir "$work"
              --repeat "${6:-$repeat}")
  [ -n "$model" ] && args+=(--model "$model")
  "$bin" "${args[@]}" 2>/dev/null
}
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }

echo "scale_train: load $(cut -d' ' -f1-3 /proc/loadavg), threads 1 per side, model ${model:-demo}"
short_exact=$(run exact "$short");   echo "  $short_exact"
short_stored=$(run stored "$short"); echo "  $short_stored"
long_stored=$(run stored "$long");   echo "  $long_stored"
long_exact=""
if [ "$exact_long" = 1 ]; then long_exact=$(run exact "$long" "$interval" "$burn_in" "$lag" 1); echo "  $long_exact"; fi

ref=$(field policy_tokens_per_s "$short_exact")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
ls=$(field policy_tokens_per_s "$long_stored")
echo "learner policy tokens/s, ${long}-token episodes stored-state / ${short}-token episodes (exact): $(ratio "$ls" "$ref") (target >= 0.5)"
echo "  stored ${long}: $ls tok/s, |logp - exact| max $(field logp_diff_max "$long_stored") mean $(field logp_diff_mean "$long_stored") (lag $lag, burn-in $burn_in, interval $interval)"
echo "  stored ${short}: $(field policy_tokens_per_s "$short_stored") tok/s, |logp - exact| max $(field logp_diff_max "$short_stored") mean $(field logp_diff_mean "$short_stored")"
if [ -n "$long_exact" ]; then
  le=$(field policy_tokens_per_s "$long_exact")
  echo "  exact ${long} (reference): $le tok/s, ratio to ${short} $(ratio "$le" "$ref"); stored is $(ratio "$ls" "$le")x exact"
fi
if [ "$stray" = 1 ]; then
  echo "stray of stored-state log-probabilities from exact, ${short}-token episodes, a state every 64 tokens:"
  for l in 1 100; do
    for b in 0 64 256; do
      line=$(run stored "$short" 64 "$b" "$l" 1)
      echo "  lag $l burn-in $b: |logp - exact| max $(field logp_diff_max "$line") mean $(field logp_diff_mean "$line"), positions run $(field run_positions "$line")"
    done
  done
fi
