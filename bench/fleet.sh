#!/usr/bin/env bash
# bench/fleet.sh [BUILD]: aggregate actor tokens/s with 1, 2 and 4 actors
# on this machine and the learner's busy fraction, each fleet running
# LH_FLEET_SECONDS (45) on bench/learn.ini (the demo model on calc; from
# the checkpoint LH_FLEET_INIT when given, else a fresh model). Then, from
# the measured per-process costs and message sizes, the scaling to 64
# actors and 8 learners on paper (README, "Scaling").
set -euo pipefail
build=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/cli/longhaul
root=${LH_FLEET_DIR:-$build/bench-fleet}
seconds=${LH_FLEET_SECONDS:-45}
rm -rf "$root"
mkdir -p "$root"
root=$(cd "$root" && pwd)
printf "%-7s %12s %14s %10s %12s %12s\n" actors "tokens/s" "per actor" busy "train tok/s" "bytes/token"
for n in 1 2 4; do
  w="$root/a$n"
  mkdir -p "$w"
  sed -e "s/^actors = .*/actors = $n/" -e "s/^steps = .*/steps = 0\nduration_s = $seconds/" \
      -e "s|^total_steps = .*|total_steps = 100000|" "$src/bench/learn.ini" > "$w/fleet.ini"
  if [ -n "${LH_FLEET_INIT:-}" ]; then sed -i "s|^\[fleet\]|[fleet]\ninit = $LH_FLEET_INIT|" "$w/fleet.ini"; fi
  (cd "$w" && "$bin" launch fleet.ini --status off > launch.out 2>&1) || true
  db="$w/replay.db"
  # Heartbeats of the second half of the run (warm, all actors going).
  since=$(sqlite3 "$db" "SELECT (min(time_ms) + max(time_ms)) / 2 FROM actor_heartbeats")
  tok=$(sqlite3 "$db" "SELECT printf('%.0f', coalesce(sum(t), 0)) FROM (SELECT actor, avg(tokens_per_s) AS t
    FROM actor_heartbeats WHERE time_ms >= $since GROUP BY actor)")
  busy=$(sqlite3 "$db" "SELECT printf('%.3f', coalesce(avg(busy_frac), 0)) FROM train_steps WHERE step >= 2")
  train=$(sqlite3 "$db" "SELECT printf('%.0f', coalesce(sum(tokens) * 1000.0 / sum(step_ms), 0))
    FROM train_steps WHERE step >= 1")
  bpt=$(sqlite3 "$db" "SELECT printf('%.1f', sum(payload_bytes) * 1.0 / sum(tokens)) FROM segments")
  printf "%-7s %12s %14s %10s %12s %12s\n" "$n" "$tok" "$(awk -v t="$tok" -v n="$n" 'BEGIN{printf "%.0f", t/n}')" \
    "$busy" "$train" "$bpt"
  echo "$n $tok $busy $train $bpt" >> "$root/figures.txt"
done
# Weights: the bytes of one version, and loopback bandwidth, for the paper model.
wbytes=$(sqlite3 "$root/a1/replay.db" "SELECT max(total_bytes) FROM policy_versions")
vrate=$(sqlite3 "$root/a1/replay.db" "SELECT coalesce((count(*) - 1) * 1000.0 / nullif(max(time_ms) - min(time_ms), 0), 0)
  FROM train_steps")
echo
echo "on paper (per-process costs above; one core per actor, one learner process per node):"
awk -v wb="$wbytes" -v vr="$vrate" 'NR == 1 { one = $2; train = $4; bpt = $5 }
  END {
    if (one <= 0 || train <= 0) { print "(no figures: the 1-actor fleet measured nothing)"; exit }
    printf "  one actor samples %.0f tokens/s; one learner trains %.0f sampled tokens/s; %.2f versions/s of %.1f MB\n",
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
