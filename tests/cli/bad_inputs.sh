#!/usr/bin/env bash
# labels: errors
# Each bad input: non-zero exit (not a crash), exactly one line on stderr that
# starts with "error:" and names the problem, within a time limit.
source "$(dirname "$0")/fixture/lib.sh"

# expect_error NAME PATTERN -- COMMAND...
expect_error() {
  local name=$1 pattern=$2
  shift 3
  local out="$WORK/out" err="$WORK/err" rc
  timeout 60 "$@" > "$out" 2> "$err"
  rc=$?
  local lines
  lines=$(grep -c . "$err")
  if [[ $rc -eq 0 ]]; then failed "$name: exit 0"; return; fi
  if [[ $rc -eq 124 ]]; then failed "$name: timed out"; return; fi
  if [[ $rc -ge 128 ]]; then failed "$name: crashed (signal $((rc - 128)))"; cat "$err"; return; fi
  if [[ $lines -ne 1 ]]; then failed "$name: $lines lines on stderr"; cat "$err"; return; fi
  if ! grep -q '^error: ' "$err"; then failed "$name: no 'error:' prefix: $(cat "$err")"; return; fi
  if ! grep -qiE -- "$pattern" "$err"; then failed "$name: message does not match /$pattern/: $(cat "$err")"; return; fi
  pass "$name: $(cat "$err")"
}

T=("${TINY[@]}" --train-iters 2)
expect_error "unknown flag" "--bogus-flag" -- "$BIN" train "${T[@]}" --bogus-flag 3
expect_error "unknown command" "unknown command" -- "$BIN" frobnicate
expect_error "missing data path" "data-path" -- "$BIN" train --tokenizer-model "$DATA/kjv.model" --train-iters 1
expect_error "nonexistent dataset" "cannot open|no such" -- "$BIN" train "${T[@]}" --data-path "$WORK/nope"
expect_error "hidden not divisible by heads" "not divisible by --num-attention-heads" -- \
  "$BIN" train "${T[@]}" --hidden-size 30
expect_error "seq-length above max positions" "exceeds --max-position-embeddings" -- \
  "$BIN" train "${T[@]}" --seq-length 64
expect_error "global batch not divisible" "global-batch-size" -- "$BIN" train "${T[@]}" --global-batch-size 5
expect_error "bad lr decay style" "lr-decay-style" -- "$BIN" train "${T[@]}" --lr-decay-style exponential
expect_error "bad split" "split" -- "$BIN" train "${T[@]}" --split 1,x
# Compression methods (beyond the paper): unknown names, a method that a link class does not
# take, a method without its technique, out-of-range fractions, activation compression
# without a pipeline.
expect_error "unknown CB method" "inter-grad-comp-method 'zip'.*powersgd\|int8" -- "$BIN" train "${T[@]}" \
  --inter-grad-comp --inter-grad-comp-method zip
expect_error "sign is not an activation method" "activation-comp-method 'sign' is not offered.*none\|int8\|fp8-e4m3\|topk" -- \
  "$BIN" train "${T[@]}" --activation-comp-method sign
expect_error "activation compression without a pipeline" "activation-comp-method int8 needs --pipeline" -- \
  "$BIN" train "${T[@]}" --activation-comp-method int8
expect_error "DP method without --grad-comp" "grad-comp-method int8 needs --grad-comp" -- \
  "$BIN" train "${T[@]}" --grad-comp-method int8
expect_error "CB method without --inter-grad-comp" "inter-grad-comp-method sign needs --inter-grad-comp" -- \
  "$BIN" train "${T[@]}" --inter-grad-comp-method sign
expect_error "topk fraction for another CB method" "inter-grad-comp-topk-fraction applies only to --inter-grad-comp-method topk \(it is int8\); drop it or use --inter-grad-comp-method topk" -- \
  "$BIN" train "${T[@]}" --inter-grad-comp --inter-grad-comp-method int8 --inter-grad-comp-topk-fraction 0.1
expect_error "DP topk fraction without --grad-comp" "grad-comp-topk-fraction has no effect without --grad-comp; drop it or add --grad-comp" -- \
  "$BIN" train "${T[@]}" --grad-comp-topk-fraction 0.05
expect_error "DP rank for a byte method" "grad-comp-rank applies only to --grad-comp-method powersgd \(it is sign\)" -- \
  "$BIN" train "${T[@]}" --grad-comp --grad-comp-method sign --grad-comp-rank 8
expect_error "activation topk fraction without activation compression" "activation-comp-topk-fraction has no effect without --activation-comp-method other than none" -- \
  "$BIN" train "${T[@]}" --activation-comp-topk-fraction 0.5
expect_error "--skip-nonfinite with stateful compression" "skip-nonfinite cannot be combined with compression that keeps state" -- \
  "$BIN" train "${T[@]}" --grad-comp --skip-nonfinite 2
expect_error "plan: CB rank for a byte method" "inter-grad-comp-rank applies only to --inter-grad-comp-method powersgd" -- \
  "$BIN" plan "${T[@]}" --pipeline-model-parallel-size 2 --inter-grad-comp --inter-grad-comp-method int8 --inter-grad-comp-rank 4
expect_error "DP error feedback without --grad-comp" "grad-comp-error-feedback needs --grad-comp" -- \
  "$BIN" train "${T[@]}" --grad-comp-error-feedback
expect_error "topk fraction 0" "inter-grad-comp-topk-fraction must be in \(0, 1\]" -- "$BIN" train "${T[@]}" \
  --inter-grad-comp --inter-grad-comp-method topk --inter-grad-comp-topk-fraction 0
expect_error "topk fraction above 1" "activation-comp-topk-fraction must be in" -- "$BIN" train "${T[@]}" \
  --activation-comp-method topk --activation-comp-topk-fraction 1.5
expect_error "unreadable tokenizer model" "tokenizer" -- "$BIN" train "${T[@]}" --tokenizer-model "$SRC/README.md"
echo '{"num-layers": 2,' > "$WORK/bad.json"
expect_error "invalid --config JSON" "not valid JSON" -- "$BIN" train "${T[@]}" --config "$WORK/bad.json"

: > "$WORK/empty.txt"
expect_error "empty corpus" "no documents" -- \
  "$BIN" preprocess --input "$WORK/empty.txt" --output-prefix "$WORK/empty" --vocab-size 100
expect_error "preprocess without tokenizer or vocab size" "tokenizer-model|vocab-size" -- \
  "$BIN" preprocess --input "$SRC/data/kjv.txt.zst" --output-prefix "$WORK/x"

# Datasets: bad magic, truncated index.
cp "$DATA/kjv.bin" "$WORK/bad.bin"
printf 'XXXXXXXXX' | cat - <(tail -c +10 "$DATA/kjv.idx") > "$WORK/bad.idx"
expect_error "dataset with bad magic" "magic" -- "$BIN" train "${T[@]}" --data-path "$WORK/bad"
head -c 100 "$DATA/kjv.idx" > "$WORK/bad.idx"
expect_error "truncated dataset index" "truncated" -- "$BIN" train "${T[@]}" --data-path "$WORK/bad"

# Checkpoints: a good one, then corrupted and mismatched loads.
if "$BIN" train "${T[@]}" --save "$WORK/ckpt" > "$WORK/save.log" 2>&1; then
  expect_error "checkpoint of another model shape" "hidden_size" -- \
    "$BIN" train "${TINY[@]}" --train-iters 4 --hidden-size 64 --load "$WORK/ckpt"
  f=$(ls "$WORK"/ckpt/iter_*/mp_rank_00_000/model_optim_rng.bin | head -1)
  size=$(stat -c %s "$f")
  printf '\xff\xff\xff\xff' | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc status=none
  expect_error "corrupted checkpoint" "corrupt|checksum" -- "$BIN" train "${TINY[@]}" --train-iters 4 --load "$WORK/ckpt"
  expect_error "load from an empty directory" "no checkpoint" -- \
    "$BIN" train "${TINY[@]}" --train-iters 4 --load "$WORK"
else
  cat "$WORK/save.log"; failed "could not save the checkpoint the load checks need"
fi
expect_error "generate without a checkpoint" "no checkpoint" -- \
  "$BIN" generate --load "$WORK" --tokenizer-model "$DATA/kjv.model" --prompt hi
finish
