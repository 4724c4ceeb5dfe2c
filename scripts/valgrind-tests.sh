#!/usr/bin/env bash
# Runs the store and wire suites of an ordinary (non-sanitized) build under
# valgrind's memcheck: scripts/valgrind-tests.sh BUILD_DIR
# Each job is a suite, or one case of test_store (a concern: CK_RUN_CASE),
# in one process (CK_FORK=no), so that memcheck sees every test; any
# invalid access, use of uninitialised memory or leak (definite, indirect
# or possible) fails it. Two jobs run at a time, the longest first, so
# that the store's slow concerns do not leave one core idle at the end.
# Memcheck runs code tens of times slower, and make test runs it niced
# beside other passes, where a busy machine leaves it next to nothing until
# they end (20 minutes and more under stress-ng --cpu 2): the cases' own
# timeouts are stretched thirtyfold (test_store's 120 s to an hour).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/valgrind-tests.sh BUILD_DIR}
tests="$(cd "$build/tests" && pwd)"
if ! command -v valgrind >/dev/null; then
  echo "valgrind-tests: valgrind is not installed (scripts/deps.sh installs it)" >&2
  exit 2
fi
suites=(test_store test_wire_fuzz test_wire_errors test_wire)
# test_store's cases, read from its table of concerns (tests/store/test_store.c)
# so that a new one is not left out, the slow ones first; then the wire suites.
slow=(retire retention writers wal)
mapfile -t concerns < <(grep -o '{"[a-z_]*", lh_test_store_' tests/store/test_store.c | cut -d'"' -f2)
if [ "${#concerns[@]}" -lt 2 ]; then
  echo "valgrind-tests: no concerns found in tests/store/test_store.c" >&2
  exit 2
fi
jobs=()
for c in "${slow[@]}" "${concerns[@]}"; do
  case " ${jobs[*]} " in *" test_store:$c "*) continue ;; esac
  jobs+=("test_store:$c")
done
jobs+=(test_wire_fuzz test_wire_errors test_wire)
for s in "${suites[@]}"; do
  if [ ! -x "$tests/$s" ]; then
    echo "valgrind-tests: $tests/$s is not built (make build first)" >&2
    exit 2
  fi
done
logs="$build/valgrind"
mkdir -p "$logs"

# One job, SUITE or SUITE:CASE: prints "valgrind JOB: ok|FAILED seconds=S log=L".
run_one() {
  local job=$1 tests=$2 logs=$3 s=${1%%:*} pick=() args=()
  if [ "$job" != "$s" ]; then pick=("CK_RUN_CASE=${job#*:}"); fi
  if [ "$s" = test_store ]; then args=("$tests/store_writer"); fi
  local log="$logs/${job/:/-}.log" start=$SECONDS rc=0
  (cd "$tests" && env CK_FORK=no CK_DEFAULT_TIMEOUT=600 CK_TIMEOUT_MULTIPLIER=30 "${pick[@]}" \
    valgrind --error-exitcode=1 --leak-check=full \
      --errors-for-leak-kinds=definite,indirect,possible --show-leak-kinds=definite,indirect,possible \
      "./$s" "${args[@]}") >"$log" 2>&1 || rc=$?
  local errors
  errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$log" | tail -1)
  # a case name that matches nothing runs no test: that is a failure too
  if [ $rc -eq 0 ] && ! grep -q 'Checks: [1-9]' "$log"; then rc=3; fi
  if [ $rc -eq 0 ]; then
    echo "valgrind $job: ok errors=${errors:-?} seconds=$((SECONDS - start))"
  else
    echo "valgrind $job: FAILED rc=$rc errors=${errors:-?} seconds=$((SECONDS - start)) log=$log"
    return 1
  fi
}
export -f run_one

start=$SECONDS
if printf '%s\n' "${jobs[@]}" | xargs -P 2 -I{} bash -c 'run_one "$@"' _ {} "$tests" "$logs"; then
  echo "valgrind: ${#suites[@]} suites in ${#jobs[@]} jobs, 0 errors, $((SECONDS - start)) s"
else
  echo "valgrind: FAILED (logs under $logs/)" >&2
  exit 1
fi
