#!/usr/bin/env bash
# bench/learn.sh [BUILD] [calc|agent|experts_1024|maze|needle|needle_1m]: the proof that the RL loop
# learns, and the learner's and actors' figures from the same run.
#
#   1. SFT, the warm start:
#      calc (bench/learn.ini): until the greedy success rate on 100 held-out
#      seeds reaches LH_LEARN_TARGET (0.4), evaluated every 25 steps: a warm
#      start that is neither helpless nor done (at 0.3 SFT stopped at step
#      850, greedy 0.29 on the 200 seeds, a policy that still misformed most
#      calls: RL from it gained +1.0 to +7.5 points built in and through the
#      agents; at 0.4, step 1 125 and greedy 0.45: +46.0 and +46.5);
#      agent: calc's run, whose RL goes through the actors' agent endpoint
#      instead (docs/agents.md): 4 Python agents (examples/agents/
#      calc_agent.py, launched by [fleet] agents) play calc's task over
#      HTTP; the held-out seeds are played by `eval` on the built-in calc
#      as for calc, so the two runs' gains compare;
#      experts_1024: calc's run with the [model] of
#      examples/experts_1024.ini (1,024 experts top 16, one rank) and its
#      balancing rule (adaptive; LH_LEARN_BALANCE=bias|quantile|none|aux
#      picks another, for the comparison), for bench/experts_1024.sh
#      against calc's 16-expert run;
#      maze (bench/learn_maze.ini, images): 600 steps on the expert with
#      expert_noise = 0.2. Greedy play repeats a blocked move until the
#      step limit there (0 successes before and after RL), so the figure
#      that counts is the sampled one;
#      needle (bench/learn_needle.ini, a staged run to 64K tokens): 1 500
#      steps at lr 0.003 then 2 400 at lr 0.002 on 400-token documents
#      (examples/needle.ini's recipe: it copies ids and line numbers and
#      answers a field at random), then at lr 0.001 on 16K-token documents
#      with remind = 1 (read's result ends with the asked field) until
#      greedy success on 50 held-out seeds reaches 0.45, evaluated every
#      10 steps: it copies line numbers of three digits and answers the
#      asked field, often with a value not on the line;
#      needle_1m (bench/learn_needle_1m.ini, needle's run carried through
#      256K to a 1M stage): needle's warm start (LH_LEARN_INIT=BUILD/
#      bench-learn-needle/sft takes an earlier needle run's).
#   2. before: success on the held-out seeds 1..LH_LEARN_SEEDS (200),
#      greedy and sampled at the actors' temperature; the one that counts
#      (calc: greedy, maze: sampled) must lie in [0.2, 0.7] for the figure
#      to count. needle is played at its last stage (65 536 tokens of
#      context, a document of 49 152 and 768 lines), where greedy counts.
#      needle_1m is played greedily only, at 256K (a document of 196 608
#      tokens) on those seeds and at 1M (786 432) on seeds
#      1..LH_LEARN_SEEDS_1M (50), the two evaluations side by side (one
#      thread each), each figure with its sampling error; its gate only
#      warns, since the issue's own figure is the gain at 256K and 1M
#      against the warm start. The actors' resident memory is sampled
#      every 5 s during RL (VmRSS) and its peak given per stage.
#   3. RL: `longhaul launch` with 1 learner and 2 actors from that
#      checkpoint for [fleet] steps (LH_LEARN_STEPS overrides) steps of
#      [learner] batch_episodes (LH_LEARN_BATCH overrides) episodes per
#      learner rank. LH_LEARN_RANKS=N runs N learner ranks under mpirun
#      ([fleet] learners), and LH_LEARN_EP=P shares the experts over P of
#      them ([learner] expert_parallel; docs/learner.md "Experts across
#      ranks"); the balance figures are rank 0's store's, which holds the
#      group's load, and the held-out seeds are played with the checkpoint
#      the ranks wrote together. SFT and the evaluations run on one
#      process, as always.
#   4. after: the same seeds, the same ways, with the learner's last checkpoint.
# Printed: before, after and the gain (target: +15 points), sampled at the
# actors' temperature (what RL optimises) and greedy; the balance over
# the RL steps after a warm-up of 20 (the worst layer's MaxVio per step,
# its mean and largest, and the MaxVio of the summed load over those
# steps; and the experts dead: no token for 10 steps in a
# row; from the store's train_step_layers and train_step_experts), which
# with the greedy figures goes to LH_LEARN_DIR/record.txt; the curve of the
# fleet's own success rate per step; for needle, where the fleet's own
# episodes went wrong per stage (bench/needle_breakdown.sh); the
# learner's busy fraction (time in steps over wall time) and the actors'
# tokens/s (from their heartbeats in the store). Everything stays in
# LH_LEARN_DIR (default BUILD/bench-learn, BUILD/bench-learn-maze and
# BUILD/bench-learn-needle), report.html included. LH_LEARN_INIT=DIR starts
# from the warm start DIR/model.safetensors of an earlier run instead of
# training it again, and measures its figures before RL once
# (DIR/held_out.txt).
set -euo pipefail
build=${1:-build}
env=${2:-calc}
src=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/cli/longhaul
target=${LH_LEARN_TARGET:-0.4}
sft2_args=() sft3_args=() play=()
case $env in
  calc)
    ini=learn.ini gate=greedy work=${LH_LEARN_DIR:-$build/bench-learn}
    sft_args=(--steps 3000 --batch 8 --lr 0.003 --warmup 20 --eval 100 --eval-every 25
      --target "$target")
    sft_says="until greedy success >= $target on 100 held-out seeds" ;;
  agent)
    ini=learn.ini gate=greedy work=${LH_LEARN_DIR:-$build/bench-learn-agent}
    sft_args=(--steps 3000 --batch 8 --lr 0.003 --warmup 20 --eval 100 --eval-every 25
      --target "$target")
    sft_says="until greedy success >= $target on 100 held-out seeds" ;;
  experts_1024)
    ini=learn.ini gate=greedy work=${LH_LEARN_DIR:-$build/bench-learn-experts_1024}
    sft_args=(--steps 3000 --batch 8 --lr 0.003 --warmup 20 --eval 100 --eval-every 25
      --target "$target")
    sft_says="until greedy success >= $target on 100 held-out seeds" ;;
  maze)
    ini=learn_maze.ini gate=sampled work=${LH_LEARN_DIR:-$build/bench-learn-maze}
    sft_args=(--steps 600 --lr 0.003 --warmup 20 --eval 200 --set env.expert_noise=0.2)
    sft_says="600 steps on the expert with expert_noise 0.2" ;;
  needle | needle_1m)
    ini=learn_$env.ini gate=greedy work=${LH_LEARN_DIR:-$build/bench-learn-$env}
    sft_args=(--steps 1500 --lr 0.003 --warmup 20 --eval 0 --set learner.weight_decay=0 --set env.remind=0)
    sft2_args=(--steps 2400 --lr 0.002 --warmup 20 --eval 200 --set learner.weight_decay=0 --set env.remind=0)
    sft3_args=(--steps 300 --lr 0.001 --warmup 10 --eval 50 --eval-every 10 --target 0.45
      --set env.tokens=16384 --set actor.max_context=20480 --set learner.weight_decay=0)
    play=(--max-context 65536 --set env.tokens=49152)
    if [ "$env" = needle_1m ]; then
      play=(--max-context 262144 --set env.tokens=196608)
      play_1m=(--max-context 1048576 --set env.tokens=786432)
    fi
    sft_says="1500 + 2400 steps on 400-token documents, then on 16K-token ones with remind = 1 until greedy success >= 0.45 on 50 held-out seeds" ;;
  *)
    echo "usage: bench/learn.sh [BUILD] [calc|agent|experts_1024|maze|needle|needle_1m]" >&2
    exit 2 ;;
esac
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
cd "$work"
cp "$src/bench/$ini" learn.ini
# needle_1m's file includes needle's, which goes beside it
[ "$env" = needle_1m ] && cp "$src/bench/learn_needle.ini" .
# A key of learn.ini's, or of the file it includes where it has none.
key_of() {
  local v
  v=$(sed -n "s/^$1 = //p" learn.ini)
  [ -z "$v" ] && [ -f learn_needle.ini ] && [ "$env" = needle_1m ] && v=$(sed -n "s/^$1 = //p" learn_needle.ini)
  echo "$v"
}
if [ "$env" = experts_1024 ]; then
  # the experts' keys of examples/experts_1024.ini's [model], over calc's
  for key in experts topk expert_hidden shared_experts; do
    value=$(sed -n '/^\[model\]/,/^\[/s/^'"$key"' = \([0-9]*\).*/\1/p' "$src/examples/experts_1024.ini")
    [ -n "$value" ] && sed -i "/^\[model\]/,/^\[/s/^$key = .*/$key = $value/" learn.ini
  done
  # the rule the example runs with (examples/model.ini's), unless told
  sed -i "/^\[model\]/,/^\[/s/^balance = .*/balance = ${LH_LEARN_BALANCE:-adaptive}/" learn.ini
fi
if [ -n "${LH_LEARN_BATCH:-}" ]; then
  sed -i "s/^batch_episodes = .*/batch_episodes = $LH_LEARN_BATCH/" learn.ini
fi
if [ -n "${LH_LEARN_STEPS:-}" ]; then
  sed -i "s/^steps = .*/steps = $LH_LEARN_STEPS/; s/^total_steps = .*/total_steps = $LH_LEARN_STEPS/" learn.ini
fi
sed -i "s|^\[fleet\]|[fleet]\ninit = $work/sft|" learn.ini
rl_ini=learn.ini
if [ "$env" = agent ]; then
  # The RL fleet's actors serve calc_agent.py over HTTP; SFT and the
  # held-out evaluations play the built-in calc of learn.ini.
  rl_ini=learn_agent.ini
  sed -e "s|^\[fleet\]|[fleet]\nagents = 4\nagent_command = /usr/bin/python3 $src/examples/agents/calc_agent.py|" \
    -e "s|^\[actor\]|[actor]\nagent_address = 127.0.0.1:${LH_LEARN_AGENT_PORT:-5680}\nagent_timeout_ms = 60000|" \
    -e "s|^name = calc|name = agent|" -e "/^stages = /d" -e "/^digits = /d" learn.ini > "$rl_ini"
fi
# set_key FILE SECTION KEY VALUE: KEY's line in [SECTION] says VALUE, the
# line added after the section's header where it has none.
set_key() {
  if sed -n "/^\[$2\]/,/^\[/p" "$1" | grep -q "^$3 = "; then
    sed -i "/^\[$2\]/,/^\[/s/^$3 = .*/$3 = $4/" "$1"
  else
    sed -i "s|^\[$2\]|[$2]\n$3 = $4|" "$1"
  fi
}
# Learner ranks, and experts shared over them, for the RL fleet alone.
if [ -n "${LH_LEARN_RANKS:-}${LH_LEARN_EP:-}" ]; then
  if [ "$rl_ini" = learn.ini ]; then
    cp learn.ini learn_rl.ini
    rl_ini=learn_rl.ini
  fi
  [ -n "${LH_LEARN_RANKS:-}" ] && set_key "$rl_ini" fleet learners "$LH_LEARN_RANKS"
  [ -n "${LH_LEARN_EP:-}" ] && set_key "$rl_ini" learner expert_parallel "$LH_LEARN_EP"
fi

# Success on the held-out seeds 1..$seeds with the checkpoint $1, greedy;
# what follows (--temperature T) goes to eval as well.
seeds=${LH_LEARN_SEEDS:-200}
held_out() {
  "$bin" eval --config learn.ini --ckpt "$1" --seeds "$seeds" "${play[@]}" "${@:2}" --json |
    sed -n 's/.*"success_rate": *\([0-9.eE+-]*\).*/\1/p'
}
# needle_1m: greedy success at 1M on seeds 1..LH_LEARN_SEEDS_1M, with $1.
seeds_1m=${LH_LEARN_SEEDS_1M:-50}
held_out_1m() {
  "$bin" eval --config learn.ini --ckpt "$1" --seeds "$seeds_1m" "${play_1m[@]}" --json |
    sed -n 's/.*"success_rate": *\([0-9.eE+-]*\).*/\1/p'
}
# needle_1m: greedy at 256K and at 1M with $1, side by side (each eval is
# one thread; the two take about as long), as "p256 p1m".
held_out_both() {
  held_out "$1" > greedy_256k.txt &
  local at_256k=$!
  held_out_1m "$1" > greedy_1m.txt
  wait "$at_256k"
  echo "$(cat greedy_256k.txt) $(cat greedy_1m.txt)"
}
# With LH_LEARN_INIT, the warm start's figures before RL are those of a
# fixed checkpoint: they are kept in LH_LEARN_INIT/held_out.txt, keyed by
# the checkpoint's SHA-256, the environment and how it is played, and
# measured once (delete the file after a change to the model's arithmetic).
# measured_once KEY CMD...: CMD's output, or what it gave before for KEY.
measured_once() {
  local key value cache=${LH_LEARN_INIT:+$LH_LEARN_INIT/held_out.txt}
  key="$(sha256sum sft/model.safetensors | cut -c1-16) $env $1"
  shift
  if [ -n "$cache" ] && [ -f "$cache" ]; then
    value=$(awk -F '\t' -v k="$key" '$1 == k { v = $2 } END { print v }' "$cache")
    if [ -n "$value" ]; then
      echo "(before RL: measured by an earlier run, $cache: $key)" >&2
      echo "$value"
      return
    fi
  fi
  value=$("$@")
  [ -n "$cache" ] && printf '%s\t%s\n' "$key" "$value" >> "$cache"
  echo "$value"
}
# A rate p of n seeds with its sampling error: p +- sqrt(p (1 - p) / n).
with_error() { awk -v p="$1" -v n="$2" 'BEGIN { printf "%.3f +- %.3f", p, sqrt(p * (1 - p) / n) }'; }

echo "== 1. SFT on $env, $sft_says"
t0=$(date +%s)
if [ -n "${LH_LEARN_INIT:-}" ]; then
  mkdir -p sft && cp "$LH_LEARN_INIT"/model.safetensors sft/
  echo "(the warm start of LH_LEARN_INIT=$LH_LEARN_INIT, not trained again)"
  if [ "$env" = experts_1024 ] && [ -n "${LH_LEARN_BALANCE:-}" ]; then
    # the same weights (and balancing biases) under another rule: the rule
    # is the checkpoint's [model] balance, which eval and the fleet check
    /usr/bin/python3 - sft/model.safetensors "$LH_LEARN_BALANCE" <<'PY'
import json, struct, sys
path, rule = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
head = json.loads(data[8:8 + n])
cfg = json.loads(head["__metadata__"]["config"])
cfg["balance"] = rule
head["__metadata__"]["config"] = json.dumps(cfg, separators=(",", ":"))
text = json.dumps(head, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
PY
    echo "(its [model] balance set to $LH_LEARN_BALANCE for this run)"
  fi
elif [ ${#sft2_args[@]} -gt 0 ]; then
  "$bin" sft --config learn.ini --out sft1 "${sft_args[@]}"
  "$bin" sft --config learn.ini --init sft1 --out sft2 "${sft2_args[@]}"
  "$bin" sft --config learn.ini --init sft2 --out sft "${sft3_args[@]}"
else
  "$bin" sft --config learn.ini --out sft "${sft_args[@]}"
fi
t1=$(date +%s)
temp=$(key_of temperature)
if [ "$env" = needle_1m ]; then
  read -r before before_1m <<< "$(measured_once "greedy seeds=$seeds ${play[*]}, seeds=$seeds_1m ${play_1m[*]}" \
                                    held_out_both sft)"
  before_t="not played"
  echo "SFT took $((t1 - t0)) s; before RL, greedy: at 256K on seeds 1..$seeds (${play[*]}) $(with_error "$before" "$seeds"),"
  echo "  at 1M on seeds 1..$seeds_1m (${play_1m[*]}) $(with_error "$before_1m" "$seeds_1m")"
else
  before=$(measured_once "greedy seeds=$seeds ${play[*]}" held_out sft)
  before_t=$(measured_once "T=$temp seeds=$seeds ${play[*]}" held_out sft --temperature "$temp")
  echo "SFT took $((t1 - t0)) s; before RL on seeds 1..$seeds${play:+ (${play[*]})}: greedy $before, sampled at T=$temp $before_t"
fi
counted=$before
[ "$gate" = sampled ] && counted=$before_t
in_range=$(awk -v b="$counted" 'BEGIN { print (b >= 0.2 && b <= 0.7) ? "yes" : "no" }')
if [ "$in_range" != yes ] && [ "$env" = needle_1m ]; then
  echo "bench/learn: the SFT checkpoint's $gate success at 256K, $counted, is outside [0.2, 0.7]; going on (needle_1m's figures are against the warm start)" >&2
elif [ "$in_range" != yes ]; then
  echo "bench/learn: the SFT checkpoint's $gate success $counted is outside [0.2, 0.7]; the RL figure would not count" >&2
  exit 1
fi

echo
ranks=$(sed -n 's/^learners = //p' "$rl_ini")
ep=$(sed -n 's/^expert_parallel = //p' "$rl_ini")
echo "== 2. RL: ${ranks:-1} learner rank(s)${ep:+, experts over $ep of them}, 2 actors$([ "$env" = agent ] &&
  echo ", 4 agents over HTTP"), $(sed -n 's/^steps = //p' learn.ini) steps"
t2=$(date +%s)
# The actors' resident memory every 5 s (epoch ms, pid, VmRSS kB) until
# the fleet is done.
rm -f rss.stop
( while [ ! -e rss.stop ]; do
    for p in $(pgrep -f "[l]onghaul actor" || true); do
      kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2>/dev/null || true)
      [ -n "$kb" ] && echo "$(date +%s%3N) $p $kb"
    done
    sleep 5
  done > actor_rss.txt ) &
sampler=$!
"$bin" launch "$rl_ini" --status plain 2>&1 | grep --line-buffered -E "name=learner |done reason" || true
touch rss.stop
wait "$sampler" || true
t3=$(date +%s)
if [ "$env" = needle_1m ]; then
  read -r after after_1m <<< "$(held_out_both ckpt)"
  after_t="not played"
else
  after=$(held_out ckpt)
  after_t=$(held_out ckpt --temperature "$temp")
fi

echo
echo "== 3. the fleet's success rate per step (sampled at T=$temp; $(key_of batch_episodes) episodes a step)"
sqlite3 replay.db "SELECT step, printf('%.3f', success_rate), printf('%.3f', reward_mean),
  printf('%.2f', busy_frac), printf('%.0f', step_ms) FROM train_steps ORDER BY step" |
  awk -F'|' 'BEGIN { print "step  success  reward  busy  step_ms" }
             { bar = ""; for (i = 0; i < $2 * 40; i++) bar = bar "#"; printf "%4d  %7s  %6s  %4s  %7s  %s\n", $1, $2, $3, $4, $5, bar }'
busy=$(sqlite3 replay.db "SELECT printf('%.3f', avg(busy_frac)) FROM train_steps WHERE step >= 2")
# An actor's heartbeats go to the learner rank it sends to: every rank's
# store (replay.db, replay.db.rank1, ...), each actor's mean over all its rows.
heartbeats=$(for f in replay.db replay.db.rank*; do
  [[ $f == replay.db || $f =~ \.rank[0-9]+$ ]] || continue  # not their -wal and -shm files, nor an unmatched glob
  sqlite3 -separator ' ' "$f" "SELECT actor, tokens_per_s FROM actor_heartbeats WHERE tokens_per_s > 0"
done)
means=$(awk '{ n[$1]++; s[$1] += $2 } END { for (a in n) printf "%s %.6f\n", a, s[a] / n[a] }' <<< "$heartbeats" | sort)
per_actor=$(awk '{ printf "%s%s %.0f", (NR > 1 ? ", " : ""), $1, $2 }' <<< "$means")
tok=$(awk '{ t += $2 } END { printf "%.0f", t }' <<< "$means")
"$bin" report --db replay.db --out report.html >/dev/null

echo
echo "== figures"
gain() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.1f points", (a - b) * 100 }'; }
if [ "$env" != needle_1m ]; then
  echo "success on $env's held-out seeds 1..$seeds (target: +15 points; the $gate figure counts):"
  echo "  sampled at T=$temp, as the actors play: before $before_t, after $after_t ($(gain "$after_t" "$before_t"))"
  echo "  greedy:                               before $before, after $after ($(gain "$after" "$before"))"
fi
echo "RL: $((t3 - t2)) s wall for the fleet"
if [ "$env" = needle_1m ]; then
  echo "needle_1m, greedy with sampling errors (targets: +15 points at 256K, 1M above the warm start):"
  echo "  at 256K on seeds 1..$seeds: before $(with_error "$before" "$seeds"), after $(with_error "$after" "$seeds") ($(gain "$after" "$before"))"
  echo "  at 1M on seeds 1..$seeds_1m: before $(with_error "$before_1m" "$seeds_1m"), after $(with_error "$after_1m" "$seeds_1m") ($(gain "$after_1m" "$before_1m"))"
fi
# The actors' peak resident memory per stage (a sample is the stage's
# from the stage's first step on), against the first stage's.
if [ -s actor_rss.txt ]; then
  sqlite3 -separator ' ' replay.db "SELECT stage, max_context, began_ms FROM stages ORDER BY stage" |
    awk 'NR == FNR { st[NR] = $1; ctx[NR] = $2; at[NR] = $3; n = NR; next }
         { s = 0; for (i = 1; i <= n; i++) if ($1 >= at[i]) s = i; if (s && $3 > peak[s]) peak[s] = $3 }
         END { for (i = 1; i <= n; i++) if (peak[i]) {
                 if (!base) base = peak[i]
                 printf "actor resident memory, stage %d (%d tokens): peak %d kB, %.2fx the first sampled stage'"'"'s\n",
                        st[i], ctx[i], peak[i], peak[i] / base } }' - actor_rss.txt
fi
# needle: where the fleet's own episodes went wrong, stage by stage.
if [ "$env" = needle ] || [ "$env" = needle_1m ]; then
  echo "where the fleet's last 200 ended episodes of each stage went wrong (bench/needle_breakdown.sh):"
  bash "$src/bench/needle_breakdown.sh" "$bin" replay.db 200 | sed 's/^/  /'
fi
echo "learner busy fraction (mean over steps >= 2): $busy (target >= 0.9)"
echo "actor tokens/s, sum over actors: $tok ($per_actor)"
echo "report: $work/report.html"

# Balance over the RL steps after a warm-up of 20: the worst layer's MaxVio
# per step (its mean and largest), and the experts that had no token for
# 10 steps in a row (runs of consecutive steps found as step - row_number).
warm=20
maxvio=$(sqlite3 replay.db "SELECT printf('%.2f %.2f', avg(w), max(w)) FROM (SELECT max(maxvio) AS w
  FROM train_step_layers WHERE step >= $warm GROUP BY step)")
# The same over the run's summed load (each expert's load added over those
# steps): the global MaxVio of the loss-free balancing paper, over the
# training batches rather than a validation set.
maxvio_run=$(sqlite3 replay.db "WITH s AS (SELECT layer, expert, sum(load) AS l FROM train_step_experts
    WHERE step >= $warm GROUP BY layer, expert)
  SELECT printf('%.2f', max(v)) FROM (SELECT max(l) / avg(l) - 1 AS v FROM s GROUP BY layer)")
dead=$(sqlite3 replay.db "WITH z AS (SELECT layer, expert, step,
    step - row_number() OVER (PARTITION BY layer, expert ORDER BY step) AS run
    FROM train_step_experts WHERE step >= $warm AND load = 0)
  SELECT count(*) FROM (SELECT DISTINCT layer, expert FROM z GROUP BY layer, expert, run HAVING count(*) >= 10)")
experts=$(key_of experts)
balance=$(key_of balance)
# What a step's imbalance costs under [learner] expert_parallel = P: rank j
# holds experts j E/P .. (j+1) E/P - 1, so its share of the step's work is
# their summed load; the worst layer's hottest rank over the mean, per step
# (mean over the steps), at P = 2 and 8.
rank_imbalance() {
  case $experts in '' | *[!0-9]*) echo n/a; return ;; esac
  sqlite3 replay.db "WITH r AS (SELECT step, layer, expert * $1 / $experts AS rank, sum(load) AS l
      FROM train_step_experts WHERE step >= $warm GROUP BY step, layer, rank),
    v AS (SELECT step, max(l) / avg(l) - 1 AS v FROM r GROUP BY step, layer)
    SELECT printf('%.3f', avg(w)) FROM (SELECT max(v) AS w FROM v GROUP BY step)" || echo n/a
}
rank2=$(rank_imbalance 2) rank8=$(rank_imbalance 8)
echo "balance ($balance) over RL steps >= $warm ($experts experts): worst layer's MaxVio per step mean ${maxvio% *}, largest ${maxvio#* };" \
  "over the run's summed load $maxvio_run; experts dead (no token for 10 steps in a row): $dead;" \
  "the hottest rank's excess per step with the experts over 2 / 8 ranks: $rank2 / $rank8"
[ "$env" = needle_1m ] && echo "before_1m=$before_1m after_1m=$after_1m seeds_1m=$seeds_1m seeds=$seeds" > record_1m.txt
echo "before=$before after=$after gain=$(awk -v a="$after" -v b="$before" 'BEGIN { printf "%.1f", (a - b) * 100 }')" \
  "maxvio=${maxvio% *} maxvio_max=${maxvio#* } maxvio_run=$maxvio_run dead=$dead experts=$experts balance=$balance" \
  "rank2=$rank2 rank8=$rank8" > record.txt
echo "record: $work/record.txt"
