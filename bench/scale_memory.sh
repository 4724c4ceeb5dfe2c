#!/usr/bin/env bash
# bench/scale_memory.sh [BUILD]: the actor's memory and prefill rate
# against the context, on the demo model
# (examples/model.ini). One actor (batch 1, one OpenBLAS thread:
# [actor] blas_threads = 1) plays one `needle` episode whose first
# observation is a document of each size in LH_SCALE_MEMORY_TOKENS
# (default "4096 65536 262144 1048576"), against bench_actor_memory's
# stand-in learner, which acks every message. Printed per size: the peak
# resident set (VmHWM) against the 4K run's (target <= 1.5x), and the
# prefill rate (document tokens / seconds from the actor's Hello to the
# first sampled token: the environment's reset and the segments' way out
# included, the process's start and model load not) against the 4K run's
# (target at the largest size >= 0.8). The first size is the
# reference. The machine's load is printed: the rates share its cores.
# LH_SCALE_MEMORY_GROUP=N plays one group of N episodes instead ([actor]
# batch and group_size N, stored states every 1,024 tokens, as the needle
# runs of bench/learn.sh): the members share the leader's prefill.
set -euo pipefail
build=${1:-build}
sizes=${LH_SCALE_MEMORY_TOKENS:-4096 65536 262144 1048576}
group=${LH_SCALE_MEMORY_GROUP:-1}
bin=$(cd "$build" && pwd)/cli/longhaul
probe=$(cd "$build" && pwd)/bench/bench_actor_memory
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/lh-scale-memory-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$bin" init --config "$src/examples/model.ini" --seed 1 --out "$work/ckpt" > /dev/null
largest=0
for n in $sizes; do [ "$n" -gt "$largest" ] && largest=$n; done
cat > "$work/actor.ini" <<INI
include = $src/examples/model.ini
[learner]
[actor]
batch = $group
group_size = $group
segment_tokens = 512
$([ "$group" -gt 1 ] && echo "state_interval = 1024")
max_steps = 1
max_context = $((largest + largest / 4 + 1000))
learner_endpoint = ipc://$work/ingest
weights_pub_endpoint = none
flush_timeout_ms = 60000
blas_threads = 1
seed = 3
[env]
name = needle
INI
echo "scale_memory: demo model (examples/model.ini), needle, actor batch $group (a group of $group), blas_threads 1; load: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
printf '%-10s %10s %8s %12s %8s\n' tokens hwm_kB vs_first prefill_tok/s vs_first
ref_kb=0
ref_rate=0
for n in $sizes; do
  line=$(LH_BIN=$bin "$probe" "$work/actor.ini" "$work/ckpt" "$n" "ipc://$work/ingest" "$group" 2> "$work/actor-$n.log") || {
    echo "scale_memory: the actor at $n tokens failed: $line (log: tail below)"
    tail -5 "$work/actor-$n.log"
    exit 1
  }
  kb=$(sed -n 's/.*hwm_kb=\([0-9]*\).*/\1/p' <<< "$line")
  rate=$(sed -n 's/.*prefill_tok_s=\([0-9.]*\).*/\1/p' <<< "$line")
  if [ "$ref_kb" = 0 ]; then ref_kb=$kb ref_rate=$rate; fi
  awk -v n="$n" -v kb="$kb" -v rk="$ref_kb" -v r="$rate" -v rr="$ref_rate" \
    'BEGIN { printf "%-10s %10d %7.2fx %12.0f %7.2fx\n", n, kb, kb / rk, r, (rr > 0 ? r / rr : 0) }'
done
echo "targets: resident memory <= 1.5x the first size's; prefill tokens/s at the largest size >= 0.8x the first's"
