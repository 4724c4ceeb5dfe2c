#!/usr/bin/env bash
# scripts/curve.sh DB [ROWS]: the reward and success curves of a replay
# store's train_steps as text bars, the steps grouped into at most ROWS
# rows (default 20), each row the mean over its steps.
set -euo pipefail
db=$1
rows=${2:-20}
sqlite3 "$db" "SELECT step, version, success_rate, reward_mean FROM train_steps ORDER BY step" |
  awk -F'|' -v rows="$rows" '
    { step[NR] = $1; ver[NR] = $2; sr[NR] = $3; rw[NR] = $4 }
    END {
      if (NR == 0) { print "(no train steps yet)"; exit }
      per = int((NR + rows - 1) / rows)
      printf "%-11s %-9s %-7s %s\n", "steps", "versions", "success", "success (#) and reward (=), 0 .. 1"
      for (i = 1; i <= NR; i += per) {
        s = 0; r = 0; n = 0
        for (j = i; j < i + per && j <= NR; j++) { s += sr[j]; r += rw[j]; n++ }
        s /= n; r /= n
        bar = ""
        for (k = 0; k < 40; k++) bar = bar (k < s * 40 ? "#" : " ")
        rbar = ""
        for (k = 0; k < 40; k++) rbar = rbar (k < r * 40 ? "=" : " ")
        printf "%4d-%-6d %3d-%-5d %6.3f  |%s|\n", step[i], step[j - 1], ver[i], ver[j - 1], s, bar
        printf "%11s %9s %6.3f  |%s|\n", "", "reward", r, rbar
      }
    }'
