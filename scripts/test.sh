#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (unit tests, PyTorch reference
# check, CLI tests), then the unit tests and the PyTorch check (the whole
# model forward/backward) again under ASan + UBSan, then every fuzz harness
# (libFuzzer) on its regression inputs and for a fixed number of executions
# from its committed seed corpus. The sanitizer runs and the harnesses share
# one tree (build-fuzz: clang, ASan + UBSan), so the library compiles once for both.
set -euo pipefail
cd "$(dirname "$0")/.."
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
bash scripts/setup.sh
ctest --test-dir build --output-on-failure --no-tests=error -j 2
OCC_BUILD_DIR=build-fuzz OCC_FUZZ=1 OCC_TARGETS="fuzzers occ_unit_tests optimus-cc" bash scripts/setup.sh
# Leak checks off: OpenBLAS keeps its thread pool alive at exit.
ASAN_OPTIONS=detect_leaks=0 ctest --test-dir build-fuzz --output-on-failure -L "unit|reference" --no-tests=error -j 2
bash scripts/fuzz.sh --runs "${OCC_FUZZ_RUNS:-3000}"
