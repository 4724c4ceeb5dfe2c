#!/usr/bin/env bash
# tests/learner/netns_hosts.sh LONGHAUL: learner ranks on two hosts and actors on a
# third, the hosts being network namespaces joined by a bridge (docs/operations.md,
# "Learner ranks on several hosts", way (a)).
#
#   10.77.0.1  host0: learner rank 0 (ingest, weights PUB and ROUTER)
#   10.77.0.2  host1: learner rank 1 (ingest)
#   10.77.0.3  host2: mpirun (the job's head) and the actors a0 -> rank 0,
#                     a1 -> rank 1
#
# The two ranks are one MPI job: mpirun reads a hostfile naming host0 and
# host1, and its rsh agent is a script that runs the command inside the
# named namespace (`ip netns exec`) instead of ssh; MPI's TCP traffic is
# kept to the bridge's subnet. CURVE is on. Every address and port lives
# inside the test's own namespaces, so fixed ports cannot collide with
# anything else on the machine. The run must train (train steps appear in
# rank 0's store), each rank's store must hold its own actor's episodes,
# and every message an actor had acked must be in the union of the rank
# stores as `longhaul replay` reads it: the actor's acked count against its
# stored segments and episode ends, and each (episode, seq or end) of its
# LH_ACK_LOG lines looked up among the stored ones.
#
# Needs root, iproute2 and an MPI build; exits 77 (skipped) otherwise. The
# namespaces, links and files are removed on every exit.
set -u
bin=${1:?usage: netns_hosts.sh LONGHAUL [EXPERT_PARALLEL]}
# With EXPERT_PARALLEL = 2 the two ranks are one expert group across the two
# hosts: each holds half of the experts and the tokens cross between them.
ep=${2:-1}
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; dump; exit 1; }
say() { echo "netns_hosts: $*"; }

[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip > /dev/null || skip "no ip (iproute2)"
command -v mpirun > /dev/null || skip "no mpirun"
ldd "$bin" 2> /dev/null | grep -q libmpi || skip "longhaul is built without MPI"

tag=lh$$h
ns=("${tag}0" "${tag}1" "${tag}2")
sw="${tag}s"
work=$(mktemp -d /tmp/lh-netns-hosts-XXXXXX)
pids=()
started=$(date +%s)

cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2> /dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2> /dev/null
  done
  # Processes still inside a namespace (orted, ranks) go with it.
  for n in "${ns[@]}" "$sw"; do
    for p in $(ip netns pids "$n" 2> /dev/null); do kill -KILL "$p" 2> /dev/null; done
    ip netns del "$n" 2> /dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

dump() {
  for f in "$work"/*.log; do
    [ -f "$f" ] || continue
    echo "---- $(basename "$f") (last lines)"
    tail -n 40 "$f"
  done
}

# ---- the hosts --------------------------------------------------------------
ip netns add "$sw" 2> "$work/ns.err" || skip "cannot create a network namespace: $(cat "$work/ns.err")"
ip -n "$sw" link add br0 type bridge || skip "cannot create a bridge"
ip -n "$sw" link set br0 up
for i in 0 1 2; do
  ip netns add "${ns[$i]}" || fail "ip netns add ${ns[$i]}"
  ip link add "${tag}v$i" type veth peer name "${tag}p$i" || skip "cannot create a veth pair"
  ip link set "${tag}v$i" netns "${ns[$i]}"
  ip link set "${tag}p$i" netns "$sw"
  ip -n "$sw" link set "${tag}p$i" master br0 up
  ip -n "${ns[$i]}" link set "${tag}v$i" name eth0
  ip -n "${ns[$i]}" addr add "10.77.0.$((i + 1))/24" dev eth0
  ip -n "${ns[$i]}" link set eth0 up
  ip -n "${ns[$i]}" link set lo up
done
# Every host reaches every other one before MPI starts (the daemons
# connect back to mpirun on host2, and the ranks to each other).
for i in 0 1 2; do
  for j in 0 1 2; do
    [ "$i" = "$j" ] && continue
    ok=0
    for _ in $(seq 50); do
      # A connection refused (port 9, nothing listens) is an answer from
      # the other host: it is reachable.
      ip netns exec "${ns[$i]}" timeout 2 bash -c "exec 3<> /dev/tcp/10.77.0.$((j + 1))/9" 2>&1 |
        grep -q refused && ok=1 && break
      sleep 0.1
    done
    [ "$ok" = 1 ] || fail "host$i cannot reach 10.77.0.$((j + 1))"
  done
done
say "hosts ${ns[*]} on 10.77.0.0/24 ($(($(date +%s) - started)) s)"

# ---- keys and the config ----------------------------------------------------
"$bin" keys generate --out "$work/keys" --name learner > /dev/null || fail "keys generate learner"
"$bin" keys generate --out "$work/keys" --name actor > /dev/null || fail "keys generate actor"
mkdir -p "$work/allowed" && cp "$work/keys/actor.pub" "$work/allowed/"
cat > "$work/fleet.ini" << EOF
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
skip_flat_groups = false
batch_episodes = 4
group_size = 4
train_window = 64
ckpt_every = 1000
warmup_steps = 0
total_steps = 100000
max_policy_lag = 1000
expert_parallel = $ep
ingest_endpoints = tcp://10.77.0.1:5555, tcp://10.77.0.2:5555
weights_pub_endpoint = tcp://10.77.0.1:5556
weights_endpoint = tcp://10.77.0.1:5557
curve_secret_key_file = $work/keys/learner.key
curve_allowed_keys = $work/allowed
db = $work/replay.db
ckpt_dir = $work/ckpt
[actor]
weights_pub_endpoint = tcp://10.77.0.1:5556
weights_endpoint = tcp://10.77.0.1:5557
curve_secret_key_file = $work/keys/actor.key
curve_server_key_file = $work/keys/learner.pub
max_context = 400
group_size = 4
batch = 4
resend_timeout_ms = 500
heartbeat_ms = 200
flush_timeout_ms = 15000
[env]
name = calc
EOF

# ---- the learner job: mpirun on host2, ranks on host0 and host1 -------------
cat > "$work/hostfile" << EOF
${ns[0]} slots=1
${ns[1]} slots=1
EOF
# mpirun's rsh agent: `agent [options] HOST COMMAND...` as ssh is called.
# Each "host" also gets its own hostname (a UTS namespace) and its own
# temporary folder: the namespaces share one filesystem and hostname, and
# OpenMPI's session folders, named by hostname, would collide.
cat > "$work/netns_agent.sh" << EOF
#!/bin/sh
while [ \$# -gt 0 ]; do
  case "\$1" in -*) shift ;; *) break ;; esac
done
host=\$1
shift
mkdir -p "$work/tmp/\$host"
export OMPI_MCA_orte_tmpdir_base="$work/tmp/\$host" TMPDIR="$work/tmp/\$host"
exec ip netns exec "\$host" unshare --uts /bin/sh -c "hostname \$host && \$*"
EOF
chmod +x "$work/netns_agent.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$work/tmp/head"
OMPI_MCA_orte_tmpdir_base="$work/tmp/head" TMPDIR="$work/tmp/head" ip netns exec "${ns[2]}" mpirun --hostfile "$work/hostfile" -n 2 --map-by node \
  --mca plm_rsh_agent "$work/netns_agent.sh" \
  --mca btl self,tcp --mca pml ob1 \
  --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
  -x PATH -x LD_LIBRARY_PATH \
  "$bin" learner --config "$work/fleet.ini" > "$work/learner.log" 2>&1 &
mpirun_pid=$!
pids+=("$mpirun_pid")

# ---- the actors on host2, one per rank ---------------------------------------
for r in 0 1; do
  LH_ACK_LOG="$work/acks-a$r.log" ip netns exec "${ns[2]}" "$bin" actor --config "$work/fleet.ini" --name "a$r" \
    --index "$r" --learner-rank "$r" > "$work/actor-a$r.log" 2>&1 &
  pids+=("$!")
done

sql() { "$bin" replay sql --db "$work/replay.db" "$1" 2> /dev/null | tail -n +2; }
steps=0
for _ in $(seq 600); do
  kill -0 "$mpirun_pid" 2> /dev/null || fail "the learner job ended early"
  if [ -f "$work/replay.db" ] && [ -f "$work/replay.db.rank1" ]; then
    steps=$(sql "SELECT count(*) FROM train_steps")
    [ "${steps:-0}" -ge 3 ] && break
  fi
  sleep 0.2
done
[ "${steps:-0}" -ge 3 ] || fail "no 3 train steps in 120 s (have ${steps:-0})"
say "train steps ${steps} ($(($(date +%s) - started)) s)"
grep -q "rank=1 ranks=2 comm=mpi ingest=tcp://10.77.0.2:5555" "$work/learner.log" ||
  fail "rank 1 did not bind 10.77.0.2:5555"
if [ "$ep" = 2 ]; then
  grep -q "rank=1 expert_parallel=2 group=0 shard=1 experts=2..3 of 4" "$work/learner.log" ||
    fail "rank 1 does not hold experts 2..3"
  bytes=$(sed -n 's/.*rank=1 step=.* exchange_bytes=\([0-9]*\).*/\1/p' "$work/learner.log" | tail -1)
  [ "${bytes:-0}" -gt 0 ] || fail "no tokens crossed between the hosts (exchange_bytes=${bytes:-none})"
  say "expert group across the hosts: rank 1 sent $bytes bytes of tokens in its last step"
fi

# ---- stop in order: the actors (they flush), then the job ---------------------
# Every wait is bounded, so the cleanup runs before ctest's timeout would
# kill this script (and leave the namespaces behind).
wait_exit() {  # PID SECONDS WHAT: the exit status must be 0
  for _ in $(seq $(($2 * 10))); do kill -0 "$1" 2> /dev/null || break; sleep 0.1; done
  kill -0 "$1" 2> /dev/null && fail "$3 still runs after $2 s"
  wait "$1" || fail "$3 exited $?"
}
for r in 0 1; do kill -TERM "${pids[$((r + 1))]}"; done
for r in 0 1; do wait_exit "${pids[$((r + 1))]}" 30 "actor a$r"; done
kill -USR1 "$mpirun_pid"
wait_exit "$mpirun_pid" 60 "the learner job"
pids=()
# CURVE: each rank's ZAP handler admitted the actor's key and refused none.
[ "$(grep -c "zap: ZAP handler stopped accepted=[1-9][0-9]* refused=0" "$work/learner.log")" = 2 ] ||
  fail "the ranks' ZAP handlers did not both admit the actors"

# ---- every acked message is in some rank's store -------------------------------
"$bin" replay stats --db "$work/replay.db" > "$work/stats.log" 2>&1 || fail "replay stats"
grep -q "rank stores  2 read as one (episode ids in more than one: 0)" "$work/stats.log" ||
  fail "replay stats did not read both rank stores: $(cat "$work/stats.log")"
for r in 0 1; do
  acked=$(sed -n 's/.*stopped name=a'"$r"' .* acked=\([0-9]*\).*/\1/p' "$work/actor-a$r.log" | tail -1)
  [ -n "$acked" ] || fail "no stopped line from a$r"
  logged=$(wc -l < "$work/acks-a$r.log")
  [ "$logged" -eq "$acked" ] || fail "a$r: $logged lines in its ack log, acked=$acked"
  stored=$(sql "SELECT coalesce(sum(segments_received) + sum(ended_ms IS NOT NULL), 0) FROM episodes
                WHERE actor = 'a$r'")
  say "a$r -> rank $r: acked $acked, stored $stored (union of the rank stores)"
  [ "$acked" -gt 0 ] || fail "a$r had nothing acked"
  [ "$stored" -ge "$acked" ] || fail "a$r: $((acked - stored)) acked messages are in no rank's store"
done
# By id: every "EPISODE SEQ" and "EPISODE end" in the ack logs is a segment
# or an episode end in the union view (ids unsigned, as the actors print them).
cat "$work"/acks-a*.log | awk '{ print $3, $4 }' | sort -u > "$work/acked.ids"
sql "SELECT printf('%llu', episode) || ' ' || seq FROM segments
     UNION ALL SELECT printf('%llu', id) || ' end' FROM episodes WHERE segment_count IS NOT NULL" |
  sort -u > "$work/stored.ids"
[ "$(wc -l < "$work/acked.ids")" -eq "$(cat "$work"/acks-a*.log | wc -l)" ] || fail "an id acked twice in the ack logs"
missing=$(comm -23 "$work/acked.ids" "$work/stored.ids" | wc -l)
[ "$missing" = 0 ] || fail "$missing acked messages are in no rank's store: $(comm -23 "$work/acked.ids" "$work/stored.ids" | head -3)"
say "acked ids $(wc -l < "$work/acked.ids"), all in the union of the rank stores"
# Each rank's file holds its own actor's episodes only (main is rank 0's
# file, rank1 rank 1's, in the connection that reads them as one).
[ "$(sql "SELECT count(*) FROM main.episodes WHERE actor = 'a1'")" = 0 ] || fail "a1's episodes in rank 0's store"
[ "$(sql "SELECT count(*) FROM rank1.episodes WHERE actor = 'a0'")" = 0 ] || fail "a0's episodes in rank 1's store"
[ "$(sql "SELECT count(*) FROM rank1.episodes")" -gt 0 ] || fail "rank 1's store is empty"
# Train steps and versions are rank 0's alone (the views take them from it).
[ "$(sql "SELECT (SELECT count(*) FROM rank1.train_steps) + (SELECT count(*) FROM rank1.policy_versions)")" = 0 ] ||
  fail "rank 1's store holds train steps or versions"
say "done in $(($(date +%s) - started)) s"
exit 0
