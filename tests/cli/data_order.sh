#!/usr/bin/env bash
# labels: data;checkpoint
# Megatron's data order end to end (issue 45): `optimus-cc samples` prints the very
# samples training reads (the hidden --debug-dump-tokens stream), evaluations read
# the validation stream on from where the last one stopped (across a resume too),
# the index cache is built once per job and reused (a corrupt file rebuilt), an
# unwritable --data-cache-path falls back with one line, --train-samples with
# --lr-warmup-samples trains as the same run counted in iterations, and a
# checkpoint of the old sample order is refused unless --override-data-check, and
# --eval-fixed-set evaluates one fixed set.
source "$(dirname "$0")/fixture/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
CACHE=$WORK/cache
DATAFLAGS=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --seq-length 32 --global-batch-size 8
           --eval-iters 1 --seed 11 --data-cache-path "$CACHE")
MODEL=("${DATAFLAGS[@]}" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --max-position-embeddings 32
       --micro-batch-size 2 --log-interval 1)
# positions FILE: the "position tokens..." of a dump, sorted by position.
dump_rows() { sort -n -k2,2 "$@" | awk '{ $1 = ""; $3 = ""; print }' | tr -s ' ' | sed 's/^ //'; }

# 1. samples prints what training reads: 3 iterations of 8 samples on 2 ranks (D2), token for token.
if train_run order 2 --train-iters 3 --eval-interval 1 --debug-dump-tokens "$WORK/order.dump"; then
  if grep -q "^data index cache: built 3 index sets in .* s into $CACHE" "$WORK/order.log"; then
    pass "cold start: $(grep '^data index cache' "$WORK/order.log")"
  else
    failed "no 'data index cache: built 3 index sets' line"; cat "$WORK/order.log"
  fi
  "$BIN" samples "${DATAFLAGS[@]}" --train-iters 3 --eval-interval 1 --first 24 > "$WORK/samples.txt" 2> "$WORK/samples.err"
  cat "$WORK"/order.dump.rank* | awk '{ $1 = ""; $3 = ""; print }' | tr -s ' ' | sed 's/^ //' | sort -n -k1,1 > "$WORK/trained.txt"
  if [[ $(wc -l < "$WORK/samples.txt") == 24 ]] && cmp -s "$WORK/samples.txt" "$WORK/trained.txt"; then
    pass "samples --first 24 = the 24 samples 3 iterations trained on, in order: $(head -c 60 "$WORK/samples.txt")..."
  else
    diff "$WORK/samples.txt" "$WORK/trained.txt" | head -4 | cut -c1-120; failed "samples differs from the training stream"
  fi
  [[ ! -s $WORK/samples.err ]] && pass "samples found the job's indices (no build, nothing on stderr)" ||
    { cat "$WORK/samples.err"; failed "samples printed to stderr"; }
  # 2. Evaluations read on: at start (a look at the first batch), iterations 1, 2, 3 (batches 0, 1, 2).
  "$BIN" samples "${DATAFLAGS[@]}" --train-iters 3 --eval-interval 1 --split-name valid --first 24 > "$WORK/valid.txt"
  cat "$WORK"/order.dump.eval.rank* > "$WORK/evals.txt"
  got=$(awk '$2 == "valid" { print $1 ":" $3 }' "$WORK/evals.txt" | sort -t: -k1,1n -k2,2n | awk -F: '{ a[$1] = a[$1] " " $2 } END { for (i in a) print i ":" a[i] }' | sort -n | tr '\n' '|')
  want="0: 0 1 2 3 4 5 6 7|1: 0 1 2 3 4 5 6 7|2: 8 9 10 11 12 13 14 15|3: 16 17 18 19 20 21 22 23|"
  [[ $got == "$want" ]] && pass "validation positions by iteration: $got" || failed "validation positions: got '$got', want '$want'"
  if cmp -s <(awk '$2 == "valid" && $1 > 0' "$WORK/evals.txt" | awk '{ $1 = ""; $2 = ""; print }' | tr -s ' ' | sed 's/^ //' | sort -n -k1,1) "$WORK/valid.txt"; then
    pass "the evaluations read samples --split-name valid's 24 samples, token for token"
  else
    failed "the evaluations' tokens differ from samples --split-name valid"
  fi
  awk '$2 == "test" { print $3 }' "$WORK/evals.txt" | sort -n | tr '\n' ' ' | grep -qx "0 1 2 3 4 5 6 7 " &&
    pass "the test set: positions 0-7 after the last iteration" || failed "test positions: $(awk '$2 == "test" { print $3 }' "$WORK/evals.txt" | tr '\n' ' ')"
fi

# 2b. A last iteration off the interval: its evaluation (Megatron's end-of-training one) reads the next batch.
if train_run off 1 --train-iters 3 --eval-interval 2 --debug-dump-tokens "$WORK/off.dump"; then
  got=$(awk '$2 == "valid" { print $1 ":" $3 }' "$WORK/off.dump.eval.rank0" | awk -F: '$2 % 8 == 0' | tr '\n' ' ')
  [[ $got == "0:0 2:0 3:8 " ]] && pass "--train-iters 3 --eval-interval 2: evaluations at 0, 2, 3 start at positions 0, 0, 8" ||
    failed "off-interval evaluations start at '$got', want '0:0 2:0 3:8 '"
fi

# 3. The validation stream across a resume: 4 iterations straight vs 2 + resume + 2.
if train_run straight 1 --train-iters 4 --eval-interval 1 --debug-dump-tokens "$WORK/straight.dump" &&
   train_run first 1 --train-iters 4 --exit-interval 2 --eval-interval 1 --save "$WORK/ck" --debug-dump-tokens "$WORK/resumed.dump" &&
   train_run resumed 1 --train-iters 4 --eval-interval 1 --load "$WORK/ck" --debug-dump-tokens "$WORK/resumed.dump"; then
  a=$(awk '$2 == "valid" && $1 >= 3 { print $1, $3 }' "$WORK/straight.dump.eval.rank0" | tr '\n' ' ')
  b=$(awk '$2 == "valid" && $1 >= 3 { print $1, $3 }' "$WORK/resumed.dump.eval.rank0" | tr '\n' ' ')
  [[ -n $a && $a == "$b" ]] && pass "resumed evaluations read on where the checkpoint stopped (iteration position: ${a:0:40}...)" ||
    failed "resumed evaluations read '$b', straight '$a'"
  compare_losses straight resumed 0 3
fi

# 4. The cache is built once per job (4 ranks: one build line) and reused (nothing built, no file
#    rewritten); a truncated array is rebuilt.
C4=(--data-cache-path "$WORK/cache4" --train-iters 3 --eval-interval 1 --pipeline-model-parallel-size 2)
if train_run cold 4 "${C4[@]}" && train_run warm 4 "${C4[@]}"; then
  [[ $(grep -c "^data index cache: built 3 index sets" "$WORK/cold.log") == 1 ]] && pass "cold start on 4 ranks: built once" ||
    failed "cold start on 4 ranks: $(grep '^data index' "$WORK/cold.log")"
  ! grep -q "^data index cache: built" "$WORK/warm.log" &&
    pass "warm start on 4 ranks: nothing built" || failed "the warm start rebuilt: $(grep '^data index' "$WORK/warm.log")"
  compare_losses cold warm 0
  truncate -s -4 "$WORK"/cache4/*-GPTDataset-train-shuffle_index.npy
  if train_run mended 4 "${C4[@]}" &&
     grep -q "^data index cache: built 1 index set in" "$WORK/mended.log"; then
    compare_losses warm mended 0
    [[ $(ls "$WORK"/cache4/*.npy | wc -l) == 9 ]] && pass "the train indices rebuilt in place (9 arrays)" || failed "$(ls "$WORK"/cache4)"
  else
    failed "a truncated index was not rebuilt: $(grep '^data index' "$WORK/mended.log")"
  fi
fi

# 5. An unwritable cache folder: a temporary one, said in one line.
touch "$WORK/not-a-dir"
mkdir -p "$WORK/tmp"
if TMPDIR=$WORK/tmp train_run fallback 1 --train-iters 1 --eval-interval 1 --data-cache-path "$WORK/not-a-dir/cache"; then
  [[ $(grep -c "^note: the data index cache $WORK/not-a-dir/cache cannot be written" "$WORK/fallback.log") == 1 ]] &&
    pass "$(grep '^note: the data index cache' "$WORK/fallback.log" | cut -c1-150)" || failed "no one-line note on the fallback folder"
fi

# 6. --train-samples / --lr-warmup-samples: the run --train-iters 3 --lr-warmup-iters 1 counted in samples.
if train_run by_iters 1 --train-iters 3 --lr-warmup-iters 1 --eval-interval 1 &&
   train_run by_samples 1 --train-samples 24 --lr-warmup-samples 8 --eval-interval 1; then
  compare_losses by_iters by_samples 0
fi
"$BIN" train "${MODEL[@]}" --train-iters 3 --train-samples 24 > "$WORK/both.log" 2>&1
[[ $? != 0 ]] && grep -q "^error: --train-samples excludes --train-iters" "$WORK/both.log" &&
  pass "--train-iters with --train-samples: $(head -1 "$WORK/both.log")" || { cat "$WORK/both.log"; failed "--train-iters with --train-samples"; }

# 6b. No pass over the tokens at start-up: an id beyond the vocabulary (a dataset without the
#     stamp that records its largest id) is refused when its sample is read, naming it.
cp "$DATA/kjv.idx" "$WORK/wide.idx"
"$PY" -c "import sys; n = open('$DATA/kjv.bin', 'rb').seek(0, 2); open('$WORK/wide.bin', 'wb').write(bytes.fromhex('a00f') * (n // 2))"
"$BIN" train "${MODEL[@]}" --data-path "$WORK/wide" --train-iters 1 --eval-interval 1 > "$WORK/wide.log" 2>&1
status=$?
if [[ $status != 0 ]] && [[ $(grep -c '^error:' "$WORK/wide.log") == 1 ]] &&
   grep -qE "^error: token id 4000 in document [0-9]+ of $WORK/wide is outside the tokenizer's vocabulary of 512" "$WORK/wide.log"; then
  pass "an id beyond the vocabulary, read: $(grep '^error:' "$WORK/wide.log" | cut -c1-150)"
else
  cat "$WORK/wide.log"; failed "an id beyond the vocabulary was not refused when read"
fi

# 7. A checkpoint of the old sample order (no data_order in its record) is refused, with the way out.
if [[ -d $WORK/ck ]]; then
  cp -r "$WORK/ck" "$WORK/old"
  for f in "$WORK"/old/iter_*/mp_rank_*/model_optim_rng.bin; do
    "$PY" - "$f" <<'PY'
import json, struct, sys, zlib
path = sys.argv[1]
blob = open(path, "rb").read()
(n,) = struct.unpack_from("<Q", blob, 8)
header = json.loads(blob[16:16 + n])
start = (16 + n + 63) // 64 * 64
data = blob[start:len(blob) - 4]
for key in ("data_order",):
    header["meta"]["data"].pop(key, None)
header["meta"].pop("consumed_valid_samples", None)
text = json.dumps(header, separators=(",", ":")).encode()
out = bytearray(b"OCCTENS1" + struct.pack("<Q", len(text)) + text)
out += b"\0" * ((16 + len(text) + 63) // 64 * 64 - len(out))
out += data + struct.pack("<I", zlib.crc32(text))
open(path, "wb").write(out)
PY
  done
  "$BIN" train "${MODEL[@]}" --train-iters 4 --eval-interval 1 --load "$WORK/old" > "$WORK/old.log" 2>&1
  status=$?
  if [[ $status == 1 && $(grep -c '^error:' "$WORK/old.log") == 1 ]] && ! grep -q '^iter ' "$WORK/old.log" &&
     grep -q "was trained in optimus-cc's sample order 1 (per-epoch Philox shuffles), but this build reads Megatron-core's GPTDataset order.*--override-data-check" "$WORK/old.log"; then
    pass "an old-order checkpoint: $(grep '^error:' "$WORK/old.log" | cut -c1-240)"
  else
    cat "$WORK/old.log"; failed "an old-order checkpoint was not refused with the way out"
  fi
  if train_run old_override 1 --train-iters 4 --eval-interval 1 --load "$WORK/old" --override-data-check &&
     grep -q "^notice: --override-data-check: the checkpoint was trained in optimus-cc's sample order 1" "$WORK/old_override.log"; then
    pass "--override-data-check continues it in Megatron's order: $(grep '^notice' "$WORK/old_override.log" | cut -c1-160)"
  else
    failed "--override-data-check did not continue the old checkpoint"
  fi
fi

# --eval-fixed-set (the time-to-target race's curves): every evaluation reads the same
# batches. With --lr 0 the weights never move, so its evaluations are all equal, while
# Megatron's stream (the default) reads on and its evaluations differ.
for mode in stream fixed; do
  extra=(); [[ $mode == fixed ]] && extra=(--eval-fixed-set)
  train_run "eval_$mode" 1 --train-iters 6 --eval-interval 2 --lr 0 --min-lr 0 "${extra[@]}" || continue
  grep -o 'validation loss at iter [0-9]*: [0-9.]*' "$WORK/eval_$mode.log" | awk '{ print $NF }' > "$WORK/eval_$mode.txt"
done
if [[ -s $WORK/eval_fixed.txt && -s $WORK/eval_stream.txt ]]; then
  if [[ $(wc -l < "$WORK/eval_fixed.txt") == 3 && $(sort -u "$WORK/eval_fixed.txt" | wc -l) == 1 &&
        $(sort -u "$WORK/eval_stream.txt" | wc -l) -gt 1 ]]; then
    pass "--eval-fixed-set: 3 evaluations at lr 0 all $(head -1 "$WORK/eval_fixed.txt"); the stream's: $(tr '\n' ' ' < "$WORK/eval_stream.txt")"
  else
    failed "--eval-fixed-set: fixed $(tr '\n' ' ' < "$WORK/eval_fixed.txt") / stream $(tr '\n' ' ' < "$WORK/eval_stream.txt")"
  fi
fi
finish
