#!/usr/bin/env bash
# bench/store_cap.sh [BUILD]: a store at a small cap keeps storing. One
# learner and two actors on calc (the process tests' tiny model, segments of
# 128 tokens: payloads of about 1.5 KB, which SQLite keeps inside the leaf
# pages) run through `longhaul launch` for LH_CAP_SECONDS (default 120)
# twice, side by side, so that both see the same machine (the load of
# other processes comes and goes): uncapped, and with [learner]
# max_db_bytes = LH_CAP_BYTES (default 2000000). Per run, from the store
# and the processes:
#   stored seg/s  segments the store committed per second over the second
#                 half of the run (from the learner's runs.started_ms for
#                 LH_CAP_SECONDS; its ended_ms is not written into a store
#                 that is full; segments.created_ms)
#   retentions    the learner's retention runs that dropped payloads
#   file          the store's file at the end (page_count * page_size)
#   lost          messages the actors had acked that the store does not
#                 hold (their "stopped" lines against the store's rows)
# and the capped rate over the uncapped one. Before schema 13 the capped run
# stopped storing at its first fill: retention set the payloads to NULL in
# their rows, which freed no page.
set -euo pipefail
build=${1:-build}
bin=$(cd "$build" && pwd)/cli/longhaul
root=${LH_CAP_DIR:-$build/bench-store-cap}
seconds=${LH_CAP_SECONDS:-120}
cap=${LH_CAP_BYTES:-2000000}
if ! command -v sqlite3 > /dev/null; then
  echo "store_cap: the sqlite3 command is needed to read the figures (apt-get install sqlite3)"
  exit 1
fi
rm -rf "$root"
mkdir -p "$root"
root=$(cd "$root" && pwd)

# run NAME MAX_DB_BYTES: one fleet for $seconds in $root/NAME.
run() {
  local w="$root/$1"
  mkdir -p "$w"
  cat > "$w/fleet.ini" << EOF
[fleet]
learners = 1
actors = 2
log_dir = logs
duration_s = $seconds
stop_timeout_ms = 30000
status_interval_ms = 10000
[model]
d_model = 16
layers = 2
heads = 2
experts = 4
topk = 2
shared_experts = 1
latent = 8
expert_hidden = 8
chunk = 4
seed = 3
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
}

# figures NAME: "RATE RETENTIONS FILE_BYTES ACKED STORED LOST SEGMENTS"
figures() {
  local w="$root/$1" db="$root/$1/replay.db"
  local q="sqlite3 -readonly $db"
  local mid end span rate ret file acked stored lost segs
  mid=$($q "SELECT started_ms + $seconds * 500 FROM runs WHERE kind = 'learner'")
  end=$($q "SELECT started_ms + $seconds * 1000 FROM runs WHERE kind = 'learner'")
  span=$(awk -v a="$mid" -v b="$end" 'BEGIN { print ((b > a) ? (b - a) / 1000 : 1) }')
  rate=$($q "SELECT printf('%.1f', count(*) / $span) FROM segments WHERE created_ms >= $mid")
  segs=$($q "SELECT count(*) FROM segments")
  ret=$(cat "$w"/logs/learner*.log | grep -c "retention keep_versions=" || true)
  file=$($q "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()")
  # Per actor: acked (its last "stopped" line) against its segments and
  # EpisodeEnds in the store; lost counts an actor's acked past its stored.
  acked=0 stored=0 lost=0
  for log in "$w"/logs/actor-*.log; do
    local name a s
    name=$(basename "$log" .log)
    a=$(sed -n 's/.*stopped name=.* acked=\([0-9]*\).*/\1/p' "$log" | tail -1)
    s=$($q "SELECT coalesce(sum(segments_received) + sum(segment_count IS NOT NULL), 0) FROM episodes
            WHERE actor = '$name'")
    acked=$((acked + ${a:-0}))
    stored=$((stored + s))
    if [ "${a:-0}" -gt "$s" ]; then lost=$((lost + ${a:-0} - s)); fi
  done
  echo "$rate $ret $file $acked $stored $lost $segs"
}

echo "== $seconds s, side by side: uncapped and max_db_bytes = $cap"
run uncapped 0 &
first=$!
run capped "$cap"
wait "$first"
read -r u_rate u_ret u_file u_acked u_stored u_lost u_segs <<< "$(figures uncapped)"
read -r c_rate c_ret c_file c_acked c_stored c_lost c_segs <<< "$(figures capped)"
printf "%-9s %13s %11s %12s %9s %9s %6s %9s\n" run "stored seg/s" retentions "file bytes" acked stored lost segments
printf "%-9s %13s %11s %12s %9s %9s %6s %9s\n" uncapped "$u_rate" "$u_ret" "$u_file" "$u_acked" "$u_stored" "$u_lost" "$u_segs"
printf "%-9s %13s %11s %12s %9s %9s %6s %9s\n" capped "$c_rate" "$c_ret" "$c_file" "$c_acked" "$c_stored" "$c_lost" "$c_segs"
echo "capped / uncapped stored seg/s over the second half: $(awk -v a="$c_rate" -v b="$u_rate" \
  'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "inf" }'); lost $c_lost (uncapped $u_lost)"
