#!/usr/bin/env bash
# labels: data;parallel;checkpoint
# Blended datasets and separate train / validation / test sets (issue 33): Megatron's
# --data-path W1 P1 W2 P2 ... and --train-data-path / --valid-data-path / --test-data-path.
# The token stream a run trains on (every sample each input rank reads, dumped by the
# hidden --debug-dump-tokens) is compared line for line: a one-dataset blend is today's
# stream; a blend is the same under T2 P2 D2 as on one process and across a resume; its
# shares follow the weights. Bad blends are one error line each; a checkpoint refuses
# another blend; a test set is evaluated after the last iteration.
source "$(dirname "$0")/fixture/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
A=$DATA/kjv
# B: the first 300 kB of the corpus, with the same tokenizer; C: the same text with another one.
head -c 300000 <(zstdcat "$SRC/data/kjv.txt.zst") > "$WORK/part.txt"
"$BIN" preprocess --input "$WORK/part.txt" --output-prefix "$WORK/B" --tokenizer-model "$DATA/kjv.model" > "$WORK/pre.log" 2>&1 &&
  "$BIN" preprocess --input "$WORK/part.txt" --output-prefix "$WORK/C" --vocab-size 400 >> "$WORK/pre.log" 2>&1 ||
  { cat "$WORK/pre.log"; failed "preprocess"; finish; exit; }
B=$WORK/B
MODEL=(--tokenizer-model "$DATA/kjv.model" --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32
       --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 --eval-iters 1 --eval-interval 1000
       --log-interval 1 --seed 7 --adam-eps 1e-3)

# run NAME RANKS FLAGS...: trains with the token dump into WORK/NAME.tokens (all ranks merged, sorted).
run() {
  local name=$1 np=$2
  shift 2
  rm -f "$WORK/$name".dump.rank*
  train_run "$name" "$np" "$@" --debug-dump-tokens "$WORK/$name.dump" || return 1
  cat "$WORK/$name".dump.rank* | sort -n -k1,1 -k2,2 > "$WORK/$name.tokens"
}
# same_tokens REF NAME [FIRST_ITER]: the two runs read the same samples (iteration, index, dataset, tokens).
same_tokens() {
  local first=${3:-1}
  awk -v f="$first" '$1 >= f' "$WORK/$1.tokens" > "$WORK/$1.cmp"
  awk -v f="$first" '$1 >= f' "$WORK/$2.tokens" > "$WORK/$2.cmp"
  if [[ -s $WORK/$1.cmp ]] && cmp -s "$WORK/$1.cmp" "$WORK/$2.cmp"; then
    pass "$2 vs $1: the same token stream ($(wc -l < "$WORK/$1.cmp") samples of iterations >= $first, token for token)"
  else
    diff "$WORK/$1.cmp" "$WORK/$2.cmp" | head -n 4 | cut -c1-160
    failed "$2 vs $1: token streams differ ($(wc -l < "$WORK/$1.cmp") vs $(wc -l < "$WORK/$2.cmp") samples)"
  fi
}
one_line_error() { # NAME PATTERN LOG STATUS
  if [[ $4 != 0 && $(grep -c '^error:' "$3") == 1 ]] && grep -qE -- "$2" "$3" && ! grep -q '^iter ' "$3"; then
    pass "$1: status $4, $(grep '^error:' "$3" | cut -c1-200)"
  else
    cat "$3"
    failed "$1: status $4, want one 'error:' line matching /$2/ and no iteration"
  fi
}

# 1. A blend of one dataset is the dataset itself: today's token stream, bit-identical losses.
if run plain 1 "${MODEL[@]}" --data-path "$A" --train-iters 3 && run one 1 "${MODEL[@]}" --data-path 1 "$A" --train-iters 3; then
  same_tokens plain one
  compare_losses plain one 0
fi

# 2. A blend: the same token stream on 1 process and on T2 P2 D2 (8 ranks); losses agree.
BLEND=(--data-path 0.7 "$A" 0.3 "$B")
if run blend1 1 "${MODEL[@]}" "${BLEND[@]}" --train-iters 3 &&
   run blend8 8 "${MODEL[@]}" "${BLEND[@]}" --train-iters 3 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2; then
  same_tokens blend1 blend8
  compare_losses blend1 blend8 1e-5
  # 3. The shares of the samples trained on follow the weights (Megatron's rule: within one sample).
  if out=$("$PY" - "$WORK/blend1.tokens" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
n = len(rows)
count = [sum(1 for r in rows if r[2] == d) for d in ("0", "1")]
for d, w in enumerate((0.7, 0.3)):
    assert abs(count[d] - w * n) <= 1, (d, count[d], w * n)
assert all(int(r[3]) < 512 for r in rows)
print(f"{n} samples: {count[0]} from A (0.7 x n = {0.7 * n:.1f}), {count[1]} from B (0.3 x n = {0.3 * n:.1f})")
PY
  ); then pass "blend shares: $out"; else failed "blend shares: $out"; fi
  grep -q "^data: --data-path 0.7 .*/kjv 0.3 .*/B --split 949,50,1; train .* tokens" "$WORK/blend1.log" &&
    pass "the run names its blend: $(grep '^data:' "$WORK/blend1.log" | cut -c1-160)" || failed "no data: line naming the blend"
fi

# 4. Across a resume: 4 iterations straight vs 2 + resume + 2 (2 ranks, P2), the same samples and losses.
R=("${MODEL[@]}" "${BLEND[@]}" --train-iters 4 --pipeline-model-parallel-size 2 --save-interval 2)
if run straight 2 "${R[@]}" --save "$WORK/ck_straight" &&
   run first 2 "${R[@]}" --save "$WORK/ck" --exit-interval 2 &&
   run resumed 2 "${R[@]}" --save "$WORK/ck" --load "$WORK/ck"; then
  same_tokens straight resumed 3
  compare_losses straight resumed 0 3
fi

# 5. Bad blends, each one error line before any iteration.
T=("${MODEL[@]}" --train-iters 2)
"$BIN" train "${T[@]}" --data-path 0.7 "$A" -0.3 "$B" > "$WORK/e1.log" 2>&1
one_line_error "a negative weight" "--data-path: weight -0.3 of '.*/B' is negative" "$WORK/e1.log" $?
"$BIN" train "${T[@]}" --data-path 0 "$A" 0 "$B" > "$WORK/e2.log" 2>&1
one_line_error "a zero weight (Megatron refuses it)" "--data-path: weight 0 for '.*kjv': Megatron's blends take positive weights only" "$WORK/e2.log" $?
"$BIN" train "${T[@]}" --data-path 0.7 "$A" 0.3 > "$WORK/e3.log" 2>&1
one_line_error "an odd word count" "--data-path: weight 0.3 has no prefix after it \(3 words, an odd count\)" "$WORK/e3.log" $?
"$BIN" train "${T[@]}" --data-path 0.7 "$A" 0.3 "$WORK/missing" > "$WORK/e4.log" 2>&1
one_line_error "a missing prefix" "$WORK/missing" "$WORK/e4.log" $?
# Prefixes without weights (Megatron's form): each dataset's one epoch, blended by size;
# a run that needs more samples than that is refused before it starts.
if "$BIN" train "${T[@]}" --data-path "$A" "$B" > "$WORK/e5.log" 2>&1 &&
   grep -q "^data: --data-path .*kjv .*/B --split 949,50,1; train " "$WORK/e5.log" &&
   grep -q "^iter 2/2" "$WORK/e5.log"; then
  pass "prefixes without weights: a blend of each dataset's one epoch by size ($(grep -o '^data: .*' "$WORK/e5.log" | cut -c1-140))"
else
  tail -n 5 "$WORK/e5.log"; failed "prefixes without weights: the run did not train"
fi
"$BIN" train "${T[@]}" --data-path "$A" "$B" --train-iters 1000000 > "$WORK/e5b.log" 2>&1
one_line_error "more samples than one epoch of each" "the train set of a blend without weights is one epoch of each dataset \([0-9]+ samples: .*\), fewer than the 8000000 it needs; give weights .*, or fewer iterations \\(--train-iters" "$WORK/e5b.log" $?
"$BIN" train "${T[@]}" --data-path 0.5 "$B" 0.5 "$WORK/C" > "$WORK/e6.log" 2>&1
one_line_error "datasets of different tokenizers" "datasets .*/B and .*/C were made with different tokenizers \(.*/B: SentencePiece.*vocabulary 512; .*/C: .*vocabulary 400\)" "$WORK/e6.log" $?
"$BIN" train "${T[@]}" --data-path "$A" --train-data-path "$B" > "$WORK/e7.log" 2>&1
one_line_error "--data-path with --train-data-path" "--data-path excludes --train-data-path" "$WORK/e7.log" $?
"$BIN" train "${T[@]}" --train-data-path "$A" --split 90,10,0 > "$WORK/e8.log" 2>&1
one_line_error "--split with --train-data-path" "--split divides --data-path's datasets, but --train-data-path gives the sets apart" "$WORK/e8.log" $?
"$BIN" train "${T[@]}" --valid-data-path "$A" > "$WORK/e9.log" 2>&1
one_line_error "--valid-data-path alone" "--valid-data-path needs --train-data-path" "$WORK/e9.log" $?
mpirun -np 2 "$BIN" train "${T[@]}" --pipeline-model-parallel-size 2 --data-path 0.5 "$A" x "$B" > "$WORK/e10.log" 2>&1
one_line_error "a bad weight on 2 ranks" "'x' \(word 3 of 4\) is not a weight" "$WORK/e10.log" $?

# 6. A checkpoint records its blend; another blend is refused, naming both, unless --override-data-check.
if [[ -d $WORK/ck_straight ]]; then
  mpirun -np 2 "$BIN" train "${MODEL[@]}" --pipeline-model-parallel-size 2 --data-path 0.5 "$A" 0.5 "$B" --train-iters 6 --load "$WORK/ck_straight" > "$WORK/other.log" 2>&1
  one_line_error "resume on another blend" "checkpoint .* was trained on --data-path 0.7 .*/kjv 0.3 .*/B --split 949,50,1, but this run has --data-path 0.5 .*/kjv 0.5 .*/B --split 949,50,1; .*--override-data-check" "$WORK/other.log" $?
  mpirun -np 2 "$BIN" train "${MODEL[@]}" --pipeline-model-parallel-size 2 --data-path "$A" --train-iters 6 --load "$WORK/ck_straight" > "$WORK/other2.log" 2>&1
  one_line_error "resume on one of the blend's datasets" "was trained on --data-path 0.7 .* but this run has --data-path .*/kjv --split" "$WORK/other2.log" $?
  if mpirun -np 2 "$BIN" train "${MODEL[@]}" --pipeline-model-parallel-size 2 --data-path 0.5 "$A" 0.5 "$B" --train-iters 6 --load "$WORK/ck_straight" --override-data-check \
      > "$WORK/override.log" 2>&1 && grep -q "^notice: --override-data-check: continuing on data other than the checkpoint's" "$WORK/override.log"; then
    pass "--override-data-check: resumes on the other blend with a notice"
  else
    cat "$WORK/override.log"
    failed "--override-data-check did not resume on another blend"
  fi
  mpirun -np 2 "$BIN" train "${MODEL[@]}" --pipeline-model-parallel-size 2 "${BLEND[@]}" --train-iters 6 --load "$WORK/ck_straight" > "$WORK/sameblend.log" 2>&1 \
    && pass "resume on the same blend: runs" || { tail -n 5 "$WORK/sameblend.log"; failed "resume on the same blend"; }
fi

# 7. Separate sets (each blendable); the test set is evaluated after the last iteration.
if train_run sets 1 "${MODEL[@]}" --train-data-path 0.7 "$A" 0.3 "$B" --valid-data-path "$B" --test-data-path 0.5 "$A" 0.5 "$B" \
    --train-iters 3 --eval-interval 2; then
  if out=$("$PY" - "$WORK/sets.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tests = [r["iter"] for r in rows if "test_loss" in r]
assert tests == [3], tests
assert [r["iter"] for r in rows if "val_loss" in r] == [2, 3]
print(f"test_loss {rows[-1]['test_loss']:.4f} in the metrics of iteration 3 only")
PY
  ) && grep -qE "^test loss at iter 3: [0-9.]+ \(ppl [0-9.]+\)" "$WORK/sets.log"; then
    pass "--train/valid/test-data-path: $out; log: $(grep '^test loss' "$WORK/sets.log")"
  else
    cat "$WORK/sets.log"
    failed "--train/valid/test-data-path: $out"
  fi
fi
# With --data-path the test set is --split's third part (the corpus's last document at 949,50,1).
grep -qE "^test loss at iter 3: " "$WORK/plain.log" && pass "--data-path with --split 949,50,1: $(grep '^test loss' "$WORK/plain.log")" ||
  failed "no test loss after the last iteration of a --data-path run"
finish
