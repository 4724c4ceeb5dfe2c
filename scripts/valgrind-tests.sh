#!/usr/bin/env bash
# Runs the store and wire suites of an ordinary (non-sanitized) build under
# valgrind's memcheck: scripts/valgrind-tests.sh BUILD_DIR
# Each suite runs in one process (CK_FORK=no), so that memcheck sees every
# test; any invalid access, use of uninitialised memory or leak (definite,
# indirect or possible) fails the suite. Two suites run at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/valgrind-tests.sh BUILD_DIR}
tests="$(cd "$build/tests" && pwd)"
if ! command -v valgrind >/dev/null; then
  echo "valgrind-tests: valgrind is not installed (scripts/deps.sh installs it)" >&2
  exit 2
fi
suites=(test_store test_wire_fuzz test_wire_errors test_wire)
for s in "${suites[@]}"; do
  if [ ! -x "$tests/$s" ]; then
    echo "valgrind-tests: $tests/$s is not built (make build first)" >&2
    exit 2
  fi
done
logs="$build/valgrind"
mkdir -p "$logs"

# One suite: prints "valgrind SUITE: ok|FAILED seconds=S log=L".
run_one() {
  local s=$1 tests=$2 logs=$3 args=()
  if [ "$s" = test_store ]; then args=("$tests/store_writer"); fi
  local start=$SECONDS rc=0
  (cd "$tests" && CK_FORK=no CK_DEFAULT_TIMEOUT=600 \
    valgrind --error-exitcode=1 --leak-check=full \
      --errors-for-leak-kinds=definite,indirect,possible --show-leak-kinds=definite,indirect,possible \
      "./$s" "${args[@]}") >"$logs/$s.log" 2>&1 || rc=$?
  local errors
  errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$logs/$s.log" | tail -1)
  if [ $rc -eq 0 ]; then
    echo "valgrind $s: ok errors=${errors:-?} seconds=$((SECONDS - start))"
  else
    echo "valgrind $s: FAILED rc=$rc errors=${errors:-?} seconds=$((SECONDS - start)) log=$logs/$s.log"
    return 1
  fi
}
export -f run_one

start=$SECONDS
if printf '%s\n' "${suites[@]}" | xargs -P 2 -I{} bash -c 'run_one "$@"' _ {} "$tests" "$logs"; then
  echo "valgrind: ${#suites[@]} suites, 0 errors, $((SECONDS - start)) s"
else
  echo "valgrind: FAILED (logs under $logs/)" >&2
  exit 1
fi
