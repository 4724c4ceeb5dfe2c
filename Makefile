# longhaul: the two commands a user needs. Both install dependencies first.
#   make demo   SFT warm start, then an RL fleet on the default environment
#   make test   configure, build, run every test; then the unit tests again
#               under AddressSanitizer and UndefinedBehaviorSanitizer
BUILD ?= build
ASAN_BUILD ?= build-asan
LH_CUDA ?= auto
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build test test-asan demo bench clean

all: build

deps:
	./scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DLH_CUDA=$(LH_CUDA) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) test-asan

# The unit tests once more under ASan+UBSan (CUDA off: the sanitizers
# do not apply to device code).
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DLH_SANITIZE=ON -DLH_CUDA=off -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -L unit

demo: build
	./scripts/demo.sh $(BUILD)

bench: build
	./scripts/bench.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
