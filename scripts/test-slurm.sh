#!/usr/bin/env bash
# `make test-slurm`: a tiny fleet launched through a real Slurm on this
# machine (docs/operations.md, "Slurm"). Starts a private munged, slurmctld and
# slurmd (scripts/slurm-cluster.sh), submits `longhaul launch FLEET.ini
# --slurm` on two nodes (two learner ranks as one MPI job step, one rank
# per node, two actors as steps of their own), kills one actor's step and then the learner's and checks the
# launcher restarts each as a new step (the learner with --resume), then
# checks that the fleet trained ([fleet] steps rows in train_steps), shut
# down in order (actors before the learner, in the launcher's log) and that
# the job ended COMPLETED; a second fleet without an end is stopped with
# `scancel --batch --signal=TERM` and must stop in order; a third, under a
# 2-minute time limit with 15 s steps, must stop by itself before the limit
# (the stop sized by the measured step). Every daemon it
# started is stopped at the end, also on failure.
#   scripts/test-slurm.sh [BUILD_DIR] [EXPERT_PARALLEL]   (default: build 1)
# With EXPERT_PARALLEL = 2 the two ranks (one per node) are one expert group:
# each holds half of the experts and the tokens cross between the nodes,
# through the learner step killed and resumed as above.
# Exit 0 pass, 1 fail, 77 skipped (no Slurm or munge, or not root).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
ep=${2:-1}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
bin="$build/cli/longhaul"
[ -x "$bin" ] || bin="$build/longhaul"

skip() { echo "test-slurm: SKIP: $*"; exit 77; }
for tool in munged slurmctld slurmd sbatch srun squeue scontrol scancel sinfo sqlite3; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/deps.sh installs slurmctld slurmd slurm-client munge)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start job steps"
[ -x "$bin" ] || { echo "test-slurm: FAIL: no longhaul binary under $build (build first)"; exit 1; }

source "$root/scripts/slurm-cluster.sh"
tmp=$(mktemp -d /tmp/lh-slurm.XXXXXX)
status=1
finish() {
  slurm_cluster_stop
  if [ $status -eq 0 ]; then rm -rf "$tmp"; else echo "test-slurm: files kept in $tmp"; fi
}
trap finish EXIT
trap 'exit 1' INT TERM

fail() {
  echo "test-slurm: FAIL: $*"
  for f in logs/launch.log logs/slurm-*.out logs/learner.log \
    logs/actor-0.log; do
    [ -f "$f" ] && { echo "---- $f (tail)"; tail -n 25 "$f"; }
  done
  exit 1
}

# Waits (up to 300 s) for job $1 to leave the queue; fails unless it ended
# COMPLETED with exit code 0.
wait_job() {
  local end=$((SECONDS + 300)) state code
  while [ $SECONDS -lt $end ] && squeue -h -j "$1" -o %i 2>/dev/null | grep -q .; do sleep 0.5; done
  squeue -h -j "$1" -o %i | grep -q . && fail "job $1 still runs after 300 s"
  state=$(scontrol show job "$1" | grep -o 'JobState=[A-Z_]*')
  code=$(scontrol show job "$1" | grep -o ' ExitCode=[0-9:]*' | tr -d ' ')
  echo "test-slurm: job $1 $state $code"
  [ "$state" = "JobState=COMPLETED" ] && [ "$code" = "ExitCode=0:0" ] || fail "job $1 ended $state $code"
}

# SIGKILL to job step $1 of $job until ./logs/launch.log matches $2 (the
# launcher started its child again), for up to 120 s. A step that has just
# appeared may not take the signal yet (scancel: "Kill job error on job
# step"), so it is sent again while the step is still listed.
kill_step() {
  local end=$((SECONDS + 120)) next=0
  while [ $SECONDS -lt $end ] && ! grep -q "$2" logs/launch.log 2>/dev/null; do
    if [ $SECONDS -ge $next ] && squeue -h -s -j "$job" -o '%i' 2>/dev/null | grep -qx "$1"; then
      scancel --signal=KILL "$1" || echo "test-slurm: scancel $1 failed; trying again"
      next=$((SECONDS + 2))
    fi
    sleep 0.2
  done
}

# Ordered shutdown in ./logs/launch.log: every actor stopped before the
# learner was asked to stop.
check_order() {
  local order
  order=$(grep -oE 'stopped name=(actor-[0-9]+|learner)|actors stopped: stopping the learner' logs/launch.log | tr '\n' ' ')
  echo "test-slurm: shutdown order: $order"
  case "$order" in
    "stopped name=actor-"*"stopped name=actor-"*"actors stopped: stopping the learner stopped name=learner ") ;;
    *) fail "the shutdown was not actors, then the learner" ;;
  esac
}

echo "test-slurm: starting munged, slurmctld, slurmd under $tmp/cluster"
slurm_cluster_start "$tmp/cluster" 2 4 || fail "the cluster did not come up (logs in $tmp/cluster/log)"
sinfo
# Four free ports P, P+10 (rank 1's ingest), P+1, P+2, picked once the
# daemons hold theirs, so that no port is picked twice.
base=$(slurm_cluster_free_ports 0 10 1 2)
[ -n "$base" ] || fail "no free ports"

steps=60
mkdir -p "$tmp/fleet"
cat > "$tmp/fleet/fleet.ini" <<EOF
[fleet]
learners = 2
actors = 2
log_dir = logs
steps = $steps
restart_backoff_ms = 200
stop_timeout_ms = 20000
status_interval_ms = 1000
slurm_time = 10:00
slurm_nodes = 2
slurm_options = --comment=longhaul-test

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
vocab = 264
patch = 8
max_patches = 64
seed = 1

[learner]
skip_flat_groups = false
expert_parallel = $ep
batch_episodes = 4
group_size = 4
train_window = 64
warmup_steps = 0
max_policy_lag = 4
ckpt_every = 2
ingest_endpoint = tcp://127.0.0.1:$base
weights_pub_endpoint = tcp://127.0.0.1:$((base + 1))
weights_endpoint = tcp://127.0.0.1:$((base + 2))
db = replay.db
ckpt_dir = ckpt

[actor]
batch = 4
group_size = 4
max_context = 512
max_steps = 4
flush_timeout_ms = 15000
; no endpoints: the launcher gives the actors the learner nodes' addresses

[env]
name = calc
stages = 1
digits = 1
EOF

cd "$tmp/fleet" || fail "no fleet folder"
out=$("$bin" launch fleet.ini --slurm) || fail "launch --slurm: $out"
echo "$out"
job=$(echo "$out" | sed -n 's/^submitted job \([0-9]*\).*/\1/p')
run=$(echo "$out" | sed -n 's/^submitted job [0-9]* (run \([^,]*\),.*/\1/p')
[ -n "$job" ] && [ -n "$run" ] || fail "no job id or run id in: $out"
grep -q -- '--engine slurm' logs/slurm.sh || fail "the batch script does not run --engine slurm"
grep -q -- '#SBATCH --comment=longhaul-test' logs/slurm.sh || fail "slurm_options are not in the batch script"

# Kill actor-0's step once it runs: the launcher must start it again as a
# new step.
end=$((SECONDS + 120))
step=""
steps_seen=""
while [ $SECONDS -lt $end ] && [ -z "$step" ]; do
  steps_seen=$(squeue -h -s -j "$job" -o '%i %j' 2>&1)
  step=$(echo "$steps_seen" | awk '$2 == "actor-0" {print $1}')
  [ -n "$step" ] || sleep 0.2
done
[ -n "$step" ] || fail "actor-0 never ran as a job step of job $job (squeue -s: $steps_seen)"
echo "test-slurm: killing actor-0's step $step"
kill_step "$step" 'started name=actor-0 .*attempt=2'
grep -q 'started name=actor-0 .*attempt=2' logs/launch.log || fail "actor-0 was not restarted"
step2=""
end=$((SECONDS + 60))
while [ $SECONDS -lt $end ] && [ -z "$step2" ]; do
  step2=$(squeue -h -s -j "$job" -o '%i %j' 2>/dev/null | awk -v old="$step" '$2 == "actor-0" && $1 != old {print $1}')
  [ -n "$step2" ] || sleep 0.2
done
echo "test-slurm: actor-0 came back as step ${step2:-(gone already)}"

# The same for the learner's step (both ranks): it comes back with --resume.
lstep=$(squeue -h -s -j "$job" -o '%i %j' 2>&1 | awk '$2 == "learner" {print $1}')
[ -n "$lstep" ] || fail "no learner step in job $job"
echo "test-slurm: killing the learner's step $lstep"
kill_step "$lstep" 'started name=learner .*attempt=2'
grep -q 'started name=learner .*attempt=2' logs/launch.log || fail "the learner was not restarted"
grep -q 'attempt=2 .*command=srun --ntasks=2 .* learner .*--resume' logs/learner.log ||
  fail "the learner did not come back with --resume"

# The job ends by itself once the store holds $steps train steps.
wait_job "$job"

rows=$(sqlite3 replay.db 'SELECT count(*) FROM train_steps')
[ "${rows:-0}" -ge "$steps" ] || fail "train_steps has ${rows:-0} rows, want >= $steps"
echo "test-slurm: train_steps rows=$rows (steps=$steps)"
grep -q "slurm job=$job learner_nodes=2 first=lh-n1 " logs/launch.log ||
  fail "the launcher did not run with --engine slurm on two nodes"
# Rank r runs on node r + 1 (127.0.0.<r+1>) and binds there; every child
# reads the same endpoints, and rank 1's actors connect to rank 1's.
eps="--set learner.ingest_endpoints=tcp://127.0.0.1:$base,tcp://127.0.0.2:$((base + 10)) "
grep -q -- "$eps" logs/learner.log || fail "the learner ranks do not bind their nodes' addresses"
grep -q -- "--learner-rank 1 .*$eps" logs/actor-1.log || fail "actor-1 does not get the ranks' endpoints"
grep -q -- "--set actor.weights_endpoint=tcp://127.0.0.1:$((base + 2))" logs/actor-1.log ||
  fail "rank 1's actors do not take the weights from rank 0's node"
grep -q "connected to the learner endpoint=tcp://127.0.0.2:$((base + 10))" logs/actor-1.log ||
  fail "actor-1 did not connect to rank 1 on its node"
grep -q -- '--nodes=2 --nodelist=lh-n1,lh-n2 --distribution=cyclic' logs/learner.log ||
  fail "the learner step does not span both nodes"
grep -q 'command=srun --ntasks=2 .*--mpi=pmix .* learner --config ' logs/learner.log ||
  fail "the learner was not one srun step of 2 MPI ranks"
grep -q 'command=srun --ntasks=1 .*--overlap .* actor --config ' logs/actor-1.log ||
  fail "actor-1 was not an srun step of its own"
grep -q 'done reason=steps done clean=1' logs/launch.log || fail "the launcher did not end cleanly"
grep -q "fleet run_id=$run " logs/launch.log || fail "the job's launcher did not keep the submitted run id $run"
grep -q 'restarts: learner=1 actor-0=1 actor-1=0' logs/launch.log || fail "the restart counts are not learner=1 actor-0=1"
if [ "$ep" = 2 ]; then
  grep -q 'expert group 0: ranks 0,1' logs/launch.log || fail "launch.log does not name the expert group"
  grep -q 'rank=1 expert_parallel=2 group=0 shard=1 ' logs/learner.log || fail "rank 1 does not hold shard 1"
  grep -q 'rank=1 step=.* exchange_bytes=[1-9]' logs/learner.log || fail "no tokens crossed between the nodes"
fi
check_order
echo "test-slurm: launch.log:"
sed 's/^/  /' logs/launch.log | tail -n 20

# A second fleet with no end of its own, stopped the way docs/operations.md says:
# SIGTERM to the batch script's launcher alone, which stops the steps in order.
mkdir -p "$tmp/fleet2"
sed 's/^steps = .*/steps = 0/' "$tmp/fleet/fleet.ini" > "$tmp/fleet2/fleet.ini"
cd "$tmp/fleet2" || fail "no fleet2 folder"
out=$("$bin" launch fleet.ini --slurm) || fail "launch --slurm: $out"
job=$(echo "$out" | sed -n 's/^submitted job \([0-9]*\).*/\1/p')
[ -n "$job" ] || fail "no job id in: $out"
end=$((SECONDS + 120))
while [ $SECONDS -lt $end ] && [ "$(sqlite3 replay.db 'SELECT count(*) FROM train_steps' 2>/dev/null || echo 0)" -lt 3 ]; do
  sleep 0.5
done
echo "test-slurm: job $job trains; scancel --batch --signal=TERM $job"
scancel --batch --signal=TERM "$job" || fail "scancel --batch $job"
wait_job "$job"
grep -q 'shutdown reason=signal' logs/launch.log || fail "the launcher did not stop on the signal"
grep -q 'done reason=signal clean=1' logs/launch.log || fail "the launcher did not end cleanly after the signal"
check_order

# A third fleet with a time limit of 2 minutes and steps of 15 s
# (LH_LEARNER_TEST_STEP_DELAY_MS, which sbatch and srun pass on): the batch
# script's --signal would come 69 s before the limit (the actors' phase
# flush_timeout_ms + 4 s = 19 s, the learner's and the env server's
# stop_timeout_ms = 10 s each, 30 s to spare), but the learner may need
# 3 x 15 s to stop, so the launcher begins the ordered stop itself,
# once the time left is less than the whole stop may take, and the job
# ends COMPLETED before Slurm would kill it.
if [ "$ep" = 1 ]; then
  mkdir -p "$tmp/fleet3"
  sed -e 's/^steps = .*/steps = 0/' -e 's/^slurm_time = .*/slurm_time = 2/' \
      -e 's/^stop_timeout_ms = .*/stop_timeout_ms = 10000/' "$tmp/fleet/fleet.ini" > "$tmp/fleet3/fleet.ini"
  cd "$tmp/fleet3" || fail "no fleet3 folder"
  out=$(LH_LEARNER_TEST_STEP_DELAY_MS=15000 "$bin" launch fleet.ini --slurm) || fail "launch --slurm: $out"
  job=$(echo "$out" | sed -n 's/^submitted job \([0-9]*\).*/\1/p')
  [ -n "$job" ] || fail "no job id in: $out"
  grep -q -- '#SBATCH --signal=B:TERM@69$' logs/slurm.sh || fail "the batch script's --signal is not 69 s"
  wait_job "$job"
  grep -q "slurm: job=$job time limit in 1[0-9][0-9] s; " logs/launch.log || fail "the launcher did not read the time limit"
  grep -q 'shutdown reason=time limit' logs/launch.log || fail "the launcher did not stop before the time limit"
  grep -q 'done reason=time limit clean=1' logs/launch.log || fail "the launcher did not end cleanly before the limit"
  grep -q 'longest recent step 1[5-9][0-9][0-9][0-9] ms' logs/launch.log || fail "the stop was not sized by the step"
  check_order
  echo "test-slurm: launch.log of the fleet under a time limit:"
  grep -E 'slurm: job|shutdown reason|stopping the learner|done reason' logs/launch.log | sed 's/^/  /'
fi
status=0
echo "test-slurm: PASS"
