#!/usr/bin/env bash
# labels: parallel
# `optimus-cc comm-check` on the CPU (MPI, plain and host-staged) with 1-4 ranks
# and uneven ring chunks: every collective, the send/receive ring shift and the
# pipeline's links give the expected values, and the bytes MPI's rings really sent equal the ring
# volume of comm/ring_volume.h, which NcclCommunicator counts (so a job's byte
# counters are the same on either backend). The same collectives on the 16-bit
# wire of a --bf16 / --fp16 run (bf16 and fp16): half the bytes, gathers exact,
# sums bit for bit the ring's order of per-step roundings. Bad requests (--comm-backend nccl
# on the CPU, an unknown backend, a zero count) fail with one line on every
# rank. The NCCL side runs on a GPU (python3 -m occtools gpu-check: nccl_comm).
source "$(dirname "$0")/fixture/lib.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

check_ok() {  # check_ok NAME RANKS ARGS...
  local name=$1 np=$2 log="$WORK/$1.log"
  shift 2
  if timeout 120 mpirun -np "$np" "$BIN" comm-check --device cpu "$@" > "$log" 2>&1 &&
      grep -q "^comm-check: all-reduce (sum, max, mean), reduce-scatter, all-gather and send/receive" "$log"; then
    pass "$name: $(head -n 1 "$log" | cut -c1-90)"
  else
    tail -n 5 "$log"
    failed "$name: comm-check did not pass"
  fi
}
check_ok one_rank 1 --count 17
check_ok two_ranks 2 --count 1001
check_ok three_ranks_uneven 3 --count 100003
check_ok four_ranks_staged 4 --count 4099 --debug-host-staging
grep -q "comm: mpi (host-staged on the CPU: --debug-host-staging)" "$WORK/four_ranks_staged.log" &&
  pass "the staged check says how it communicates" || failed "no host-staged comm line"
# The 16-bit wire's collectives, plain and host-staged, uneven chunks included.
sixteen() {
  grep -q "^comm-check: 16-bit wire (bf16, fp16): all-reduce, all-gather, block reduce-scatter, reduce-scatter and all-gather of owned chunks at 2 bytes per value .* sums bit for bit the ring's, rounded at every step" "$WORK/$1.log" &&
    pass "$1: 16-bit collectives (bf16, fp16): values and bytes" || failed "$1: no 16-bit wire line"
}
for name in one_rank two_ranks three_ranks_uneven four_ranks_staged; do sixteen $name; done
# The pipeline's links (a ring of every rank, a two-rank group per link and
# direction, three messages each way queued before any receive): with 2+ ranks only.
for name in two_ranks three_ranks_uneven four_ranks_staged; do
  np=$(grep -m 1 -o "^comm-check: [0-9]* ranks" "$WORK/$name.log" | grep -o "[0-9]*")
  grep -q "^comm-check: pipeline links (a ring of $np ranks, one MPI group per link and direction)" "$WORK/$name.log" &&
    pass "$name: the pipeline's links deliver in order" || failed "$name: no pipeline-links line"
done
grep -q "^comm-check: pipeline links" "$WORK/one_rank.log" && failed "one rank checked pipeline links" ||
  pass "one rank has no pipeline links to check"
# Fewer floats than ranks: empty chunks.
check_ok empty_chunks 3 --count 2
sixteen empty_chunks
check_ok timed 2 --count 65536 --bench-iters 3
grep -Eq "^comm-check: all-reduce of 0.3 MB: median [0-9.]+ ms over 3, algbw [0-9.]+ GB/s, busbw" "$WORK/timed.log" &&
  pass "--bench-iters reports the all-reduce's time and bandwidth" || failed "no bandwidth line: $(tail -n 1 "$WORK/timed.log")"

# check_fails NAME RANKS PATTERN ARGS...: non-zero exit, and the one-line error says PATTERN.
check_fails() {
  local name=$1 np=$2 pattern=$3 log="$WORK/$1.log"
  shift 3
  if timeout 60 mpirun -np "$np" "$BIN" comm-check "$@" > "$log" 2>&1; then
    failed "$name: exit 0"
  elif [[ $(grep -c "^error: " "$log") -eq 1 ]] && grep -q "^error: .*$pattern" "$log"; then
    pass "$name: $(grep -m 1 '^error: ' "$log" | cut -c1-100)"
  else
    tail -n 5 "$log"
    failed "$name: no single 'error: ...$pattern' line"
  fi
}
check_fails nccl_on_cpu 2 "needs --device cuda" --device cpu --comm-backend nccl
check_fails unknown_backend 2 "not a backend; use auto, nccl or mpi" --device cpu --comm-backend gloo
check_fails zero_count 1 "count" --device cpu --count 0

# train takes the same flag, checked before anything starts.
MODEL=("${TINY[@]}" --train-iters 1)
if timeout 60 mpirun -np 2 "$BIN" train "${MODEL[@]}" --device cpu --comm-backend nccl > "$WORK/train_nccl_cpu.log" 2>&1; then
  failed "train --comm-backend nccl --device cpu: exit 0"
else
  grep -q "^error: --comm-backend nccl moves GPU memory and needs --device cuda" "$WORK/train_nccl_cpu.log" &&
    pass "train refuses --comm-backend nccl on the CPU" || failed "train: $(tail -n 2 "$WORK/train_nccl_cpu.log")"
fi
train_run mpi_explicit 2 --device cpu --tensor-model-parallel-size 2 --comm-backend mpi &&
  pass "train --comm-backend mpi on the CPU runs"
finish
