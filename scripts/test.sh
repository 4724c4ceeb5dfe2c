#!/usr/bin/env bash
# make test's passes, arranged to fit 15 minutes on 2 cores.
#   scripts/test.sh all BUILD_DIR ASAN_BUILD_DIR JOBS   (make test, after make build)
#   scripts/test.sh asan-build ASAN_BUILD_DIR JOBS      the ASan+UBSan build
#   scripts/test.sh asan ASAN_BUILD_DIR JOBS            its unit tests (make test-asan)
# all runs, each pass printing its time, the first failure ending the run
# with its code:
# 1. every test of the ordinary build (ctest). The fleet tests wait on
#    processes and leave about a third of the cores idle: beside them, at
#    low priority, the ASan+UBSan build compiles and valgrind's
#    memcheck runs the store and wire suites of the ordinary build
#    (scripts/valgrind-tests.sh), taking that idle time without slowing
#    them;
# 2. the unit tests again under ASan+UBSan, as soon as their build is done
#    (once ctest ends the build is no longer niced), while valgrind goes on
#    with what they leave; then valgrind's end, no longer niced.
# The sanitized build is optimised (-O1, as AddressSanitizer advises for
# reasonable speed).
#
# Two settings for speed, neither of which changes what a test checks:
# - OpenMP threads sleep when idle (OMP_WAIT_POLICY=passive) instead of
#   spinning: two tests run at once on two cores, and a spinning team
#   takes the core the other test needs (the unit tests: 104 s -> 89 s);
# - ASan's quarantine of freed memory is 16 MB, not 256: the tests free
#   model-sized buffers every step, and with the default each new buffer
#   is fresh pages, so page faults took most of their time (the sanitized
#   unit tests: 226 s -> 183 s). A use right after a free is still caught.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
usage="usage: scripts/test.sh all BUILD ASAN_BUILD JOBS | asan-build ASAN_BUILD JOBS | asan ASAN_BUILD JOBS"
mode=${1:?$usage}
shift

case "$mode" in
asan-build)
  asan=${1:?$usage}
  # CMAKE_FLAGS: make's, passed on (word-split on purpose).
  # shellcheck disable=SC2086
  cmake -S . -B "$asan" -DLH_SANITIZE=ON -DLH_CUDA=off -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-g -O1" \
    ${CMAKE_FLAGS:-} && cmake --build "$asan" -j "${2:-2}"
  exit $?
  ;;
asan)
  asan=${1:?$usage}
  cd "$asan" && ASAN_OPTIONS=detect_leaks=1:quarantine_size_mb=16${ASAN_OPTIONS:+:$ASAN_OPTIONS} UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "${2:-2}" -L unit
  exit $?
  ;;
all) ;;
*)
  echo "$usage" >&2
  exit 2
  ;;
esac

build=${1:?$usage}
asan=${2:?$usage}
jobs=${3:-2}
logs="$build/test-logs"
mkdir -p "$logs"
start=$SECONDS

# The background jobs run in process groups of their own, so that a
# failure in the foreground stops all of them.
bgs=()
stop_bg() {
  for pid in "${bgs[@]}"; do
    kill -- -"$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  bgs=()
}
trap stop_bg EXIT
# in_background NICENESS LOG COMMAND...: its pid in $last.
last=
in_background() {
  local niceness=$1 log=$2
  shift 2
  set -m
  nice -n "$niceness" "$@" >"$log" 2>&1 &
  last=$!
  set +m
  bgs+=("$last")
}
# to_front PID: background job PID is what the run waits for now: back to
# this script's priority, where the system allows it (a lower niceness
# takes root); else it goes on niced. On a machine busy with other work a
# niced job would get next to nothing.
# Its process group, and every process below its leader: a test that puts
# a child in a group of its own (test_store's writers under valgrind) would
# stay niced, and under load its parent waits on it for most of an hour.
descendants() {
  local p
  for p in $(pgrep -P "$1"); do
    echo "$p"
    descendants "$p"
  done
}
to_front() {
  renice -n "$(nice)" -g "$1" >/dev/null 2>&1 || true
  # shellcheck disable=SC2046  # one pid a word
  renice -n "$(nice)" -p $(descendants "$1") >/dev/null 2>&1 || true
}
# fail MESSAGE CODE [LOG]: says what failed, with the end of its log.
fail() {
  stop_bg
  echo "make test: $1 (exit $2)" >&2
  if [ -n "${3:-}" ]; then
    echo "--- the end of $3:" >&2
    tail -n 60 "$3" >&2
  fi
  exit "$2"
}

t=$SECONDS
# The build before valgrind (15 against 19: about 70% of what ctest
# leaves), so that the sanitized tests need not wait for it.
in_background 15 "$logs/asan-build.log" "$0" asan-build "$asan" "$jobs"
asan_build=$last
in_background 19 "$logs/valgrind.log" ./scripts/valgrind-tests.sh "$build"
valgrind=$last
(cd "$build" && ctest --output-on-failure -j "$jobs") || fail "ctest failed" $?
echo "make test: ctest $((SECONDS - t)) s"
t=$SECONDS
to_front "$asan_build"
wait "$asan_build" || fail "the ASan+UBSan build failed" $? "$logs/asan-build.log"
bgs=("$valgrind")  # the build's group is gone: its id may be anyone's now
echo "make test: the ASan+UBSan build, begun beside ctest, ended $((SECONDS - t)) s after it ($logs/asan-build.log)"
t=$SECONDS
"$0" asan "$asan" "$jobs" || fail "the unit tests under ASan+UBSan failed" $?
echo "make test: the unit tests under ASan+UBSan $((SECONDS - t)) s"
t=$SECONDS
to_front "$valgrind"
wait "$valgrind" || fail "valgrind failed" $? "$logs/valgrind.log"
bgs=()
cat "$logs/valgrind.log"
echo "make test: valgrind, begun beside ctest, ended $((SECONDS - t)) s after the ASan+UBSan tests"
echo "make test: every pass in $((SECONDS - start)) s"
