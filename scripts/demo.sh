#!/usr/bin/env bash
# make demo: the whole loop on the default environment, calc.
#   1. the environment, solved by its expert;
#   2. SFT warm start from the expert's demonstrations, until the greedy
#      success rate on held-out seeds reaches LH_DEMO_TARGET (0.3);
#   3. an RL fleet (1 learner, 2 actors: examples/calc.ini) from that
#      checkpoint for LH_DEMO_SECONDS (300), with its status screen;
#   4. the reward and success curves, the greedy success before and after,
#      and report.html (charts of the run, opened in any browser).
# Everything the run writes goes to LH_DEMO_DIR (demo-run/), the page to
# ./report.html.
set -euo pipefail
build=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/cli/longhaul
work=${LH_DEMO_DIR:-demo-run}
seconds=${LH_DEMO_SECONDS:-300}
target=${LH_DEMO_TARGET:-0.3}
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)

# The fleet's config: examples/calc.ini with the warm start, the run
# length and every path inside the work folder (its include still names
# examples/model.ini: a relative path is relative to the file's folder).
cfg="$work/calc.ini"
sed -e "s|^include = \(.*\)|include = $src/examples/\1|" \
    -e "s|^; init = .*|init = $work/sft|" -e "s|^duration_s = .*|duration_s = $seconds|" \
    -e "s|^log_dir = .*|log_dir = $work/logs|" -e "s|^db = .*|db = $work/replay.db|" \
    -e "s|^ckpt_dir = .*|ckpt_dir = $work/ckpt|" "$src/examples/calc.ini" > "$cfg"
rate() { sed -n 's/.*"success_rate": \([0-9.]*\).*/\1/p'; }

echo "== longhaul demo =="
"$bin" --version
echo
echo "-- 1. calc, solved by its expert (seed 1):"
opts=$(sed -n '/^\[env\]/,/^\[/p' "$cfg" | sed -n 's/^\([a-z_]*\) *= *\([^ ;]*\).*/\1=\2/p' | grep -v '^name=' |
       sed 's/^/--opt /' | tr '\n' ' ')
# shellcheck disable=SC2086
"$bin" envs play calc --seed 1 --expert $opts </dev/null

echo
echo "-- 2. SFT warm start until greedy success >= $target on 100 held-out seeds:"
"$bin" sft --config "$cfg" --out "$work/sft" --steps 3000 --batch 8 --lr 0.003 --warmup 20 \
  --eval 100 --eval-every 50 --target "$target"
before=$("$bin" eval --config "$cfg" --ckpt "$work/sft" --seeds 200 --json | rate)
echo "greedy success of the warm start on seeds 1..200: $before"

echo
echo "-- 3. the RL fleet for $seconds s (1 learner, 2 actors; logs in $work/logs):"
"$bin" launch "$cfg"

echo
echo "-- 4. what happened"
"$src/scripts/curve.sh" "$work/replay.db" 15
after=$("$bin" eval --config "$cfg" --ckpt "$work/ckpt" --seeds 200 --json | rate)
echo
echo "greedy success on seeds 1..200: $before after SFT, $after after RL"
"$bin" replay stats --db "$work/replay.db" | head -n 12
"$bin" report --db "$work/replay.db" --out report.html
echo "report: $(pwd)/report.html"
