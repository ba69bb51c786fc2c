#!/usr/bin/env bash
# labels: ops;checkpoint
# Start-up consistency (issue 13, item 4): every rank must run the same math and the same
# binary (an MPMD launch with different flags, another build on a node: refused in one
# line, every rank non-zero), and a checkpoint resumes only on the dataset it was trained
# on (document and token counts), unless --override-data-check.
source "$(dirname "$0")/fixture/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
RUN=("${TINY[@]}" --train-iters 4 --pipeline-model-parallel-size 2)

one_line_error() { # NAME PATTERN LOG STATUS
  if [[ $4 != 0 && $(grep -c '^error:' "$3") == 1 ]] && grep -qE -- "$2" "$3"; then
    pass "$1: status $4, $(grep '^error:' "$3")"
  else
    cat "$3"
    failed "$1: status $4, want one 'error:' line matching /$2/"
  fi
}

# Flags that change the math differ between the two ranks (MPMD launch).
mpirun --oversubscribe -np 1 "$BIN" train "${RUN[@]}" --lr 1e-3 : -np 1 "$BIN" train "${RUN[@]}" --lr 2e-3 \
  > "$WORK/mpmd.log" 2>&1
one_line_error "MPMD with different --lr" "rank 1 was started with flags that change the math differently from rank 0's.*same flags" "$WORK/mpmd.log" $?
# The same flags in another order (and a different --metrics path) are the same math.
mpirun --oversubscribe -np 1 "$BIN" train "${RUN[@]}" --lr 1e-3 --seed 3 --metrics "$WORK/a.jsonl" : \
  -np 1 "$BIN" train --seed 3 --lr 1e-3 "${RUN[@]}" > "$WORK/mpmd_ok.log" 2>&1 \
  && pass "MPMD with the same math in another order: runs" || { cat "$WORK/mpmd_ok.log"; failed "MPMD with the same math refused"; }
# Another build of the binary on one rank.
cp "$BIN" "$WORK/other-build"
printf 'x' >> "$WORK/other-build"
mpirun --oversubscribe -np 1 "$BIN" train "${RUN[@]}" : -np 1 "$WORK/other-build" train "${RUN[@]}" > "$WORK/bin.log" 2>&1
one_line_error "a different binary on rank 1" "rank 1 runs a different optimus-cc binary from rank 0's" "$WORK/bin.log" $?

# A checkpoint resumed on another dataset (the same tokenizer, fewer documents).
head -c 200000 <(zstdcat "$SRC/data/kjv.txt.zst") > "$WORK/part.txt"
"$BIN" preprocess --input "$WORK/part.txt" --output-prefix "$WORK/part" --tokenizer-model "$DATA/kjv.model" \
  > "$WORK/pre.log" 2>&1 || { cat "$WORK/pre.log"; failed "preprocess"; }
"$BIN" train "${TINY[@]}" --train-iters 2 --save "$WORK/ck" > "$WORK/ck.log" 2>&1 || { cat "$WORK/ck.log"; failed "train"; }
"$BIN" train "${TINY[@]}" --train-iters 4 --load "$WORK/ck" --data-path "$WORK/part" > "$WORK/other.log" 2>&1
one_line_error "resume on another dataset" "trained on a dataset of [0-9]+ documents and [0-9]+ tokens, but --data-path .* has [0-9]+ and [0-9]+; .*--override-data-check" "$WORK/other.log" $?
if "$BIN" train "${TINY[@]}" --train-iters 4 --load "$WORK/ck" --data-path "$WORK/part" --override-data-check \
    > "$WORK/override.log" 2>&1 && grep -q "^notice: --override-data-check" "$WORK/override.log"; then
  pass "--override-data-check: resumes on the other dataset with a notice"
else
  cat "$WORK/override.log"
  failed "--override-data-check did not resume"
fi
"$BIN" train "${TINY[@]}" --train-iters 4 --load "$WORK/ck" > "$WORK/same.log" 2>&1 \
  && pass "resume on the same dataset: runs" || { cat "$WORK/same.log"; failed "resume on the same dataset"; }
finish
