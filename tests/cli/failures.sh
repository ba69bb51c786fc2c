#!/usr/bin/env bash
# labels: parallel
# Failure behaviour of multi-rank jobs:
#  (a) a rank killed with SIGKILL mid-run: mpirun exits non-zero within 30 s of the kill and
#      no rank of the job is left running;
#  (b) invalid topologies (world not divisible by TP x PP, heads not divisible by TP, layers
#      not divisible by PP, global batch not divisible by micro-batch x DP) fail on every rank:
#      exit non-zero, the cause printed exactly once (one line starting with "error:");
#  (c) bad input seen by one rank only -- a checkpoint shard deleted or corrupted (--load) --
#      or a --save directory that cannot be created (found at start-up by every rank's
#      probe, before training) exits non-zero within 30 s with the cause printed exactly once;
#  (d) bad input seen by several ranks at once mid-run (token ids beyond --vocab-size, met by
#      every rank that reads data, i.e. first and last stage of every DP replica): the same;
#  (e) one rank failing between the set-up's collectives (host memory exhausted building the
#      model, under ulimit -v): the same, where it used to hang.
source "$(dirname "$0")/fixture/lib.sh"
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 2 --hidden-size 32
       --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2
       --global-batch-size 4 --eval-iters 0 --log-interval 1)

# check_failure NAME PATTERN COMMAND...: the job COMMAND must exit non-zero within 30 s with
# exactly one "error:" line, and that line must match PATTERN (extended regex).
check_failure() {
  local name=$1 pattern=$2
  shift 2
  local log="$WORK/$name.log" start=$SECONDS rc
  timeout 60 "$@" > "$log" 2>&1
  rc=$?
  local took=$((SECONDS - start)) errors anywhere
  errors=$(grep -c '^error:' "$log")
  anywhere=$(grep -o 'error:' "$log" | wc -l)
  if [[ $rc -eq 124 ]]; then
    failed "$name: job still running after 60 s (hang)"
  elif [[ $rc -eq 0 ]]; then
    failed "$name: job exited 0"
  elif [[ $took -gt 30 ]]; then
    failed "$name: job took ${took} s to fail (limit 30 s)"
  elif [[ $errors -ne 1 && $anywhere -eq 1 ]]; then
    failed "$name: the cause is printed once but not on a line of its own (glued after other output): $(grep 'error:' "$log" | cut -c1-200 | cat -v)"
  elif [[ $errors -ne 1 ]]; then
    failed "$name: $errors lines start with 'error:' (expected exactly 1)"
  elif ! grep '^error:' "$log" | grep -Eq "$pattern"; then
    failed "$name: the error line does not name the cause (/$pattern/): $(grep '^error:' "$log")"
  else
    pass "$name: exit $rc after ${took} s, one error line: $(grep '^error:' "$log" | cut -c1-150)"
    return 0
  fi
  echo "---- output of $name (exit $rc):"
  sed 's/^/    /' "$log" | head -n 40
  return 1
}
# expect_failure NAME PATTERN RANKS FLAGS...: check_failure of `mpirun -np RANKS optimus-cc
# train` with the test model and FLAGS.
expect_failure() {
  local name=$1 pattern=$2 np=$3
  shift 3
  check_failure "$name" "$pattern" mpirun -np "$np" --oversubscribe "$BIN" train "${MODEL[@]}" "$@"
}

# ---- (a) SIGKILL of one rank mid-run -------------------------------------------------------
MARK="$WORK/kill-marker-$$.jsonl"  # unique --metrics path: identifies this job's processes
mpirun -np 4 --oversubscribe "$BIN" train "${MODEL[@]}" --pipeline-model-parallel-size 2 --train-iters 100000 \
  --metrics "$MARK" > "$WORK/kill.log" 2>&1 &
MPIRUN=$!
# The ranks: processes whose command line starts with the binary and carries the marker
# (mpirun's own command line starts with "mpirun").
rank_pid() {
  local pid
  for pid in $(pgrep -f -- "^$BIN train .*$MARK"); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$pid"
      return
    fi
  done
}
for _ in $(seq 300); do  # up to 30 s for two iterations to be logged
  [[ -f $MARK && $(wc -l < "$MARK") -ge 2 ]] && break
  kill -0 $MPIRUN 2>/dev/null || break
  sleep 0.1
done
VICTIM=$(rank_pid 2)
if [[ ! -f $MARK || $(wc -l < "$MARK") -lt 2 || -z $VICTIM ]]; then
  cat "$WORK/kill.log"
  failed "SIGKILL: the 4-rank job did not start iterating within 30 s (or rank 2 not found)"
  kill $MPIRUN 2>/dev/null
  wait $MPIRUN 2>/dev/null
else
  before=$(wc -l < "$MARK")
  kill -9 "$VICTIM"
  killed_at=$SECONDS
  while kill -0 $MPIRUN 2>/dev/null && (( SECONDS - killed_at < 30 )); do sleep 0.2; done
  if kill -0 $MPIRUN 2>/dev/null; then
    failed "SIGKILL: mpirun still running 30 s after rank 2 (pid $VICTIM) was killed (hang)"
    kill -9 $MPIRUN $(pgrep -f -- "^$BIN train .*$MARK") 2>/dev/null
    wait $MPIRUN 2>/dev/null
  else
    wait $MPIRUN
    rc=$?
    took=$((SECONDS - killed_at))
    if [[ $rc -ne 0 ]]; then
      pass "SIGKILL of rank 2 (pid $VICTIM) after $before iterations: mpirun exited $rc within ${took} s"
    else
      failed "SIGKILL of rank 2: mpirun exited 0"
    fi
    sleep 0.5
    left=$(pgrep -f -- "^$BIN train .*$MARK" | tr '\n' ' ')
    if [[ -z $left ]]; then
      pass "SIGKILL: no rank of the job left running"
    else
      failed "SIGKILL: ranks still running after mpirun exited: pids $left"
      kill -9 $left 2>/dev/null
    fi
  fi
fi

# ---- (b) invalid topologies -----------------------------------------------------------------
expect_failure "world 3 with TP 2" "not divisible by tensor-model-parallel-size 2" 3 \
  --tensor-model-parallel-size 2 --train-iters 2
expect_failure "6 heads with TP 4" "num-attention-heads 6 is not divisible by --tensor-model-parallel-size 4" 4 \
  --num-attention-heads 6 --hidden-size 48 --tensor-model-parallel-size 4 --train-iters 2
expect_failure "2 layers with PP 4" "num-layers 2 is not divisible by --pipeline-model-parallel-size 4" 4 \
  --pipeline-model-parallel-size 4 --train-iters 2
expect_failure "global batch 6 with micro-batch 2 x DP 2" "global-batch-size 6 is not divisible" 2 \
  --global-batch-size 6 --train-iters 2

# ---- (c) bad input on one rank only ---------------------------------------------------------
LAYOUT=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2)
if timeout 60 mpirun -np 4 --oversubscribe "$BIN" train "${MODEL[@]}" "${LAYOUT[@]}" --train-iters 1 \
    --save "$WORK/ckpt" > "$WORK/save.log" 2>&1; then
  SHARD=iter_0000001/mp_rank_01_001/model_optim_rng.bin  # rank 3 (tp 1, stage 1) only
  cp -r "$WORK/ckpt" "$WORK/missing"
  rm "$WORK/missing/$SHARD"
  expect_failure "load with one shard deleted" "mp_rank_01_001" 4 "${LAYOUT[@]}" --train-iters 2 \
    --load "$WORK/missing"
  cp -r "$WORK/ckpt" "$WORK/corrupt"
  size=$(stat -c %s "$WORK/corrupt/$SHARD")
  # Flip one byte in the middle of the data (the tensors, not the header).
  printf '\xff' | dd of="$WORK/corrupt/$SHARD" bs=1 seek=$((size / 2)) conv=notrunc status=none
  cmp -s "$WORK/ckpt/$SHARD" "$WORK/corrupt/$SHARD" && printf '\x00' |
    dd of="$WORK/corrupt/$SHARD" bs=1 seek=$((size / 2)) conv=notrunc status=none
  expect_failure "load with one shard corrupted" "mp_rank_01_001.*(checksum|CRC|crc|corrupt)|(checksum|CRC|crc|corrupt).*mp_rank_01_001" 4 \
    "${LAYOUT[@]}" --train-iters 2 --load "$WORK/corrupt"
else
  tail -n 20 "$WORK/save.log"
  failed "could not make the checkpoint for (c)"
fi
# Every rank probes --save at start-up, before the first iteration (a save that fails
# mid-run, disk full, is cli.storage_faults').
touch "$WORK/not-a-dir"
expect_failure "--save under a regular file (refused at start-up)" "not-a-dir" 4 "${LAYOUT[@]}" --train-iters 3 \
  --save "$WORK/not-a-dir/ckpt" --save-interval 1

# ---- (d) bad input on several ranks at once, mid-run ----------------------------------------
# --vocab-size 400 without a tokenizer: the 512-token data has ids >= 400, which the first
# and last stage of both DP replicas find in their first micro-batch.
# (MODEL without its --tokenizer-model: an empty value is refused, not "no tokenizer".)
check_failure "token ids beyond --vocab-size (4 ranks find them)" "outside the tokenizer's vocabulary of 400" \
  mpirun -np 4 --oversubscribe "$BIN" train "${MODEL[@]:0:2}" "${MODEL[@]:4}" --vocab-size 400 --pipeline-model-parallel-size 2 \
  --global-batch-size 8 --train-iters 2

# ---- (e) a failure on one rank between the set-up's collectives ---------------------------
# Rank 1 (ulimit -v 1 GB) runs out of host memory building its stage: 1.6 GB of weights,
# gradients and Adam moments, after the ranks have begun forming their groups. Rank 0 waits
# in the next collective (the placement report): the job must end with rank 1's message
# rather than wait there for ever, and rank 1 must not wait in MPI_Finalize with it unsaid.
BIG=(--num-layers 4 --hidden-size 2048 --pipeline-model-parallel-size 2 --train-iters 1)
# shellcheck disable=SC2016  # $0 and $@ are the inner shell's: the binary and its flags
check_failure "host memory exhausted on rank 1 while building the model" "out of host memory.*\(rank 1\)" \
  mpirun --oversubscribe -np 1 "$BIN" train "${MODEL[@]}" "${BIG[@]}" : \
  -np 1 bash -c 'ulimit -v 1000000 && exec "$0" "$@"' "$BIN" train "${MODEL[@]}" "${BIG[@]}"
finish
