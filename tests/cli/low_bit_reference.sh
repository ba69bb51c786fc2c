#!/usr/bin/env bash
# labels: compression
# The 2- and 3-bit block codes (int2, lloydmax2, lloydmax3; kernels/block_codes.h) against a
# NumPy encoder written from their definitions (tests/cli/fixture/low_bit_reference.py: the
# Lloyd-Max levels computed there by Lloyd's iteration on the normal density), byte for byte,
# on the real pipeline messages of a P2 run (--debug-dump-messages: every block method's wire
# of each message) at hidden 48 (a padded block of 64) and 64. About 10 s.
source "$(dirname "$0")/fixture/lib.sh"
for C in 48 64; do
  if timeout 120 mpirun -np 2 --oversubscribe "$BIN" train --data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" \
      --num-layers 2 --hidden-size $C --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 \
      --micro-batch-size 2 --global-batch-size 4 --train-iters 2 --eval-iters 0 --seed 3 \
      --pipeline-model-parallel-size 2 --activation-comp-method lloydmax2 --activation-comp-rotation hadamard \
      --inter-grad-comp --inter-grad-comp-method int2 --debug-dump-messages "$WORK/dump$C" > "$WORK/run$C.log" 2>&1; then
    if out=$("$PY" "$SRC/tests/cli/fixture/low_bit_reference.py" "$WORK/dump$C"); then
      pass "hidden $C: int2, lloydmax2 and lloydmax3 wires equal NumPy's from the definitions ($out)"
    else
      echo "$out"
      failed "hidden $C: the engine's wires differ from NumPy's"
    fi
  else
    tail -n 20 "$WORK/run$C.log"
    failed "hidden $C: training run failed"
  fi
done
finish
