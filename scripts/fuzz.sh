#!/usr/bin/env bash
# Runs every libFuzzer harness of fuzz/ for a bounded time, one after the
# other: scripts/fuzz.sh BUILD_DIR SECONDS [HARNESS...]
# Each starts from its checked-in seeds and regression inputs
# (tests/corpus/<harness>/) and writes the new inputs it finds to
# BUILD_DIR/corpus-<harness>/. A crash, a leak, a UBSan report or an input
# that runs over 10 s stops that harness with its input saved as
# BUILD_DIR/crashes/<harness>-*, and the script fails; fix the code, then
# keep the input as a regression case under tests/corpus/<harness>/.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [HARNESS...]}
seconds=${2:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [HARNESS...]}
shift 2
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then harnesses=(wire toolcall safetensors ini); fi

mkdir -p "$build/crashes"
failed=()
for h in "${harnesses[@]}"; do
  bin="$build/fuzz/fuzz_$h"
  seeds="tests/corpus/$h"
  scratch="$build/corpus-$h"
  log="$build/fuzz-$h.log"
  if [ ! -x "$bin" ] || [ ! -d "$seeds" ]; then
    echo "fuzz: no harness $bin or no seeds $seeds" >&2
    exit 2
  fi
  mkdir -p "$scratch"
  rc=0
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/crashes/$h-" "$scratch" "$seeds" >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "fuzz $h: seconds=$seconds runs=${runs:-?} corpus=$(find "$scratch" -type f | wc -l) rc=$rc log=$log"
  if [ $rc -ne 0 ]; then
    grep -E "ERROR|SUMMARY|fuzz_$h:|runtime error|Test unit written" "$log" | head -20 >&2 || true
    failed+=("$h")
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs under $build/crashes/)" >&2
  exit 1
fi
echo "fuzz: ${#harnesses[@]} harnesses, ${seconds} s each, 0 crashes"
