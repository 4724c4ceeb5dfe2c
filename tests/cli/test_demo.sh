#!/usr/bin/env bash
# tests/cli/test_demo.sh BUILD [DEMO]: the main job end to end at small
# sizes. Runs scripts/demo.sh (or DEMO) in a folder of its own with a low
# SFT target, a short RL fleet and 20 held-out seeds, then checks that
# every stage ran (the expert's episode, SFT's evaluations and checkpoint,
# the fleet's episodes and final checkpoint, the curve, the stats, the
# report page) and that the demo's last lines give the warm start's and
# the final greedy success, each a number in [0, 1]. LH_KEEP=1 keeps the
# folder. Exits 1 naming the first check that failed.
set -euo pipefail
build=$(cd "$1" && pwd)
demo=${2:-$(cd "$(dirname "$0")/../.." && pwd)/scripts/demo.sh}
dir=$(mktemp -d /tmp/lh-test-demo-XXXXXX)
if [ "${LH_KEEP:-0}" = 1 ]; then echo "test_demo: keeping $dir"; else trap 'rm -rf "$dir"' EXIT; fi

fail() {
  echo "test_demo: FAILED: $*" >&2
  echo "---- the demo's output ($dir/out.txt), last 60 lines:" >&2
  tail -n 60 "$dir/out.txt" >&2 || true
  exit 1
}

# Three consecutive TCP ports of 127.0.0.1 that nobody listens on now.
port=$("$(dirname "$0")/../free_ports.py" 3 || true)
[ -n "$port" ] || fail "no three free TCP ports"

cd "$dir"
rc=0
LH_DEMO_DIR="$dir/run" LH_DEMO_SECONDS=${LH_TEST_DEMO_SECONDS:-20} LH_DEMO_TARGET=0.05 LH_DEMO_SEEDS=20 \
  LH_DEMO_SFT_STEPS=400 LH_DEMO_PORT="$port" "$demo" "$build" > out.txt 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "the demo exited $rc"

has() { grep -q -- "$1" out.txt || fail "no line with '$1' in the demo's output ($2)"; }
has "^-- 1\. calc, solved by its expert" "stage 1 did not run"
has "success" "the expert's episode printed no outcome"
has "^-- 2\. SFT warm start" "stage 2 did not run"
has "^eval: step [0-9]* success rate" "SFT evaluated nothing"
[ -f run/sft/model.safetensors ] || fail "SFT wrote no checkpoint (run/sft/model.safetensors)"
has "^-- 3\. the RL fleet" "stage 3 did not run"
episodes=$(sqlite3 run/replay.db "SELECT count(*) FROM episodes WHERE status != 'running'")
steps=$(sqlite3 run/replay.db "SELECT count(*) FROM train_steps")
[ "$episodes" -gt 0 ] || fail "the fleet stored no ended episode"
[ -f run/ckpt/latest ] || fail "the fleet wrote no final checkpoint (run/ckpt/latest)"
has "^-- 4\. what happened" "stage 4 did not run"
has "^report: " "the report was not written"
[ -s report.html ] || fail "report.html is empty or missing"
grep -q "<svg id=\"svg-eval\"" report.html || fail "report.html has no evaluation chart"

# The headline: the last three lines, two figures on the same seeds.
tail -n 3 out.txt > tail.txt
sed -n 1p tail.txt | grep -q "^greedy success on held-out seeds 1\.\.20:$" ||
  fail "the third line from the end is not the headline: $(sed -n 1p tail.txt)"
figure() {
  local v
  v=$(sed -n "$1p" tail.txt | sed -n "s/^  $2 *\([0-9][0-9.]*\)$/\1/p")
  [ -n "$v" ] || fail "no figure on the line for '$2': '$(sed -n "$1p" tail.txt)'"
  awk -v v="$v" 'BEGIN { exit !(v >= 0 && v <= 1) }' || fail "'$2' figure $v is not in [0, 1]"
  echo "$v"
}
before=$(figure 2 "warm start (SFT)")
after=$(figure 3 "after RL")
echo "test_demo: ok: warm start $before, after RL $after on 20 seeds; $episodes episodes, $steps train steps"
