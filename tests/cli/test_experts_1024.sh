#!/usr/bin/env bash
# tests/cli/test_experts_1024.sh BUILD: the shipped examples/experts_1024.ini
# end to end at small sizes (its 1,024 experts top 16 kept; d_model 32,
# 2 layers, small batches; the fresh model's groups are flat, every reward
# 0: trained all the same), as real processes:
#   1. `longhaul launch` with its two expert-parallel learner ranks under
#      mpirun and two actors on calc, for 4 train steps: each rank logs the
#      half of the experts it holds, rank 0's store has the steps with a
#      load row for every one of the 1,024 experts of every layer, and the
#      checkpoint holds the balancer's state;
#   2. that checkpoint, written at expert_parallel = 2, resumed by two
#      learner ranks at expert_parallel = 2 under mpirun (each its shard),
#      then by one learner at expert_parallel = 1 (model, optimizer,
#      balancer);
#   3. `longhaul report` on the store: the expert-load maps binned, 64 rows
#      of 16 experts each.
# Exit 77 (skipped) without mpirun. LH_KEEP=1 keeps the folder.
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=$build/cli/longhaul
command -v mpirun > /dev/null 2>&1 || { echo "test_experts_1024: no mpirun; skipped"; exit 77; }
dir=$(mktemp -d /tmp/lh-test-experts-XXXXXX)
if [ "${LH_KEEP:-0}" = 1 ]; then echo "test_experts_1024: keeping $dir"; else trap 'rm -rf "$dir"' EXIT; fi
fail() {
  echo "test_experts_1024: FAILED: $*" >&2
  for f in "$dir"/out.txt "$dir"/logs/launch.log "$dir"/logs/learner*.log "$dir"/resume2.log "$dir"/resume.log; do
    [ -f "$f" ] && { echo "---- $f, last 30 lines:" >&2; tail -n 30 "$f" >&2; }
  done
  exit 1
}

# Thirteen consecutive free TCP ports of 127.0.0.1: rank 0's three and
# rank 1's ingest (rank 0's + 10).
port=$("$(dirname "$0")/../free_ports.py" 13 || true)
[ -n "$port" ] || fail "no free TCP ports"
cd "$dir"
sets=(--set "fleet.log_dir=$dir/logs" --set "learner.db=$dir/replay.db" --set "learner.ckpt_dir=$dir/ckpt"
  --set fleet.duration_s=0 --set fleet.steps=4 --set fleet.status_interval_ms=1000
  --set model.d_model=32 --set model.layers=2 --set model.heads=2 --set model.latent=16
  --set learner.batch_episodes=8 --set learner.group_size=4 --set actor.group_size=4 --set actor.batch=8
  --set learner.ckpt_every=2 --set learner.warmup_steps=0 --set learner.total_steps=100
  --set learner.skip_flat_groups=false
  --set "learner.ingest_endpoint=tcp://127.0.0.1:$port"
  --set "learner.weights_pub_endpoint=tcp://127.0.0.1:$((port + 1))"
  --set "learner.weights_endpoint=tcp://127.0.0.1:$((port + 2))")
rc=0
"$bin" launch "$src/examples/experts_1024.ini" "${sets[@]}" --status off > out.txt 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "launch exited $rc"
grep -q "expert_parallel=2 group=0 shard=0 experts=0\.\.511 of 1024" logs/learner.log ||
  fail "rank 0 did not log its half of the experts"
grep -rq "expert_parallel=2 group=0 shard=1 experts=512\.\.1023 of 1024" logs/ ||
  fail "rank 1 did not log its half of the experts"
steps=$(sqlite3 replay.db "SELECT count(*) FROM train_steps")
[ "$steps" -ge 4 ] || fail "$steps train steps stored, 4 wanted"
rows=$(sqlite3 replay.db "SELECT count(*) FROM train_step_experts WHERE step = (SELECT min(step) FROM train_steps)")
[ "$rows" = 2048 ] || fail "the first step has $rows expert load rows, 2 layers x 1024 wanted"
[ -f ckpt/latest ] || fail "no checkpoint (ckpt/latest)"
latest=ckpt/$(cat ckpt/latest)
[ -s "$latest/balancer.bin" ] || fail "the checkpoint $latest holds no balancer state"

# 2. Two ranks at expert_parallel = 2 resume the checkpoint of two, each
# its shard; then one learner at expert_parallel = 1 resumes it whole.
# In a process group of its own, which the signal goes to, as launch does.
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 setsid mpirun --oversubscribe -n 2 \
  "$bin" learner --config "$src/examples/experts_1024.ini" "${sets[@]}" --resume > resume2.log 2>&1 &
ranks=$!
for _ in $(seq 600); do
  [ "$(grep -c "resumed ckpt_dir=.* step=[1-9]" resume2.log)" -ge 2 ] && break
  kill -0 "$ranks" 2>/dev/null || break
  sleep 0.1
done
[ "$(grep -c "resumed ckpt_dir=.* step=[1-9]" resume2.log)" -ge 2 ] ||
  { kill -- -"$ranks" 2>/dev/null || true; fail "the two ranks did not both resume at expert_parallel = 2"; }
# SIGUSR1 to mpirun, as launch stops a job of ranks: mpirun forwards it to
# both, which stop at the same turn. (A SIGTERM makes mpirun end the job
# itself, at times before a rank has written that it stopped.)
kill -USR1 "$ranks"
wait "$ranks" || true
# Each rank's stop is read from its log.
[ "$(grep -c "service stopped" resume2.log)" = 2 ] || fail "the resumed ranks did not both stop cleanly"
! grep -q "^error" resume2.log || fail "the resumed ranks logged an error"

"$bin" learner --config "$src/examples/experts_1024.ini" "${sets[@]}" --set fleet.learners=1 \
  --set learner.expert_parallel=1 --resume > resume.log 2>&1 &
learner=$!
for _ in $(seq 600); do
  grep -q "resumed ckpt_dir=" resume.log && break
  kill -0 "$learner" 2>/dev/null || break
  sleep 0.1
done
grep -q "resumed ckpt_dir=.* step=[1-9]" resume.log || { kill "$learner" 2>/dev/null || true; fail "no resume at expert_parallel = 1"; }
kill -TERM "$learner"
rc=0
wait "$learner" || rc=$?
[ "$rc" = 0 ] || fail "the resumed learner exited $rc after SIGTERM"

# 3. The report's expert-load maps at 1,024 experts.
"$bin" report --db replay.db --out report.html > /dev/null || fail "report failed"
grep -q 'id="expert-load-bins"' report.html || fail "the report does not bin the experts"
grep -q '>0-15</text>' report.html || fail "the report's expert rows are not labelled by bin"
echo "test_experts_1024: ok: $steps steps at expert_parallel = 2, resumed at 2 and at 1; report binned"
