#!/usr/bin/env bash
# bench/agent.sh [BUILD] [SECONDS] [CKPT]: what a turn costs through the agent
# endpoint (docs/agents.md), against the same environment played through
# an env server, in the same run. Both runs: one learner, one actor
# (batch 16, groups of 8, the demo model, one thread), the calc
# task of examples/agents/calc_agent.py, 16 episodes in flight:
#   env server: bench/agent_peers.py server, a longhaul_env env server
#               (Debian's /usr/bin/python3, which has zmq and protobuf);
#   agent:      2 x bench/agent_peers.py agent, calc_agent.py's loop over
#               HTTP, a group of 8 each.
# The model is CKPT (a folder with model.safetensors: bench/learn.sh's
# sft warm start, which writes well-formed calls; [model] is then
# bench/learn.ini's, which trained it) when given, else the
# demo model at its init, whose turns are mostly malformed: the env
# server path then answers them in the actor (an error observation)
# without a round trip, and times only the few it sees.
# Turns per second are counted from the store (the steps of the episodes
# that ended in the measured SECONDS, default 60, after 10 s of warm-up);
# the latency of a turn (observation handed over -> action back, as the
# environment's side sees it) from the peers' own clocks, p50 and p99.
# Its last line:
#   agent turn: rate R.RRx of the env server's, p99 latency L.LLx
# (target: a turn through the agent costs at most 2x: rate >= 0.5x,
# latency <= 2x).
set -euo pipefail
build=${1:-build}
secs=${2:-60}
src=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/cli/longhaul
init=() model="include = $src/examples/model.ini"
if [ -n "${3:-}" ]; then
  init=(--init "$(cd "$3" && pwd)")
  model=$(sed -n '/^\[model\]/,/^\[/p' "$src/bench/learn.ini" | sed '$d')
fi
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "${LH_BENCH_KEEP:-}" ]; then echo "bench/agent: logs kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
now_ms() { date +%s%3N; }

# One run: $1 the name, $2 the [env] section; the peers come from start_peers.
config() {
  cat > "$work/$1.ini" <<EOF
$model
[learner]
batch_episodes = 16
group_size = 8
max_policy_lag = 1000  ; no stale drops: they shrink the credit window, which then measures the learner
ingest_endpoint = ipc://$work/$1-ing
weights_pub_endpoint = ipc://$work/$1-pub
weights_endpoint = ipc://$work/$1-w
db = $work/$1.db
ckpt_dir = $work/$1-ckpt
[actor]
batch = 16
group_size = 8
temperature = 1.0
segment_tokens = 256
max_context = 512
blas_threads = 1
agent_address = 127.0.0.1:$agent_port
agent_timeout_ms = 60000
[env]
$2
EOF
}

run() {
  local name=$1
  pids=()
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$bin" learner --config "$work/$name.ini" "${init[@]}" \
    > "$work/$name-learner.log" 2>&1 &
  pids+=($!)
  start_peers "$name"
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$bin" actor --config "$work/$name.ini" --name a0 > "$work/$name-actor.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 300); do grep -q "weights swapped" "$work/$name-actor.log" 2>/dev/null && break; sleep 0.1; done
  start_agents "$name"
  sleep 10
  local t0 t1
  t0=$(now_ms)
  sleep "$secs"
  t1=$(now_ms)
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  turns=$(sqlite3 "$work/$name.db" "SELECT coalesce(sum(steps), 0) FROM episodes WHERE ended_ms BETWEEN $t0 AND $t1")
  rate=$(awk -v n="$turns" -v ms=$((t1 - t0)) 'BEGIN { printf "%.1f", n * 1000 / ms }')
  lat=$(cat "$work/$name"-*.lat | sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) { print "0 0"; exit }
    printf "%.2f %.2f", v[int((NR - 1) * 0.5) + 1], v[int((NR - 1) * 0.99) + 1] }')
  echo "$name: $turns turns in $(((t1 - t0) / 1000)) s = $rate turns/s; turn latency p50 ${lat% *} ms, p99 ${lat#* } ms" \
    "($(cat "$work/$name"-*.lat | wc -l) turns timed)" >&2
  eval "${name}_rate=$rate ${name}_p99=${lat#* }"
}

agent_port=$(free_port)
server_ep="tcp://127.0.0.1:$(free_port)"
echo "bench/agent: ${secs} s a run, one thread for each process, model ${3:-at its init}; $(nproc) cores," \
  "load $(cut -d' ' -f1 /proc/loadavg)" >&2

config envserver "name = calc_py
server = $server_ep"
start_peers() {
  /usr/bin/python3 "$src/bench/agent_peers.py" server "$server_ep" "$work/$1-server.lat" > "$work/$1-server.log" 2>&1 &
  pids+=($!)
}
start_agents() { :; }
run envserver

config agent "name = agent"
start_peers() { :; }
start_agents() {
  for j in 0 1; do
    OPENAI_BASE_URL="http://127.0.0.1:$agent_port/v1" LONGHAUL_GROUP_SIZE=8 \
      /usr/bin/python3 "$src/bench/agent_peers.py" agent "$work/$1-$j.lat" > "$work/$1-agent$j.log" 2>&1 &
    pids+=($!)
  done
}
run agent

awk -v ar="$agent_rate" -v er="$envserver_rate" -v al="$agent_p99" -v el="$envserver_p99" 'BEGIN {
  printf "agent turn: rate %.2fx of the env server'\''s, p99 latency %.2fx\n", (er > 0 ? ar / er : 0), (el > 0 ? al / el : 0) }'
