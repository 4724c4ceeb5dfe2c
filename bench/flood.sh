#!/usr/bin/env bash
# bench/flood.sh [BUILD]: an honest actor's stored episodes per second
# alone and while a peer that ignores its back-pressure window floods the
# learner (flood_peer: whole episodes of new ids as fast as the
# ingest takes them), each counted from the store (episodes of the actor
# ended in the phase's span). One learner and one actor on calc with the
# tests' tiny model (d 16, 2 layers), batches of 16 in groups of 4, a
# backlog cap of 32 episodes (max_backlog_episodes; max_policy_lag 1000,
# so that the peer's episodes are admitted and trained as the actor's are,
# as in the flood this measures, and the cap stays put), in LH_FLOOD_DIR
# (default BUILD/bench-flood). Phases of LH_FLOOD_SECONDS (30): alone,
# flooded, alone again; the reference is the mean of the two alone
# phases, measured in the same run by the same processes. Target: the
# flooded rate at least 0.4 of it. LH_FLOOD_LAG sets max_policy_lag (with
# 2 the peer's episodes, sampled at version 0, go stale and the learner's
# stale-share controller shrinks the cap for everyone).
set -euo pipefail
build=${1:-build}
bin=$(cd "$build" && pwd)/cli/longhaul
src=$(cd "$(dirname "$0")/.." && pwd)
peer=$(cd "$build" && pwd)/bench/flood_peer
seconds=${LH_FLOOD_SECONDS:-30}
lag=${LH_FLOOD_LAG:-1000}
root=${LH_FLOOD_DIR:-$build/bench-flood}
if ! command -v sqlite3 > /dev/null; then
  echo "flood: the sqlite3 command is needed to count from the store (apt-get install sqlite3)"
  exit 1
fi
rm -rf "$root"
mkdir -p "$root"
root=$(cd "$root" && pwd)
db=$root/replay.db
cat > "$root/run.ini" <<EOF
include = $src/bench/model_tiny.ini
[learner]
; the fresh model's groups are flat (every reward 0): trained all the same
skip_flat_groups = false
batch_episodes = 16
group_size = 4
train_window = 64
ckpt_every = 1000000
warmup_steps = 0
total_steps = 1000000
max_policy_lag = $lag
max_backlog_episodes = 32
ingest_endpoint = ipc://$root/ing
weights_pub_endpoint = ipc://$root/pub
weights_endpoint = ipc://$root/w
db = $db
ckpt_dir = $root/ckpt
[actor]
learner_endpoint = ipc://$root/ing
weights_pub_endpoint = ipc://$root/pub
weights_endpoint = ipc://$root/w
max_context = 400
group_size = 4
batch = 8
heartbeat_ms = 500
[env]
name = calc
EOF

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done; wait 2> /dev/null || true; }
trap cleanup EXIT
now_ms() { date +%s%3N; }
q() { sqlite3 -readonly "$db" "$1" 2> /dev/null || echo 0; }
# Episodes of actor $1 stored whole (complete or truncated) with their end in [$2, $3).
ended() {
  q "SELECT count(*) FROM episodes WHERE actor = '$1' AND status IN ('complete', 'truncated')
     AND ended_ms >= $2 AND ended_ms < $3"
}
rate() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN { printf "%.2f", n * 1000 / (b - a) }'; }

echo "== bench/flood.sh: load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores, phases of $seconds s," \
  "max_policy_lag $lag"
LH_LOG_TIME=1 "$bin" learner --config "$root/run.ini" > "$root/learner.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do grep -q "bound endpoint=" "$root/learner.log" && break; sleep 0.1; done
LH_LOG_TIME=1 "$bin" actor --config "$root/run.ini" --name a0 > "$root/a0.log" 2>&1 &
pids+=($!)
# Warm: the actor has weights and has stored a few episodes.
for _ in $(seq 1200); do [ "$(ended a0 0 99999999999999)" -ge 8 ] && break; sleep 0.1; done

t0=$(now_ms); sleep "$seconds"; t1=$(now_ms)
alone1=$(ended a0 "$t0" "$t1")
"$peer" "ipc://$root/ing" $((seconds + 3)) flood > "$root/flood.out" 2>&1 &
flood_pid=$!
sleep 1
t2=$(now_ms); sleep "$seconds"; t3=$(now_ms)
flooded=$(ended a0 "$t2" "$t3")
flood_eps=$(ended flood "$t2" "$t3")
wait "$flood_pid" || true
sleep 1
t4=$(now_ms); sleep "$seconds"; t5=$(now_ms)
alone2=$(ended a0 "$t4" "$t5")

r1=$(rate "$alone1" "$t0" "$t1"); r2=$(rate "$flooded" "$t2" "$t3"); r3=$(rate "$alone2" "$t4" "$t5")
ref=$(awk -v a="$r1" -v b="$r3" 'BEGIN { printf "%.2f", (a + b) / 2 }')
echo "honest actor alone:        $alone1 episodes stored in $(( (t1 - t0) / 1000 )) s = $r1/s"
echo "honest actor in the flood: $flooded episodes stored in $(( (t3 - t2) / 1000 )) s = $r2/s"
echo "honest actor alone again:  $alone2 episodes stored in $(( (t5 - t4) / 1000 )) s = $r3/s"
echo "the flooding peer: $(tail -1 "$root/flood.out"); its episodes stored in the flood phase: $flood_eps"
grep "status version=" "$root/learner.log" | tail -1 |
  grep -o "held_window=[0-9]*\|held_hello=[0-9]*\|refused_name=[0-9]*\|backlog_cap=[0-9]*" | tr '\n' ' ' |
  sed 's/^/learner: /; s/ $/\n/'
awk -v f="$r2" -v r="$ref" 'BEGIN {
  printf "flooded / alone (reference %.2f episodes/s, the mean of the two alone phases): %.2f (target >= 0.4)\n",
         r, (r > 0 ? f / r : 0) }'
