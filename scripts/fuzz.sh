#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/*.cpp: every parser of outside input,
# under ASan + UBSan, by clang, in build-fuzz/) and runs them:
#   1. every regression input of fuzz/regressions/HARNESS/ once (past findings:
#      each must now be refused cleanly);
#   2. fuzzing from the committed seed corpus fuzz/corpus/HARNESS/.
#
#   bash scripts/fuzz.sh [--runs N | --minutes M] [--only a,b] [--jobs J] [--report FILE]
# --runs N      (default 3000) N executions per harness from a fresh copy of the
#               seeds, with a fixed seed: what CI runs (scripts/test.sh).
# --minutes M   M minutes per harness instead, growing build-fuzz/corpus/HARNESS
#               (kept between runs; start it from the seeds by deleting it).
# --jobs J      harnesses run at once (default: the number of cores).
# --report FILE a markdown table of executions, coverage and findings.
# A finding is saved under build-fuzz/findings/HARNESS/ and fails the run; to fix
# one, reproduce it with `build-fuzz/fuzz_HARNESS FILE`, fix the code, and move
# the file into fuzz/regressions/HARNESS/ so that it stays fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=3000 MINUTES=0 ONLY="" JOBS=$(nproc) REPORT=""
while (($#)); do
  case $1 in
    --runs) RUNS=$2; shift 2;;
    --minutes) MINUTES=$2; shift 2;;
    --only) ONLY=$2; shift 2;;
    --jobs) JOBS=$2; shift 2;;
    --report) REPORT=$2; shift 2;;
    *) echo "error: unknown flag $1 (use --runs N, --minutes M, --only a,b, --jobs J, --report FILE)" >&2; exit 2;;
  esac
done
[[ $RUNS =~ ^[0-9]+$ && $RUNS -ge 1 ]] || { echo "error: --runs must be a positive integer" >&2; exit 2; }
[[ $MINUTES =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "error: --minutes must be a number" >&2; exit 2; }
[[ $JOBS =~ ^[0-9]+$ && $JOBS -ge 1 ]] || { echo "error: --jobs must be a positive integer" >&2; exit 2; }

OCC_BUILD_DIR=build-fuzz OCC_FUZZ=1 bash scripts/setup.sh > build-fuzz.log 2>&1 || { cat build-fuzz.log; exit 1; }
rm -f build-fuzz.log
HARNESSES=()
for f in fuzz/*.cpp; do HARNESSES+=("$(basename "$f" .cpp)"); done
if [[ -n $ONLY ]]; then
  IFS=, read -r -a HARNESSES <<< "$ONLY"
  for h in "${HARNESSES[@]}"; do
    [[ -f fuzz/$h.cpp ]] || { echo "error: no harness '$h' (have: $(cd fuzz && ls ./*.cpp | sed 's|./||;s|.cpp||' | tr '\n' ' '))" >&2; exit 2; }
  done
fi

LOGS=build-fuzz/logs
mkdir -p "$LOGS"
# Leaks count as findings; a parser must not hold on to memory it allocated. A 16 MB
# quarantine (ASan's default is 256 MB) still catches a use after free within the same
# input, and saves fresh pages for every allocation: config_json (train's ~400 flags per
# input) ran 3x the CPU time with the default.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0:quarantine_size_mb=16}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

run_one() {
  local h=$1 bin=build-fuzz/fuzz_$1 log=$LOGS/$1.log
  local findings=build-fuzz/findings/$h
  mkdir -p "$findings"
  : > "$log"
  # 1. Regression inputs, each once.
  local regressions=(fuzz/regressions/"$h"/*)
  if [[ -e ${regressions[0]} ]]; then
    if ! "$bin" -rss_limit_mb=2048 -timeout=30 "${regressions[@]}" >> "$log" 2>&1; then
      echo "FAIL $h: a regression input of fuzz/regressions/$h crashes again (log: $log)"
      return 1
    fi
  fi
  # 2. Fuzzing from the seeds.
  local corpus
  if [[ $MINUTES != 0 ]]; then
    corpus=build-fuzz/corpus/$h
    [[ -d $corpus ]] || { mkdir -p "$corpus"; cp fuzz/corpus/"$h"/* "$corpus"/; }
    limit=(-max_total_time="$(python3 -c "print(int(float('$MINUTES') * 60))")")
  else
    corpus=$(mktemp -d)
    cp fuzz/corpus/"$h"/* "$corpus"/
    limit=(-runs="$RUNS" -seed=1)
  fi
  local rc=0
  "$bin" "${limit[@]}" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=30 -max_len=131072 -print_final_stats=1 \
    -artifact_prefix="$findings/" "$corpus" >> "$log" 2>&1 || rc=$?
  [[ $MINUTES != 0 ]] || rm -rf "$corpus"
  local execs cov secs
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo "?")
  secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | tail -1 | awk '{print $5}')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  if ((rc != 0)); then
    echo "FAIL $h: finding after ${execs:-?} executions; input saved in $findings/ (log: $log; reproduce: $bin FILE)"
    grep -m3 -E 'ERROR: |runtime error|occ fuzz:|terminate called|what\(\)' "$log" | sed 's/^/    /'
    return 1
  fi
  echo "ok   $h: ${execs:-?} executions in ${secs:-?} s, coverage ${cov:-?} edges, no findings"
}
export -f run_one
export LOGS MINUTES RUNS

set +e
printf '%s\n' "${HARNESSES[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one {}' > "$LOGS/summary.txt"
status=$?
set -e
sort -k2 "$LOGS/summary.txt"
if [[ -n $REPORT ]]; then
  {
    echo "| harness | result |"
    echo "|---|---|"
    sort -k2 "$LOGS/summary.txt" | grep -E '^(ok|FAIL)' | sed -E 's/^(ok|FAIL) +([a-z0-9_]+): (.*)$/| \2 | \1: \3 |/'
  } > "$REPORT"
fi
((status == 0)) || { echo "fuzz: findings (see above)" >&2; exit 1; }
echo "fuzz: ${#HARNESSES[@]} harnesses, no findings"
