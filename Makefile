# longhaul: the two commands a user needs. Both install dependencies first.
#   make demo   SFT warm start, then an RL fleet on the default environment
#   make test   configure, build, run every test; then the unit tests again
#               under AddressSanitizer and UndefinedBehaviorSanitizer, and
#               the store and wire suites under valgrind (scripts/test.sh
#               runs the passes side by side where the cores are idle)
#   make fuzz   the libFuzzer harnesses (clang), FUZZ_SECONDS each
#   make install  the longhaul binary, its man page, the plugin header
#               and longhaul-env.pc under PREFIX (default /usr/local)
BUILD ?= build
ASAN_BUILD ?= build-asan
LH_CUDA ?= auto
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_PARALLEL ?= 1
PREFIX ?= /usr/local
# When this make began: `make test` prints its whole time at the end.
MAKE_START := $(shell date +%s)

.PHONY: all deps build install test test-asan test-valgrind test-slurm fuzz demo bench clean

all: build

deps:
	./scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DLH_CUDA=$(LH_CUDA) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

test: build
	@CMAKE_FLAGS="$(CMAKE_FLAGS)" ./scripts/test.sh all $(BUILD) $(ASAN_BUILD) $(JOBS); \
	  rc=$$?; echo "make test: $$(( $$(date +%s) - $(MAKE_START) )) s wall, set-up and build included (exit $$rc)"; \
	  exit $$rc

# The unit tests once more under ASan+UBSan (CUDA off: the sanitizers
# do not apply to device code; -O1, as AddressSanitizer advises).
test-asan: deps
	CMAKE_FLAGS="$(CMAKE_FLAGS)" ./scripts/test.sh asan-build $(ASAN_BUILD) $(JOBS)
	./scripts/test.sh asan $(ASAN_BUILD) $(JOBS)

# The store and wire suites of the ordinary build under valgrind's memcheck
# (0 errors, no leaks).
test-valgrind: build
	./scripts/valgrind-tests.sh $(BUILD)

# A tiny fleet through a private Slurm (munged, slurmctld, slurmd) on this
# machine: `longhaul launch --slurm` (docs/operations.md, "Slurm"). Also the ctest
# entry test_slurm; exits 77 (skipped) without Slurm or when not root.
test-slurm: build
	./scripts/test-slurm.sh $(BUILD)

# Every libFuzzer harness of fuzz/ for FUZZ_SECONDS, FUZZ_PARALLEL at a time,
# from its corpus tests/corpus/<harness>/; new inputs go to
# $(FUZZ_BUILD)/corpus-<harness>/, and any crash fails the target.
fuzz: deps
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DLH_FUZZ=ON -DLH_CUDA=off $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzzers
	FUZZ_PARALLEL=$(FUZZ_PARALLEL) ./scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

demo: build
	./scripts/demo.sh $(BUILD)

bench: build
	./scripts/bench.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
