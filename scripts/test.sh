#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (unit tests, PyTorch reference
# check, CLI tests), then the unit tests and the PyTorch check (the whole
# model forward/backward) again under ASan + UBSan, then every fuzz harness
# (libFuzzer, clang) on its regression inputs and for a fixed number of
# executions from its committed seed corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
bash scripts/setup.sh
ctest --test-dir build --output-on-failure --no-tests=error -j 2
OCC_BUILD_DIR=build-asan OCC_SANITIZE=1 bash scripts/setup.sh
# Leak checks off: OpenMP and OpenBLAS keep thread pools alive at exit.
ASAN_OPTIONS=detect_leaks=0 ctest --test-dir build-asan --output-on-failure -L "unit|reference" --no-tests=error -j 2
bash scripts/fuzz.sh --runs "${OCC_FUZZ_RUNS:-3000}"
