#!/usr/bin/env bash
# make demo: the whole loop on the default environment, calc.
#   1. the environment, solved by its expert;
#   2. SFT warm start from the expert's demonstrations, until the greedy
#      success rate on held-out seeds reaches LH_DEMO_TARGET (0.3), at most
#      LH_DEMO_SFT_STEPS (3000) steps;
#   3. an RL fleet (1 learner, 2 actors: examples/calc.ini) from that
#      checkpoint for LH_DEMO_SECONDS (300), with its status screen;
#   4. the reward and success curves, report.html (charts of the run,
#      opened in any browser), and last the greedy success of the warm
#      start and of the RL run's final checkpoint on the same LH_DEMO_SEEDS
#      (200) held-out seeds.
# Everything the run writes goes to LH_DEMO_DIR (demo-run/), the page to
# ./report.html. LH_DEMO_PORT moves the fleet's three TCP ports (the
# example's 5555-5557) to that port and the two after it.
set -euo pipefail
build=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/cli/longhaul
work=${LH_DEMO_DIR:-demo-run}
seconds=${LH_DEMO_SECONDS:-300}
target=${LH_DEMO_TARGET:-0.3}
seeds=${LH_DEMO_SEEDS:-200}
sft_steps=${LH_DEMO_SFT_STEPS:-3000}
sft_seeds=$(( seeds < 100 ? seeds : 100 ))
port=${LH_DEMO_PORT:-}
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
if [ -n "$port" ]; then
  sed -i -e "s|^ingest_endpoint = .*|ingest_endpoint = tcp://127.0.0.1:$port|" \
         -e "s|^weights_pub_endpoint = .*|weights_pub_endpoint = tcp://127.0.0.1:$((port + 1))|" \
         -e "s|^weights_endpoint = .*|weights_endpoint = tcp://127.0.0.1:$((port + 2))|" "$cfg"
fi

# The greedy success rate of one `longhaul eval --json` result on stdin,
# read as JSON: a figure that is missing or not a rate stops the demo with
# what was read, rather than printing an empty headline.
success_rate() {
  python3 -c '
import json, sys
text = sys.stdin.read()
try:
    rate = json.loads(text)["success_rate"]
except (ValueError, KeyError, TypeError) as e:
    sys.exit("demo: eval --json gave no success_rate (%s: %s): %r" % (type(e).__name__, e, text[:200]))
if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
    sys.exit("demo: eval --json gave success_rate %r, not a rate in [0, 1]" % (rate,))
print("%.3f" % rate)'
}

echo "== longhaul demo =="
"$bin" --version
echo
echo "-- 1. calc, solved by its expert (seed 1):"
opts=$(sed -n '/^\[env\]/,/^\[/p' "$cfg" | sed -n 's/^\([a-z_]*\) *= *\([^ ;]*\).*/\1=\2/p' | grep -v '^name=' |
       sed 's/^/--opt /' | tr '\n' ' ')
# shellcheck disable=SC2086
"$bin" envs play calc --seed 1 --expert $opts </dev/null

echo
echo "-- 2. SFT warm start until greedy success >= $target on $sft_seeds held-out seeds:"
"$bin" sft --config "$cfg" --out "$work/sft" --steps "$sft_steps" --batch 8 --lr 0.003 --warmup 20 \
  --eval "$sft_seeds" --eval-every 50 --target "$target"
before=$("$bin" eval --config "$cfg" --ckpt "$work/sft" --seeds "$seeds" --json | success_rate)
echo "greedy success of the warm start on seeds 1..$seeds: $before"

echo
echo "-- 3. the RL fleet for $seconds s (1 learner, 2 actors; logs in $work/logs):"
"$bin" launch "$cfg"

echo
echo "-- 4. what happened"
"$src/scripts/curve.sh" "$work/replay.db" 15
after=$("$bin" eval --config "$cfg" --ckpt "$work/ckpt" --seeds "$seeds" --json | success_rate)
echo
# (through a file: head closing the pipe early would stop the demo here)
"$bin" replay stats --db "$work/replay.db" > "$work/stats.txt"
head -n 12 "$work/stats.txt"
"$bin" report --db "$work/replay.db" --out report.html
echo "report: $(pwd)/report.html"
echo
echo "greedy success on held-out seeds 1..$seeds:"
echo "  warm start (SFT)  $before"
echo "  after RL          $after"
