#!/usr/bin/env bash
# bench/soak.sh [BUILD]: a fleet (one learner, two actors, a small model on
# calc) runs for LH_SOAK_SECONDS (600) under `longhaul launch` while
# bench/soak_inject.py injects a mix of hostile faults every 2 s (input the
# model cannot take, episode id collisions, ends that never complete,
# garbage and oversized messages, weights requests never read, names with
# control characters, SIGSTOP of an actor or the learner, a peer that
# ignores its back-pressure window, heartbeats spoofed in an actor's name),
# with the store at a small cap (LH_SOAK_CAP bytes, 8000000: retention
# deletes payloads throughout the run). Every 10 s it
# reads each process's resident memory from /proc. At the end it prints,
# from the processes and the store:
#   acked    what the actors say was acked (their last log lines)
#   stored   the rows of their messages in the store
#   lost     acked but not stored (target 0)
#   learner restarts (target 0)
#   spoofed heartbeats stored (target 0), the window flood's episodes
#   stored against those sent, retentions run
#   peak resident memory of every process, and its growth after warm-up
#   (the first fifth of the run) to the end (target: flat), and the
#   learner's own account of where its memory is over the same span (its
#   status lines: glibc heap in use and held, SQLite's share)
set -euo pipefail
build=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/cli/longhaul
pydir=$(cd "$build" && pwd)/envs/python
root=${LH_SOAK_DIR:-$build/bench-soak}
seconds=${LH_SOAK_SECONDS:-600}
cap=${LH_SOAK_CAP:-8000000}
rm -rf "$root"
mkdir -p "$root"
root=$(cd "$root" && pwd)
cat > "$root/fleet.ini" <<EOF
[fleet]
learners = 1
actors = 2
log_dir = logs
duration_s = $seconds
restart_backoff_ms = 500
max_restarts = 10
stop_timeout_ms = 60000
status_interval_ms = 30000
[model]
d_model = 32
layers = 2
heads = 2
experts = 8
topk = 2
latent = 16
expert_hidden = 32
chunk = 8
[learner]
; the fresh model's groups are flat (every reward 0): trained all the same
skip_flat_groups = false
batch_episodes = 16
group_size = 4
max_policy_lag = 2
train_window = 256
total_steps = 1000000
warmup_steps = 0
ckpt_every = 20
keep_checkpoints = 2
max_db_bytes = $cap
abort_after_ms = 10000
ingest_endpoint = tcp://127.0.0.1:5755
weights_pub_endpoint = tcp://127.0.0.1:5756
weights_endpoint = tcp://127.0.0.1:5757
db = replay.db
ckpt_dir = ckpt
[actor]
batch = 8
group_size = 4
max_context = 400
resend_timeout_ms = 2000
learner_endpoint = tcp://127.0.0.1:5755
weights_pub_endpoint = tcp://127.0.0.1:5756
weights_endpoint = tcp://127.0.0.1:5757
[env]
name = calc
EOF
cd "$root"
"$bin" launch fleet.ini --status off > launch.out 2>&1 &
launch=$!
# The processes, once the learner listens.
for _ in $(seq 600); do grep -q "bound endpoint=" logs/learner.log 2>/dev/null && break; sleep 0.1; done || true
# The pid of the launcher's child whose command line holds $1 (none: empty).
child() {
  for p in $(pgrep -P "$launch" || true); do
    if tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q -- "$1"; then echo "$p"; return 0; fi
  done
  return 0
}
learner=$(child " learner ")
actors=$(for i in 0 1; do child "--name actor-$i"; done | paste -sd, -)
echo "soak: ${seconds} s, learner pid $learner, actor pids $actors, faults every 2 s"
PYTHONPATH="$pydir" /usr/bin/python3 "$src/bench/soak_inject.py" --ingest tcp://127.0.0.1:5755 \
  --weights tcp://127.0.0.1:5757 --seconds "$((seconds - 20))" --stop-pids "$actors,$learner" \
  --actor-names actor-0,actor-1 > inject.out 2>&1 &
inject=$!
start=$(date +%s)
: > memory.txt
restarts=0
while kill -0 "$launch" 2>/dev/null; do
  now=$(( $(date +%s) - start ))
  for p in $(pgrep -P "$launch" || true); do
    name=$( (tr '\0' ' ' < "/proc/$p/cmdline" | sed -n 's/.* --name \([^ ]*\).*/\1/p; s/.* learner .*/learner/p' |
      head -1) 2>/dev/null || true)
    rss=$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$p/status" 2>/dev/null || true)
    if [ -n "$name" ] && [ -n "$rss" ]; then echo "$now $name $rss" >> memory.txt; fi
  done
  l=$(child " learner ")
  if [ -n "$l" ] && [ "$l" != "$learner" ]; then restarts=$((restarts + 1)); learner=$l; fi
  sleep 10
done
wait "$inject" || true
cat inject.out
# acked: every life's last line; stored: the rows of their messages, and
# those of the episodes retired at the cap (their sums, schema 15).
acked=$(cat logs/actor-*.log | sed -n 's/.*stopped name=.* acked=\([0-9]*\).*/\1/p' | awk '{s += $1} END {print s + 0}')
stored=$(sqlite3 -readonly replay.db "SELECT (SELECT count(*) FROM segments s JOIN episodes e ON s.episode = e.id
  WHERE e.actor LIKE 'actor-%') + (SELECT count(*) FROM episodes WHERE actor LIKE 'actor-%' AND ended_ms IS NOT NULL
  AND segment_count IS NOT NULL) + (SELECT coalesce(sum(segments) + sum(ends), 0) FROM retired_episodes
  WHERE actor LIKE 'actor-%')")
retired=$(sqlite3 -readonly replay.db "SELECT coalesce(sum(episodes), 0) FROM retired_episodes")
refused=$(sed -n 's/.*status version=.* rejected=\([0-9]*\).*/\1/p' logs/learner.log | tail -1)
steps=$(sqlite3 -readonly replay.db "SELECT count(*) FROM train_steps")
echo "soak: acked=$acked stored=$stored lost=$((acked > stored ? acked - stored : 0)) learner_restarts=$restarts" \
  "steps=$steps rejected=${refused:-0}"
spoofed=$(sqlite3 -readonly replay.db "SELECT count(*) FROM actor_heartbeats WHERE policy_version = 4242424")
flood_sent=$(sed -n 's/.*window_flood_episodes=\([0-9]*\).*/\1/p' inject.out)
flood_stored=$(sqlite3 -readonly replay.db "SELECT count(*) FROM episodes WHERE actor = 'soak-flood'")
held=$(sed -n 's/.*status version=.* held_window=\([0-9]*\).*/\1/p' logs/learner.log | tail -1)
retentions=$(grep -c "retention dropped" logs/learner.log || true)
echo "soak: spoofed heartbeats stored=$spoofed; window flood: episodes sent=${flood_sent:-0}" \
  "stored=$flood_stored held_window=${held:-0}; cap=$cap bytes, retentions=$retentions, retired=$retired," \
  "file $(stat -c %s replay.db) bytes"
warm=$((seconds / 5))
awk -v warm="$warm" '{ if ($3 > peak[$2]) peak[$2] = $3
    if ($1 >= warm && $1 < warm + 30 && $3 > after[$2]) after[$2] = $3
    last[$2] = $3 }
  END { for (n in peak) printf "  %-10s peak %7d kB; after warm-up %7d kB, at the end %7d kB (growth %+.1f%%)\n",
          n, peak[n], after[n], last[n], after[n] ? 100 * (last[n] - after[n]) / after[n] : 0 }' memory.txt | sort
# The learner's status lines come every 10 s: the one at the end of warm-up
# and the last.
sed -n 's/.*status version=.* heap_in_use=\([0-9]*\) heap_held=\([0-9]*\) sqlite_bytes=\([0-9]*\).*/\1 \2 \3/p' \
  logs/learner.log > heap.txt
awk -v at=$((warm / 10 + 1)) 'NR == at { for (i = 1; i <= 3; i++) a[i] = $i } { for (i = 1; i <= 3; i++) z[i] = $i }
  END { split("heap in use,heap held,SQLite", n, ",")
        for (i = 1; i <= 3; i++) printf "  learner %-11s after warm-up %7d kB, at the end %7d kB (%+d kB)\n",
          n[i], a[i] / 1024, z[i] / 1024, (z[i] - a[i]) / 1024 }' heap.txt
echo "targets: lost 0, learner restarts 0, spoofed heartbeats stored 0, memory flat after warm-up"
