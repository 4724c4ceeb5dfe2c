#!/usr/bin/env bash
# Runs every libFuzzer harness of fuzz/ for a bounded time:
#   scripts/fuzz.sh BUILD_DIR SECONDS [HARNESS...]
# FUZZ_PARALLEL harnesses run at a time (default 1: one after the other).
# Each starts from its checked-in seeds and regression inputs
# (tests/corpus/<harness>/), with its dictionary fuzz/<harness>.dict when
# there is one, and writes the new inputs it finds to
# BUILD_DIR/corpus-<harness>/. A crash, a leak, a UBSan report, an input
# over 2 GiB of memory or one that runs over 10 s stops that harness with
# its input saved as BUILD_DIR/crashes/<harness>-*, and the script fails;
# fix the code, then keep the input as a regression case under
# tests/corpus/<harness>/ (test_corpus_<harness> replays it in make test).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [HARNESS...]}
seconds=${2:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [HARNESS...]}
shift 2
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then harnesses=(wire toolcall safetensors ini weights); fi
parallel=${FUZZ_PARALLEL:-1}

for h in "${harnesses[@]}"; do
  if [ ! -x "$build/fuzz/fuzz_$h" ] || [ ! -d "tests/corpus/$h" ]; then
    echo "fuzz: no harness $build/fuzz/fuzz_$h or no seeds tests/corpus/$h" >&2
    exit 2
  fi
done
mkdir -p "$build/crashes"

# One harness; prints its line and returns libFuzzer's exit status.
run_one() {
  local h=$1 scratch="$build/corpus-$h" log="$build/fuzz-$h.log" dict=() rc=0
  mkdir -p "$scratch"
  if [ -f "fuzz/$h.dict" ]; then dict=(-dict="fuzz/$h.dict"); fi
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/fuzz/fuzz_$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "${dict[@]}" -artifact_prefix="$build/crashes/$h-" \
    "$scratch" "tests/corpus/$h" >"$log" 2>&1 || rc=$?
  local runs
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "fuzz $h: seconds=$seconds runs=${runs:-?} corpus=$(find "$scratch" -type f | wc -l) rc=$rc log=$log"
  if [ $rc -ne 0 ]; then
    grep -E "ERROR|SUMMARY|fuzz_$h:|runtime error|Test unit written" "$log" | head -20 >&2 || true
  fi
  return $rc
}

failed=()
pids=()
names=()
collect() {  # waits for the oldest running harness
  if ! wait "${pids[0]}"; then failed+=("${names[0]}"); fi
  pids=("${pids[@]:1}")
  names=("${names[@]:1}")
}
for h in "${harnesses[@]}"; do
  while [ ${#pids[@]} -ge "$parallel" ]; do collect; done
  run_one "$h" &
  pids+=($!)
  names+=("$h")
done
while [ ${#pids[@]} -gt 0 ]; do collect; done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs under $build/crashes/)" >&2
  exit 1
fi
echo "fuzz: ${#harnesses[@]} harnesses, ${seconds} s each, 0 crashes"
