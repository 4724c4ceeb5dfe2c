#!/usr/bin/env bash
# Installs every Debian package longhaul builds, tests or runs with.
# Idempotent: packages already present are skipped, and nothing runs when
# all of them are there. Uses sudo when not root.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenblas-dev          # CPU backend (sgemm)
  libzmq3-dev              # transport, with CURVE
  libprotobuf-c-dev protobuf-c-compiler   # wire messages
  libsqlite3-dev sqlite3   # replay store
  check libsubunit-dev     # unit tests
  libopenmpi-dev openmpi-bin   # multi-learner collectives
  libcjson-dev             # safetensors headers, JSON export, the agent endpoint
  libmicrohttpd-dev        # the agent endpoint's HTTP server
  libinih-dev              # INI config
  libzstd-dev              # zstd-compressed weights chunks
  libxxhash-dev python3-xxhash   # XXH3-64 checksums (wire, checkpoints, store)
  python3-zmq python3-protobuf protobuf-compiler   # Python env server example
  python3-torch            # the PyTorch peer of bench_model
  python3-numpy            # bench/maxvio_floor.py
  chromium                 # renders longhaul report's page in its test
  clang                    # libFuzzer harnesses (make fuzz)
  valgrind                 # memcheck pass of make test
  slurmctld slurmd slurm-client munge   # launch --slurm and its test (make test-slurm)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}"
echo "deps: installed ${#missing[@]} packages"
