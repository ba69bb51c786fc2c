#!/usr/bin/env bash
# labels: ops;checkpoint
# Storage faults (issue 13, item 3): the disk fills up during a save (a small tmpfs, where
# the machine lets root mount one; skipped with the reason otherwise) and a --save
# directory that cannot be created; the disk filling up under a background save (--async-save).
# Each is one clear error line and a non-zero exit of the job; the previous checkpoint stays
# the latest and loads; a resumed run continues.
source "$(dirname "$0")/fixture/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
RUN=("${TINY[@]}" --train-iters 4 --eval-interval 1000 --pipeline-model-parallel-size 2)
MPI=(mpirun --oversubscribe -np 2)

# An unwritable place: /proc refuses new directories, even to root.
"${MPI[@]}" "$BIN" train "${RUN[@]}" --save /proc/occ-checkpoints --save-interval 2 > "$WORK/proc.log" 2>&1
rc=$?
if [[ $rc != 0 && $(grep -c '^error:' "$WORK/proc.log") == 1 ]] && grep -q '^error: cannot create --save directory /proc/occ-checkpoints' "$WORK/proc.log" && ! grep -q '^iter ' "$WORK/proc.log"; then
  pass "--save in an unwritable place: exit $rc, $(grep '^error:' "$WORK/proc.log" | cut -c1-160)"
else
  cat "$WORK/proc.log"
  failed "--save in an unwritable place: status $rc"
fi

# Disk full: room for one checkpoint and a half.
"${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters 2 --save "$WORK/size" > "$WORK/size.log" 2>&1 || { cat "$WORK/size.log"; failed "sizing run"; }
bytes=$(du -sb "$WORK/size" | cut -f1)
mkdir -p "$WORK/small"
if ! mount -t tmpfs -o size=$((bytes * 3 / 2 / 4096 * 4096 + 4096)) tmpfs "$WORK/small" 2> "$WORK/mount.err"; then
  echo "SKIP disk full: cannot mount a small tmpfs here ($(cat "$WORK/mount.err"))"
  finish
  exit
fi
trap 'umount "$WORK/small" 2> /dev/null; rm -rf "$WORK"' EXIT
"${MPI[@]}" "$BIN" train "${RUN[@]}" --save "$WORK/small/ck" --save-interval 2 --metrics "$WORK/full.jsonl" > "$WORK/full.log" 2>&1
rc=$?
if [[ $rc != 0 && $(grep -c '^error:' "$WORK/full.log") == 1 ]] && grep -q '^error: cannot write .*No space left on device; check that the disk has free space' "$WORK/full.log" &&
    [[ $(cat "$WORK/small/ck/latest_checkpointed_iteration.txt") == 2 ]]; then
  pass "disk full at the second save (2 ranks): exit $rc, one line, checkpoint 2 still the latest: $(grep '^error:' "$WORK/full.log" | cut -c1-140)"
else
  cat "$WORK/full.log"
  failed "disk full: status $rc, latest $(cat "$WORK/small/ck/latest_checkpointed_iteration.txt" 2> /dev/null)"
fi
# The surviving checkpoint loads and the run goes on (elsewhere, with room).
mkdir -p "$WORK/room"
cp -r "$WORK/small/ck/iter_0000002" "$WORK/small/ck/latest_checkpointed_iteration.txt" "$WORK/room/"
"${MPI[@]}" "$BIN" train "${RUN[@]}" --load "$WORK/room" --save "$WORK/room" --save-interval 2 > "$WORK/resume.log" 2>&1
rc=$?
if [[ $rc == 0 && $(cat "$WORK/room/latest_checkpointed_iteration.txt") == 4 ]] && grep -q "loaded checkpoint .* at iteration 2" "$WORK/resume.log"; then
  pass "the checkpoint left by the failed save loads; the run continues to iteration 4"
else
  cat "$WORK/resume.log"
  failed "resume after disk full: status $rc"
fi
# The same with --async-save: the background write fails, and the job ends with its error.
rm -rf "$WORK/small/ck"
"${MPI[@]}" "$BIN" train "${RUN[@]}" --save "$WORK/small/ack" --save-interval 2 --async-save > "$WORK/afull.log" 2>&1
rc=$?
if [[ $rc != 0 && $(grep -c '^error:' "$WORK/afull.log") == 1 ]] && grep -q '^error: cannot write .*No space left on device' "$WORK/afull.log" &&
    [[ $(cat "$WORK/small/ack/latest_checkpointed_iteration.txt") == 2 ]]; then
  pass "disk full during a background save (--async-save): exit $rc, one line, checkpoint 2 still the latest"
else
  cat "$WORK/afull.log"
  failed "disk full, --async-save: status $rc, latest $(cat "$WORK/small/ack/latest_checkpointed_iteration.txt" 2> /dev/null)"
fi
finish
