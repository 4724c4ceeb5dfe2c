#!/usr/bin/env bash
# bench/fleet.sh [BUILD]: the fleet with 1, 2 and 4 actors and one learner
# on this machine, each for LH_FLEET_SECONDS (60) on bench/learn.ini (the
# demo model on calc; from the checkpoint LH_FLEET_INIT when given, else a
# fresh model). Every figure is read from the store or from the processes:
#   stored tok/s   tokens of the segments the store committed, per second
#                  (second half of the run)
#   trained tok/s  sampled tokens the learner trained on, per second, from
#                  its first step's start to its last step's end
#   trained pos/s  every token of the trained episodes (forward+backward)
#   ack p50/p99    what the actors waited from a message's first send to
#                  its ack (LH_ACK_LOG), overall and while a step ran
#                  (the train_steps rows' [time_ms - step_ms, time_ms])
#   resends        the actors' resends over the messages the learner received
#   busy           the learner's time in steps over that same span
# The reference, measured in the same run with the learner's own BLAS
# threads: bench_model's training step of the same model at train_window
# tokens. Then, from these per-process costs, the scaling to 64 actors and
# 8 learners on paper (docs/benchmarks.md, "Scaling on paper"). Flat groups are trained too
# ([learner] skip_flat_groups = false): a fresh model's are all flat, and
# what is measured is the learner's work.
set -euo pipefail
build=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/cli/longhaul
bench_model=$(cd "$build" && pwd)/bench/bench_model
root=${LH_FLEET_DIR:-$build/bench-fleet}
seconds=${LH_FLEET_SECONDS:-60}
rm -rf "$root"
mkdir -p "$root"
root=$(cd "$root" && pwd)
ini="$src/bench/learn.ini"
key() { sed -n "/^\[$1\]/,/^\[/s/^$2 = //p" "$ini" | head -1; }
window=$(key learner train_window)
blas=$(key learner blas_threads)
blas=${blas:-1}

# The reference: one training step of the same model, same BLAS threads.
ref=$("$bench_model" --threads "$blas" --steps 3 --seq-len "$window" --no-peer 2>/dev/null |
  sed -n 's/^train step: [0-9.]* ms, \([0-9]*\) tokens\/s.*/\1/p')
echo "reference: bench_model training step at $window tokens, $blas BLAS thread(s): ${ref:-?} tokens/s"
echo "learner: 1 training thread with [learner] blas_threads = $blas, 1 service thread;" \
  "actors: OPENBLAS_NUM_THREADS=1 each (longhaul launch)"
echo

q() { sqlite3 -readonly "$1" "$2"; }
pct() { # pct DB WHERE P: the P-quantile of ack latency (ms) where WHERE holds
  q "$1" "SELECT coalesce((SELECT lat FROM acks WHERE $2 ORDER BY lat
    LIMIT 1 OFFSET (SELECT CAST(count(*) * $3 AS INT) FROM acks WHERE $2)), -1)"
}
printf "%-6s %10s %10s %10s %9s %9s %12s %12s %9s %6s\n" actors "stored/s" "trained/s" "pos/s" \
  "ack p50" "ack p99" "p50 in step" "p99 in step" resends busy
for n in 1 2 4; do
  w="$root/a$n"
  mkdir -p "$w"
  sed -e "s/^actors = .*/actors = $n/" -e "s/^steps = .*/steps = 0\nduration_s = $seconds/" \
      -e "s|^total_steps = .*|total_steps = 100000\nskip_flat_groups = false|" "$ini" > "$w/fleet.ini"
  if [ -n "${LH_FLEET_INIT:-}" ]; then sed -i "s|^\[fleet\]|[fleet]\ninit = $LH_FLEET_INIT|" "$w/fleet.ini"; fi
  (cd "$w" && LH_ACK_LOG="$w/acks.log" "$bin" launch fleet.ini --status off > launch.out 2>&1) || true
  db="$w/replay.db"
  # The acks, as a table of a copy of the store (the store stays untouched).
  sqlite3 "$db" ".backup '$w/figures.db'"
  sqlite3 "$w/figures.db" "CREATE TABLE acks(ms INTEGER, lat INTEGER, episode TEXT, seq TEXT);" ".separator ' '" ".import '$w/acks.log' acks" 2>/dev/null || true
  f="$w/figures.db"
  mid=$(q "$f" "SELECT (min(created_ms) + max(created_ms)) / 2 FROM segments")
  end=$(q "$f" "SELECT max(created_ms) FROM segments")
  span=$(awk -v a="$mid" -v b="$end" 'BEGIN { print ((b > a) ? (b - a) / 1000 : 1) }')
  stored=$(q "$f" "SELECT printf('%.0f', coalesce(sum(tokens), 0) / $span) FROM segments WHERE created_ms >= $mid")
  # The learner's rates over its steps: from the first step's start to the
  # last one's end, waits between steps included.
  lspan="((max(time_ms) - min(time_ms - step_ms)) / 1000.0)"
  trained=$(q "$f" "SELECT printf('%.0f', coalesce(sum(tokens) * 1.0 / $lspan, 0)) FROM train_steps")
  pos=$(q "$f" "SELECT printf('%.0f', coalesce(sum(positions) * 1.0 / $lspan, 0)) FROM train_steps")
  steps=$(q "$f" "SELECT count(*) FROM train_steps")
  busy=$(q "$f" "SELECT printf('%.3f', coalesce(sum(step_ms) / 1000.0 / $lspan, 0)) FROM train_steps")
  in_step="EXISTS (SELECT 1 FROM train_steps s WHERE acks.ms BETWEEN s.time_ms - s.step_ms AND s.time_ms)"
  p50=$(pct "$f" 1 0.5); p99=$(pct "$f" 1 0.99)
  s50=$(pct "$f" "$in_step" 0.5); s99=$(pct "$f" "$in_step" 0.99)
  acks_in=$(q "$f" "SELECT count(*) FROM acks WHERE $in_step")
  # Resends: the actors' own count (their last line) over what the learner received.
  res=$(cat "$w"/logs/actor-*.log 2>/dev/null | sed -n 's/.*stopped name=.* resends=\([0-9]*\).*/\1/p' | awk '{s += $1} END {print s + 0}')
  rec=$(sed -n 's/.*status version=.* received=\([0-9]*\).*/\1/p' "$w"/logs/learner*.log 2>/dev/null | tail -1)
  share=$(awk -v r="$res" -v n="${rec:-0}" 'BEGIN { printf "%.4f", (n > 0 ? r / n : 0) }')
  printf "%-6s %10s %10s %10s %9s %9s %12s %12s %9s %6s\n" "$n" "$stored" "$trained" "$pos" "$p50" "$p99" \
    "$s50" "$s99" "$share" "$busy"
  echo "    ($steps steps, $acks_in acks during steps, $res resends of ${rec:-0} received)"
  bpt=$(q "$f" "SELECT printf('%.1f', sum(payload_bytes) * 1.0 / sum(tokens)) FROM segments")
  echo "$n $stored $busy $trained $bpt $pos $s99 $share" >> "$root/figures.txt"
done
echo
awk -v ref="${ref:-0}" 'NR == 1 { s1 = $2 } NR == 2 { s2 = $2 } { p99 = $7 > p99 ? $7 : p99; rs = $8 > rs ? $8 : rs; pos = $6 }
  END {
    printf "targets (one run):\n"
    printf "  p99 ack latency during steps, worst fleet: %s ms (target < 200)\n", p99
    printf "  resends, worst fleet: %.2f%% of received (target < 2%%)\n", 100 * rs
    printf "  stored tokens/s, 2 actors over 1: %.2fx (target >= 1.6)\n", (s1 > 0 ? s2 / s1 : 0)
    printf "  trained positions/s with 4 actors over bench_model: %.0f / %.0f = %.2f (target >= 0.8 once the learner is the limit)\n",
      pos, ref, (ref > 0 ? pos / ref : 0)
  }' "$root/figures.txt"
# Weights: the bytes of one version, and the version rate, for the paper model.
wbytes=$(q "$root/a1/figures.db" "SELECT max(total_bytes) FROM policy_versions")
vrate=$(q "$root/a1/figures.db" "SELECT coalesce((count(*) - 1) * 1000.0 / nullif(max(time_ms) - min(time_ms), 0), 0)
  FROM train_steps")
echo
echo "on paper (per-process costs above; one core per actor, one learner process per node):"
awk -v wb="$wbytes" -v vr="$vrate" 'NR == 1 { one = $2; train = $4; bpt = $5 }
  END {
    if (one <= 0 || train <= 0) { print "(no figures: the 1-actor fleet measured nothing)"; exit }
    printf "  one actor stores %.0f tokens/s; one learner trains %.0f sampled tokens/s; %.2f versions/s of %.1f MB\n",
           one, train, vr, wb / 1e6
    printf "  %-10s %-9s %14s %16s %14s %14s\n", "actors", "learners", "tokens/s made", "learner need", "ingest MB/s", "weights MB/s"
    split("1 8 16 64", A, " "); split("1 1 2 8", L, " ")
    for (i = 1; i <= 4; i++) {
      a = A[i]; l = L[i]; made = a * one; need = made / (train * l)
      printf "  %-10d %-9d %14.0f %15.2fx %14.2f %14.2f\n", a, l, made, need, made * bpt / 1e6 / l, wb * a * vr / 1e6
    }
    print "  learner need: tokens made / tokens the learners train (above 1: actors outpace the learners)"
    print "  ingest MB/s: segment bytes into each learner; weights MB/s: every actor fetching every version from rank 0"
  }' "$root/figures.txt"
