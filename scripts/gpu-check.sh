#!/usr/bin/env bash
# gpu-check: on a machine with an NVIDIA H200, build the CUDA backend for
# sm_90a, run the CUDA tests and the GPU benchmarks, and write every log and
# figure to $OUT (./gpu-results when unset). Each step has its own timeout
# and the whole run stays under 8 minutes; a step that would start too late
# is skipped and reported. Exit status: 0 when every step passed.
#
#   OUT=/tmp/gpu scripts/gpu-check.sh        BUILD=build-gpu by default
#
# Steps, in order (the figures first, the slow sanitizer passes last, so a
# tight budget cuts those): device (nvidia-smi), configure, build (only the
# targets named *cuda*/*gpu*: test_kernels_cuda, test_kernels_cuda_train,
# bench_kernels_cuda), tests (ctest -R cuda: every kernel against the CPU
# backend, NCCL on one rank, the model's fp32 step, decode and 50 bf16
# steps), the benchmarks (bench_kernels_cuda: attention and MoE against the
# bf16 cuBLAS rate and a dense GEMM, the 16-layer training step's tokens/s
# and MFU against the CPU backend), then test_kernels_cuda under
# compute-sanitizer memcheck and racecheck. $OUT/summary.txt has one line
# per step and the benchmarks' figure lines; $OUT/<step>.log the output.
# A run in which the tests reported "skipped: no CUDA device" fails.
# Environment: OUT, BUILD, GPU_CHECK_BUDGET_S (seconds, default 470).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-./gpu-results}
build=${BUILD:-$root/build-gpu}
budget=${GPU_CHECK_BUDGET_S:-470}  # seconds for all steps together (< 8 min)
jobs=$(nproc 2>/dev/null || echo 4)
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary=$out/summary.txt
: >"$summary"
failed=0
start=$SECONDS

# step NAME TIMEOUT_S CMD...: runs CMD with a timeout (cut to what is left of
# the budget), its output to $out/NAME.log and the console, and one line to
# the summary.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - (SECONDS - start)))
  if ((left < 10)); then
    echo "$name: SKIPPED (time budget spent)" | tee -a "$summary"
    failed=1
    return 1
  fi
  ((limit > left)) && limit=$left
  local t0=$SECONDS rc=0
  echo "== $name (timeout ${limit}s)"
  timeout --kill-after=5 "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
  tail -n 40 "$out/$name.log"
  local verdict=ok
  if ((rc == 124 || rc == 137)); then
    verdict="TIMEOUT after ${limit}s"
  elif ((rc != 0)); then
    verdict="FAILED rc=$rc"
  fi
  echo "$name: $verdict ($((SECONDS - t0))s)" | tee -a "$summary"
  [[ $verdict == ok ]] || failed=1
  [[ $verdict == ok ]]
}

{
  echo "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} | tee -a "$summary"

if command -v nvidia-smi >/dev/null 2>&1; then
  step device 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
    --format=csv
else
  echo "device: nvidia-smi not found" | tee -a "$summary"
fi

if ! step configure 90 cmake -S "$root" -B "$build" -DLH_CUDA=on \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release; then
  echo "gpu-check: configure failed; see $out/configure.log" | tee -a "$summary"
  exit 1
fi

# Only the CUDA tests and the GPU benchmarks: the rest of the project is
# checked by the ordinary CPU test run.
mapfile -t targets < <(cmake --build "$build" --target help 2>/dev/null |
  grep -Eo '(test|bench)_[A-Za-z0-9_]*(cuda|gpu)[A-Za-z0-9_]*' | sort -u)
if ((${#targets[@]} == 0)); then
  echo "build: no CUDA test or benchmark target found" | tee -a "$summary"
  exit 1
fi
echo "targets: ${targets[*]}" | tee -a "$summary"
if ! step build 240 cmake --build "$build" -j"$jobs" --target "${targets[@]}"; then
  echo "gpu-check: build failed; see $out/build.log" | tee -a "$summary"
  exit 1
fi

step tests 150 ctest --test-dir "$build" -R cuda --output-on-failure --timeout 140
cp "$build/Testing/Temporary/LastTest.log" "$out/ctest-LastTest.log" 2>/dev/null || true
# A check that ran no GPU test must not pass quietly.
if grep -q "skipped: no CUDA device" "$out/ctest-LastTest.log" 2>/dev/null; then
  echo "tests: SKIPPED, no CUDA device visible to the tests" | tee -a "$summary"
  failed=1
fi

benches=0
for b in "$build"/bench/bench_*; do
  [[ -x $b && $(basename "$b") =~ (cuda|gpu) ]] || continue
  benches=$((benches + 1))
  # Figures are the benchmark's own output (ratios against a reference it
  # measures in the same run).
  step "$(basename "$b")" 200 "$b"
done
((benches == 0)) && echo "benchmarks: none built for the GPU yet" | tee -a "$summary"

# The figure lines of the benchmarks, in the summary.
for log in "$out"/bench_*.log; do
  [[ -f $log ]] || continue
  grep -E '^(reference|attention|moe|train|device):' "$log" | sed "s|^|$(basename "$log" .log): |" \
    >>"$summary"
done

# The same tests under compute-sanitizer: out-of-bounds and misaligned
# accesses (memcheck) and shared-memory races (racecheck) in the kernels.
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
test_bin=$build/tests/test_kernels_cuda
if [[ -x $sanitizer && -x $test_bin ]]; then
  step memcheck 120 "$sanitizer" --tool memcheck --error-exitcode 1 "$test_bin"
  step racecheck 120 "$sanitizer" --tool racecheck --error-exitcode 1 "$test_bin"
else
  echo "sanitizer: compute-sanitizer or $test_bin not found" | tee -a "$summary"
fi

echo "total: $((SECONDS - start))s; logs and figures in $out" | tee -a "$summary"
exit "$failed"
