#!/usr/bin/env bash
# bench/store_cap.sh [BUILD]: a store at a small cap keeps storing. One
# learner and two actors on calc (the process tests' tiny model, segments of
# 128 tokens: payloads of about 1.5 KB, which SQLite keeps inside the leaf
# pages) run through `longhaul launch` for LH_CAP_SECONDS (default 480: well
# past the 281 s at which the rows that stay filled a 2 MB cap before
# retirement) twice, side by side, so that both see the same machine (the load of
# other processes comes and goes): uncapped, and with [learner]
# max_db_bytes = LH_CAP_BYTES (default 2000000). Per run, from the store
# and the processes:
#   stored seg/s  segments the store committed per second over the second
#                 half of the run: its segments, those stored and those
#                 retention retired (retired_episodes), counted every 2 s
#                 while it runs; the rate between the first count past
#                 half the run (from the learner's runs.started_ms) and
#                 the last one before its end
#   last 1/4      the same over the run's last quarter
#   retentions    the learner's retention runs that dropped payloads
#   full          the learner's retention lines that said the store was
#                 still full after them
#   retired       episodes retention retired at the cap (schema 15)
#   steps         train steps (train_steps rows and those thinned away at
#                 the cap, retired_steps)
#   file          the store's file at the end (page_count * page_size)
#   lost          messages the actors had acked that the store does not
#                 hold (their "stopped" lines against the store's rows and
#                 the retired episodes' sums)
# and the capped rate over the uncapped one, and what the capped store
# keeps of its train steps: their rows grow with the log of the run's
# length (thinned in levels at the cap), not with every step. Before schema 13 the capped run
# stopped storing at its first fill: retention set the payloads to NULL in
# their rows, which freed no page. Before schema 15 it stopped once the rows
# that describe the dropped payloads filled the cap (281 s into a 480 s
# run: 5.7 segments a second over the second half against 34.8).
set -euo pipefail
build=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/cli/longhaul
root=${LH_CAP_DIR:-$build/bench-store-cap}
seconds=${LH_CAP_SECONDS:-480}
cap=${LH_CAP_BYTES:-2000000}
if ! command -v sqlite3 > /dev/null; then
  echo "store_cap: the sqlite3 command is needed to read the figures (apt-get install sqlite3)"
  exit 1
fi
rm -rf "$root"
mkdir -p "$root"
root=$(cd "$root" && pwd)

# total DB: segments stored, those retired included ("" while unreadable).
total() {
  sqlite3 -readonly "$1" "SELECT (SELECT count(*) FROM segments) +
    (SELECT coalesce(sum(segments), 0) FROM retired_episodes)" 2> /dev/null || true
}

# count NAME: "MS TOTAL" every 2 s into $root/NAME/counts until the fleet ends.
count() {
  local w="$root/$1"
  while [ ! -e "$w/done" ]; do
    local n
    n=$(total "$w/replay.db")
    [ -n "$n" ] && echo "$(date +%s%3N) $n" >> "$w/counts"
    sleep 2
  done
}

# run NAME MAX_DB_BYTES: one fleet for $seconds in $root/NAME.
run() {
  local w="$root/$1"
  mkdir -p "$w"
  count "$1" &
  local counter=$!
  cat > "$w/fleet.ini" << EOF
include = $src/bench/model_tiny.ini
[fleet]
learners = 1
actors = 2
log_dir = logs
duration_s = $seconds
stop_timeout_ms = 30000
status_interval_ms = 10000
[learner]
; the fresh model's groups are flat (every reward 0): trained all the same
skip_flat_groups = false
batch_episodes = 4
group_size = 4
train_window = 64
ckpt_every = 50
warmup_steps = 0
total_steps = 100000
max_policy_lag = 1
max_db_bytes = $2
ingest_endpoint = ipc://$w/ing
weights_pub_endpoint = ipc://$w/pub
weights_endpoint = ipc://$w/w
db = replay.db
ckpt_dir = ckpt
[actor]
batch = 4
group_size = 4
max_context = 400
segment_tokens = 128
heartbeat_ms = 1000
learner_endpoint = ipc://$w/ing
weights_pub_endpoint = ipc://$w/pub
weights_endpoint = ipc://$w/w
[env]
name = calc
EOF
  (cd "$w" && "$bin" launch fleet.ini --status off > launch.out 2>&1) || true
  touch "$w/done"
  wait "$counter"
}

# rate FROM_MS TO_MS COUNTS: segments a second between the first count at or
# past FROM_MS and the last one at or before TO_MS.
rate() {
  awk -v a="$1" -v b="$2" '$1 >= a && $1 <= b { if (!t0) { t0 = $1; n0 = $2 } t1 = $1; n1 = $2 }
    END { if (t1 > t0) printf "%.1f", (n1 - n0) * 1000 / (t1 - t0); else printf "0.0" }' "$3"
}

# figures NAME: "RATE LAST_RATE RETENTIONS FULL RETIRED STEPS FILE_BYTES ACKED
# STORED LOST SEGMENTS"
figures() {
  local w="$root/$1" db="$root/$1/replay.db"
  local q="sqlite3 -readonly $db"
  local start half last end ret full retired steps file acked stored lost segs
  start=$($q "SELECT started_ms FROM runs WHERE kind = 'learner'")
  half=$((start + seconds * 500))
  last=$((start + seconds * 750))
  end=$((start + seconds * 1000))
  segs=$(total "$db")
  retired=$($q "SELECT coalesce(sum(episodes), 0) FROM retired_episodes")
  steps=$($q "SELECT (SELECT count(*) FROM train_steps) + (SELECT coalesce(sum(train_steps), 0) FROM retired_steps)")
  ret=$(cat "$w"/logs/learner*.log | grep -c "retention keep_versions=" || true)
  full=$(cat "$w"/logs/learner*.log | grep -c "still full" || true)
  file=$($q "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()")
  # Per actor: acked (its last "stopped" line) against its segments and
  # EpisodeEnds in the store, the retired episodes' included; lost counts
  # an actor's acked past its stored.
  acked=0 stored=0 lost=0
  for log in "$w"/logs/actor-*.log; do
    local name a s
    name=$(basename "$log" .log)
    a=$(sed -n 's/.*stopped name=.* acked=\([0-9]*\).*/\1/p' "$log" | tail -1)
    s=$($q "SELECT (SELECT coalesce(sum(segments_received) + sum(segment_count IS NOT NULL), 0) FROM episodes
            WHERE actor = '$name') + (SELECT coalesce(sum(segments) + sum(ends), 0) FROM retired_episodes
            WHERE actor = '$name')")
    acked=$((acked + ${a:-0}))
    stored=$((stored + s))
    if [ "${a:-0}" -gt "$s" ]; then lost=$((lost + ${a:-0} - s)); fi
  done
  echo "$(rate "$half" "$end" "$w/counts") $(rate "$last" "$end" "$w/counts") $ret $full $retired $steps $file" \
    "$acked $stored $lost $segs"
}

echo "== $seconds s, side by side: uncapped and max_db_bytes = $cap"
run uncapped 0 &
first=$!
run capped "$cap"
wait "$first"
read -r u_rate u_last u_ret u_full u_retired u_steps u_file u_acked u_stored u_lost u_segs <<< "$(figures uncapped)"
read -r c_rate c_last c_ret c_full c_retired c_steps c_file c_acked c_stored c_lost c_segs <<< "$(figures capped)"
fmt="%-9s %13s %9s %11s %5s %8s %6s %11s %9s %9s %5s %9s\n"
printf "$fmt" run "stored seg/s" "last 1/4" retentions full retired steps "file bytes" acked stored lost segments
printf "$fmt" uncapped "$u_rate" "$u_last" "$u_ret" "$u_full" "$u_retired" "$u_steps" "$u_file" "$u_acked" \
  "$u_stored" "$u_lost" "$u_segs"
printf "$fmt" capped "$c_rate" "$c_last" "$c_ret" "$c_full" "$c_retired" "$c_steps" "$c_file" "$c_acked" \
  "$c_stored" "$c_lost" "$c_segs"
# What the capped store keeps of its train steps and versions (with their
# per-layer and per-expert rows and their indexes).
read -r kept_bytes kept_steps <<< "$(sqlite3 -readonly -separator ' ' "$root/capped/replay.db" "SELECT
  (SELECT coalesce(sum(d.pgsize), 0) FROM dbstat d JOIN sqlite_schema m ON m.name = d.name
   WHERE m.tbl_name IN ('train_steps', 'policy_versions', 'train_step_layers', 'train_step_experts')),
  (SELECT count(*) FROM train_steps)")"
echo "capped: $kept_steps train_steps rows kept of $c_steps steps ($kept_bytes bytes with their versions," \
  "layer and expert rows)"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "inf" }'; }
echo "capped / uncapped stored seg/s over the second half: $(ratio "$c_rate" "$u_rate"), over the last quarter:" \
  "$(ratio "$c_last" "$u_last"); lost $c_lost (uncapped $u_lost)"
