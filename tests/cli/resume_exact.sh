#!/usr/bin/env bash
# labels: checkpoint
# 2N iterations straight vs N, stop, --load, N more: the same loss sequence and
# bit-identical final weights and optimizer state (dropout on).
source "$(dirname "$0")/fixture/lib.sh"
N=3
RUN=("${TINY[@]}" --train-iters $((2 * N)) --hidden-dropout 0.1 --attention-dropout 0.1 --seed 77)

"$BIN" train "${RUN[@]}" --save "$WORK/straight" --save-interval $N --metrics "$WORK/straight.jsonl" \
  > "$WORK/straight.log" 2>&1 || { cat "$WORK/straight.log"; failed "straight run"; finish; exit; }
# The interrupted run: same flags, stopped after N (a copy of the iteration-N checkpoint).
mkdir -p "$WORK/resumed"
cp -r "$WORK/straight/iter_$(printf %07d $N)" "$WORK/resumed/"
echo $N > "$WORK/resumed/latest_checkpointed_iteration.txt"
"$BIN" train "${RUN[@]}" --load "$WORK/resumed" --save "$WORK/resumed" --save-interval $N \
  --metrics "$WORK/resumed.jsonl" > "$WORK/resumed.log" 2>&1 || { cat "$WORK/resumed.log"; failed "resumed run"; finish; exit; }

loss_lines() { /usr/bin/python3 -c "
import json,sys
for l in open(sys.argv[1]):
    j=json.loads(l)
    if j['iter']>$N: print(j['iter'], repr(j['loss']), repr(j.get('val_loss')))" "$1"; }
if diff <(loss_lines "$WORK/straight.jsonl") <(loss_lines "$WORK/resumed.jsonl"); then
  pass "losses of iterations $((N + 1))..$((2 * N)) identical"
else
  failed "losses differ after resume"
fi
[[ $(loss_lines "$WORK/resumed.jsonl" | wc -l) -eq $N ]] && pass "resumed run trained $N iterations" || failed "resumed run did not train $N iterations"
final=iter_$(printf %07d $((2 * N)))/mp_rank_00_000/model_optim_rng.bin
if cmp -s "$WORK/straight/$final" "$WORK/resumed/$final"; then
  pass "final checkpoints (weights, Adam moments, position) bit-identical"
else
  failed "final checkpoints differ"
fi
finish
