#!/usr/bin/env bash
# bench/store_scale.sh [BUILD]: the read paths of a large store, each next
# to plain sqlite3 doing the same reads in the same run.
#
#   1. builds a store of LH_STORE_SCALE_SEGMENTS (default 200 000; about
#      8.2 kB each, 1.6 GB) 512-token routed segments through store/
#      (bench_store --fill: episodes of 16, batches of 64);
#   2. store_scale_probe: open, the reads of `replay show` and of `replay
#      stats` in-process against plain sqlite3's (ratios);
#   3. the commands as a user runs them, best of 5 (show: 10; the report: 3):
#      `longhaul replay show` of one episode against `sqlite3 DB "SELECT
#      seq, payload FROM segment_payloads WHERE episode = ID"`, `longhaul replay stats`,
#      `longhaul report` (target <= 3 s at 1M segments), each next to the
#      scan of the table a schema-6 store made for the same figures, and
#      `replay check` (the quick_check every open ran before schema 7);
#   4. bench_store: ingest through store/ against plain sqlite3 batched
#      inserts of the same bytes (target >= 0.8).
# Every reader here is one thread doing the work (sqlite3 and store/ start
# none; longhaul's OpenBLAS pool starts at load and stays idle).
# The store is a file in LH_STORE_SCALE_DIR (default BUILD/bench-store-scale),
# kept for a rerun when LH_STORE_SCALE_KEEP=1 (and then reused if it holds
# that many segments). 1M segments (8.2 GB, about 6 minutes to build on 2
# cores): LH_STORE_SCALE_SEGMENTS=1000000 bench/store_scale.sh build
set -euo pipefail
build=${1:-build}
segments=${LH_STORE_SCALE_SEGMENTS:-200000}
work=${LH_STORE_SCALE_DIR:-$build/bench-store-scale}
keep=${LH_STORE_SCALE_KEEP:-0}
bin=$(cd "$build" && pwd)/cli/longhaul
fill=$(cd "$build" && pwd)/bench/bench_store
probe=$(cd "$build" && pwd)/bench/store_scale_probe
if ! command -v sqlite3 > /dev/null; then
  echo "store_scale: the sqlite3 command is needed for the references (apt-get install sqlite3)"
  exit 1
fi
mkdir -p "$work"
work=$(cd "$work" && pwd)
db=$work/scale.db

# Wall time of a command in ms, best of $1 runs (output discarded).
best_ms() {
  local runs=$1 best=
  shift
  for _ in $(seq 1 "$runs"); do
    local t0 t1
    t0=$(date +%s%N)
    "$@" > /dev/null 2>&1
    t1=$(date +%s%N)
    local ms=$(((t1 - t0) / 1000000))
    if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then best=$ms; fi
  done
  echo "$best"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "inf" }'; }

have=0
if [ -f "$db" ]; then have=$(sqlite3 "$db" "SELECT count(*) FROM segments" 2> /dev/null || echo 0); fi
if [ "$have" != "$segments" ]; then
  rm -f "$db" "$db-wal" "$db-shm"
  echo "== building a store of $segments segments"
  "$fill" --fill "$db" "$segments" 2> /dev/null
else
  echo "== reusing $db ($segments segments)"
fi
bytes=$(stat -c %s "$db")
episodes=$(sqlite3 "$db" "SELECT count(*) FROM episodes")
id=$((episodes / 2))
echo "store: $segments segments, $episodes episodes, $(awk -v b="$bytes" 'BEGIN { printf "%.2f GB", b / 1e9 }')"
echo

echo "== in-process (store_scale_probe)"
"$probe" "$db" "$id" 7
echo

echo "== the commands (wall time, best of 5; the report best of 3)"
start_lh=$(best_ms 10 "$bin" --help)
start_sq=$(best_ms 10 sqlite3 :memory: "SELECT 1")
show_lh=$(best_ms 10 "$bin" replay show --db "$db" "$id")
show_sq=$(best_ms 10 sqlite3 "$db" "SELECT seq, payload FROM segment_payloads WHERE episode = $id ORDER BY seq")
echo "replay show $id: $show_lh ms; sqlite3 the same query: $show_sq ms; ratio $(ratio "$show_lh" "$show_sq") (target <= 2; best of 10)"
echo "  a process start alone: longhaul --help $start_lh ms (it loads 35 shared libraries: MPI, OpenBLAS, ZeroMQ),"
echo "  sqlite3 :memory: $start_sq ms; the store's own part is the in-process figure above"
stats_lh=$(best_ms 5 "$bin" replay stats --db "$db")
stats_old=$(best_ms 1 sqlite3 "$db" "SELECT count(*), sum(payload IS NULL), sum(CASE WHEN payload IS NULL THEN 0 ELSE payload_bytes END), sum(tokens), min(min_version), max(max_version) FROM segments NOT INDEXED")
echo "replay stats: $stats_lh ms; sqlite3 the schema-6 query (a scan of the table): $stats_old ms ($(ratio "$stats_old" "$stats_lh")x)"
report_lh=$(best_ms 3 "$bin" report --db "$db" --out "$work/report.html")
report_old=$(best_ms 1 sqlite3 "$db" "SELECT min(created_ms), max(created_ms) FROM segments NOT INDEXED; SELECT (created_ms - 0) / 60000 AS b, sum(sampled) FROM segments NOT INDEXED GROUP BY b")
echo "report: $report_lh ms (target <= 3000 at 1M segments); sqlite3 the schema-6 report's segment scans: $report_old ms ($(ratio "$report_old" "$report_lh")x)"
check=$(best_ms 1 "$bin" replay check --db "$db")
open_lh=$(best_ms 5 "$bin" replay sql --db "$db" "SELECT 1")
echo "replay check (PRAGMA quick_check, which every open ran before): $check ms; an open and a query now: $open_lh ms"
echo

echo "== ingest (bench_store)"
"$fill" | tail -4

if [ "$keep" != 1 ]; then rm -f "$db" "$db-wal" "$db-shm" "$work/report.html"; fi
