#!/usr/bin/env bash
# labels: compression checkpoint
# Compressor state (LEP residuals and warm-start Q of CB, DP PowerSGD's warm-start Q and
# error feedback) is part of the checkpoint, so a resumed compressed run is the run that
# would have happened. P2 D2 (4 ranks), every technique on at lossy ranks: CB rank 4 + LEP
# + EC, FE, DP PowerSGD rank 4 + error feedback with SC K = 1, dropout 0.1.
#   1. 2N iterations straight vs N, stop, --load, N more: the same loss (and validation
#      loss) sequence, compared as exact repr strings, and bit-identical final checkpoints:
#      every file of the final iteration directory, i.e. the model shards AND each rank's
#      compress_dp_*.bin. Then the same for every other method (int8, fp8-e4m3, fp8-e5m2,
#      topk, sign, and the block methods mxfp4, nvfp4, int4, int3 with stochastic rounding
#      on CB and DP) on CB (+ LEP + EC) and DP (+ error feedback, SC), with activation
#      compression on the forward link; and the 2- and 3-bit codes and the adaptive codec
#      behind Hadamard rotations (issue 50) on every link, and DP topk2 with error feedback.
#   2. A checkpoint saved without compression loads into the compressed run, and a
#      compressed checkpoint into an uncompressed run: each prints a "notice:" line about the
#      compressor state and trains its remaining iterations to finite losses. Also with CB +
#      LEP alone, whose state only stage 1 holds (the logging rank 0 holds none). And a
#      compressed checkpoint into a run at other CB / DP ranks: a notice and training, or an
#      error that names the rank.
source "$(dirname "$0")/fixture/lib.sh"
N=3
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 4 --hidden-size 64
       --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2
       --global-batch-size 8 --train-iters $((2 * N)) --eval-iters 1 --eval-interval 2 --log-interval 1
       --hidden-dropout 0.1 --attention-dropout 0.1 --seed 77 --pipeline-model-parallel-size 2)
COMP=(--inter-grad-comp --inter-grad-comp-rank 4 --use-error-feedback --inter-grad-comp-epilogue-only
      --emb-comm-opt --grad-comp --grad-comp-rank 4 --selective-grad-comp-way 1)
ITER_N=iter_$(printf %07d $N)
ITER_2N=iter_$(printf %07d $((2 * N)))

# train NAME [flags...]: 4 ranks, log in WORK/NAME.log, metrics in WORK/NAME.jsonl.
train() {
  local name=$1
  shift
  if ! timeout 120 mpirun -np 4 --oversubscribe "$BIN" train "${MODEL[@]}" "$@" --metrics "$WORK/$name.jsonl" \
      > "$WORK/$name.log" 2>&1; then
    tail -n 20 "$WORK/$name.log"
    failed "$name: training run failed"
    return 1
  fi
}

# interrupted FROM TO: a run directory TO holding only FROM's iteration-N checkpoint.
interrupted() {
  mkdir -p "$WORK/$2"
  cp -r "$WORK/$1/$ITER_N" "$WORK/$2/"
  echo $N > "$WORK/$2/latest_checkpointed_iteration.txt"
}

loss_lines() { "$PY" -c "
import json,sys
for l in open(sys.argv[1]):
    j=json.loads(l)
    if j['iter']>$N: print(j['iter'], repr(j['loss']), repr(j.get('val_loss')))" "$1"; }

# resume_check NAME FLAGS...: 2N iterations straight vs N, stop, --load, N more, both saving
# every N: identical loss sequences and bit-identical final checkpoints (compressor state
# included: one compress_dp_*.bin per rank that keeps state, NSTATE of them).
resume_check() {
  local name=$1 nstate=$2
  shift 2
  local straight=${name}_straight resumed=${name}_resumed differ=() files other ncomp nmodel f
if train $straight "$@" --save "$WORK/$straight" --save-interval $N; then
  interrupted $straight $resumed
  if train $resumed "$@" --load "$WORK/$resumed" --save "$WORK/$resumed" --save-interval $N; then
    if diff <(loss_lines "$WORK/$straight.jsonl") <(loss_lines "$WORK/$resumed.jsonl"); then
      pass "$name: losses and validation losses of iterations $((N + 1))..$((2 * N)) identical (repr)"
    else
      failed "$name: losses differ after resume"
    fi
    [[ $(loss_lines "$WORK/$resumed.jsonl" | wc -l) -eq $N ]] && pass "$name: resumed run trained $N iterations" \
      || failed "$name: resumed run did not train $N iterations"
    grep -q "notice:" "$WORK/$resumed.log" && failed "$name: resume of a matching checkpoint printed a notice: \
$(grep "notice:" "$WORK/$resumed.log")" || pass "$name: resume of a matching checkpoint printed no notice"
    # Every file of the final checkpoint, both ways (a file only one side has fails too).
    files=$(cd "$WORK/$straight/$ITER_2N" && find . -type f | sort)
    other=$(cd "$WORK/$resumed/$ITER_2N" && find . -type f | sort)
    ncomp=$(grep -c 'compress_dp_[0-9]*\.bin$' <<< "$files")
    nmodel=$(grep -c 'model_optim_rng\.bin$' <<< "$files")
    if [[ $ncomp -eq $nstate && $nmodel -eq 2 ]]; then
      pass "$name: final checkpoint holds 2 model shards and $nstate compressor states"
    else
      failed "$name: final checkpoint holds $nmodel model shards and $ncomp compressor states (expected 2 and $nstate): $files"
    fi
    if [[ "$files" != "$other" ]]; then
      failed "$name: final checkpoints hold different files: $(diff <(echo "$files") <(echo "$other") | tr '\n' ' ')"
    fi
    differ=()
    for f in $files; do
      cmp -s "$WORK/$straight/$ITER_2N/$f" "$WORK/$resumed/$ITER_2N/$f" || differ+=("$f")
    done
    if [[ ${#differ[@]} -eq 0 ]]; then
      pass "$name: final checkpoints bit-identical: $(wc -w <<< "$files") files incl. model shards and compress_dp_*.bin"
    else
      failed "$name: final checkpoint files differ: ${differ[*]}"
      # Name the tensors that differ (tensor files: JSON header, then data).
      for f in "${differ[@]}"; do
        "$PY" - "$WORK/$straight/$ITER_2N/$f" "$WORK/$resumed/$ITER_2N/$f" <<'EOF'
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    if b[:8] != b"OCCTENS1":
        return None, b
    n = struct.unpack("<Q", b[8:16])[0]
    h = json.loads(b[16:16 + n])
    start = (16 + n + 63) // 64 * 64
    return h, {t["name"]: b[start + t["offset"]:start + t["offset"] + t["bytes"]] for t in h["tensors"]}
(ha, ta), (hb, tb) = load(sys.argv[1]), load(sys.argv[2])
if ha is None:
    print(f"     {sys.argv[1].split('/')[-1]}: not a tensor file")
    sys.exit()
names = [k for k in ta if ta[k] != tb.get(k)]
meta = [k for k in set(ha["meta"]) | set(hb["meta"]) if ha["meta"].get(k) != hb["meta"].get(k)]
print(f"     {'/'.join(sys.argv[1].split('/')[-2:])}: tensors differing {names[:8]}, metadata differing {meta}")
EOF
      done
    fi
  fi
fi

}

# ---- 1. straight vs resumed, everything compressed ------------------------------------
# P2 D2: every rank keeps compressor state (stage 0: DP PowerSGD; stage 1: CB's LEP).
resume_check all 4 "${COMP[@]}"
# Every other method on every link class, with LEP/EC, SC and error feedback where they
# apply: the residuals (error feedback) are the state; activations are stateless.
for method in int8 fp8-e4m3 fp8-e5m2 topk sign; do
  act=int8
  [[ $method == fp8-* ]] && act=fp8-e4m3
  topk=()
  [[ $method == topk ]] && act=topk topk=(--grad-comp-topk-fraction 0.05)
  resume_check "$method" 4 --inter-grad-comp --inter-grad-comp-method $method --use-error-feedback \
    --inter-grad-comp-epilogue-only --activation-comp-method $act --grad-comp --grad-comp-method $method \
    "${topk[@]}" --selective-grad-comp-way 1 --emb-comm-opt
done
# The block methods: one run per pair (CB + LEP / DP + EF with stochastic rounding, the
# other on the forward link); their state is the residuals, their rounding bits are keyed
# by the link and the message's inputs (nothing else to save).
resume_check mxfp4_nvfp4 4 --inter-grad-comp --inter-grad-comp-method mxfp4 --inter-grad-comp-rounding stochastic \
  --use-error-feedback --activation-comp-method nvfp4 --grad-comp --grad-comp-method nvfp4 \
  --grad-comp-rounding stochastic --emb-comm-opt
resume_check int3_int4 4 --inter-grad-comp --inter-grad-comp-method int3 --use-error-feedback \
  --inter-grad-comp-epilogue-only --activation-comp-method int4 --activation-comp-rounding stochastic \
  --grad-comp --grad-comp-method int3 --grad-comp-rounding stochastic --selective-grad-comp-way 1
# Issue 50: the 2- and 3-bit codes behind Hadamard rotations on every link (the rotations'
# signs are keyed by the link and the iteration: nothing to save; the residuals are the state):
# CB lloydmax3 + LEP with a decay (item 4), forward lloydmax2, DP int2 + EF with stochastic
# rounding, and the same the other way round (plain LEP).
resume_check rotated_lm3_lm2_int2 4 --inter-grad-comp --inter-grad-comp-method lloydmax3 \
  --inter-grad-comp-rotation hadamard:32 --use-error-feedback --inter-grad-comp-lep-decay 0.5 \
  --activation-comp-method lloydmax2 \
  --activation-comp-rotation hadamard --grad-comp --grad-comp-method int2 --grad-comp-rotation hadamard:64 \
  --grad-comp-rounding stochastic --emb-comm-opt
resume_check rotated_int2_lm 4 --inter-grad-comp --inter-grad-comp-method int2 --inter-grad-comp-rotation hadamard \
  --inter-grad-comp-rounding stochastic --use-error-feedback --inter-grad-comp-epilogue-only \
  --activation-comp-method lloydmax3 --activation-comp-rotation hadamard:16 --grad-comp --grad-comp-method lloydmax2 \
  --grad-comp-rotation hadamard --selective-grad-comp-way 1
# Issue 50: DP topk2 + error feedback on both stages: the 4 ranks' residuals are the state.
resume_check dp_topk2 4 --grad-comp --grad-comp-method topk2 --grad-comp-topk-density 0.05 --grad-comp-error-feedback
# Issue 50 item 3: the adaptive codec (its allocation is the message's alone: nothing to
# save) on every link behind rotations, stochastic on CB + LEP and DP + EF, rANS on both
# pipeline links.
resume_check adaptive 4 --inter-grad-comp --inter-grad-comp-method adaptive --inter-grad-comp-rotation hadamard:32 \
  --inter-grad-comp-rounding stochastic --inter-grad-comp-adaptive-high-fraction 0.25 --use-error-feedback \
  --inter-grad-comp-lossless rans --activation-comp-method adaptive --activation-comp-rotation hadamard \
  --activation-comp-lossless rans --grad-comp --grad-comp-method adaptive --grad-comp-rounding stochastic \
  --grad-comp-adaptive-high-fraction 0.5 --emb-comm-opt
# --grad-comp-error-feedback is DP error feedback alone: CB (int8, no LEP) keeps no state,
# so only the two stage-0 ranks (DP int8 + error feedback, SC K = 1) save compressor state.
resume_check dp_ef_only 2 --inter-grad-comp --inter-grad-comp-method int8 --grad-comp --grad-comp-method int8 \
  --grad-comp-error-feedback --selective-grad-comp-way 1

# ---- 2. across compression settings -----------------------------------------------------
# An uncompressed checkpoint into the compressed run.
if train plain --save "$WORK/plain" --save-interval $N; then
  interrupted plain plain_to_comp
  if train plain_to_comp "${COMP[@]}" --load "$WORK/plain_to_comp"; then
    grep -q "^notice:.*compressor state" "$WORK/plain_to_comp.log" \
      && pass "uncompressed checkpoint into a compressed run: $(grep "notice:" "$WORK/plain_to_comp.log" | head -1)" \
      || failed "uncompressed checkpoint into a compressed run printed no notice"
  fi
fi
# The compressed checkpoint (of the straight run of all techniques) into an uncompressed run.
if [[ -d "$WORK/all_straight/$ITER_N" ]]; then
  interrupted all_straight comp_to_plain
  if train comp_to_plain --load "$WORK/comp_to_plain"; then
    grep -q "^notice:.*compressor state" "$WORK/comp_to_plain.log" \
      && pass "compressed checkpoint into an uncompressed run: $(grep "notice:" "$WORK/comp_to_plain.log" | head -1)" \
      || failed "compressed checkpoint into an uncompressed run printed no notice"
  fi
fi
# The compressed checkpoint into the compressed run at other ranks (CB 8, DP 8): the saved
# Q's have other shapes. Either it starts the compressor state fresh with a notice and
# trains, or it stops with an error that names the rank (not a misleading one).
if [[ -d "$WORK/all_straight/$ITER_N" ]]; then
  interrupted all_straight rank_change
  RANK8=(--inter-grad-comp --inter-grad-comp-rank 8 --use-error-feedback --inter-grad-comp-epilogue-only
         --emb-comm-opt --grad-comp --grad-comp-rank 8 --selective-grad-comp-way 1)
  if timeout 120 mpirun -np 4 --oversubscribe "$BIN" train "${MODEL[@]}" "${RANK8[@]}" --load "$WORK/rank_change" \
      --metrics "$WORK/rank_change.jsonl" > "$WORK/rank_change.log" 2>&1; then
    grep -q "^notice:.*compressor state" "$WORK/rank_change.log" \
      && pass "checkpoint of other compression ranks: $(grep "notice:" "$WORK/rank_change.log" | head -1)" \
      || failed "checkpoint of other compression ranks loaded without a notice"
  elif grep -Eiq "^error:.*(grad-comp-rank|compression rank|powersgd rank)" "$WORK/rank_change.log"; then
    pass "checkpoint of other compression ranks: $(grep "^error:" "$WORK/rank_change.log" | head -1)"
  else
    failed "checkpoint of other compression ranks (CB/DP rank 4 -> 8) stops with a misleading error: \
$(grep "error:" "$WORK/rank_change.log" | head -1)"
  fi
fi
# The same with CB + LEP alone (the paper's main technique): its state lives on stage 1
# only, so a notice decided by the logging rank (stage 0) alone would be missing.
CB_ONLY=(--inter-grad-comp --inter-grad-comp-rank 4 --use-error-feedback)
if [[ -d "$WORK/plain/$ITER_N" ]]; then
  interrupted plain plain_to_cb
  if train plain_to_cb "${CB_ONLY[@]}" --load "$WORK/plain_to_cb"; then
    grep -q "^notice:.*compressor state" "$WORK/plain_to_cb.log" \
      && pass "uncompressed checkpoint into a CB+LEP run: $(grep "notice:" "$WORK/plain_to_cb.log" | head -1)" \
      || failed "uncompressed checkpoint into a CB+LEP run printed no notice (stage 1's LEP state starts fresh silently)"
  fi
fi
if train cb_only "${CB_ONLY[@]}" --save "$WORK/cb_only" --save-interval $N; then
  interrupted cb_only cb_to_plain
  if train cb_to_plain --load "$WORK/cb_to_plain"; then
    grep -q "^notice:.*compressor state" "$WORK/cb_to_plain.log" \
      && pass "CB+LEP checkpoint into an uncompressed run: $(grep "notice:" "$WORK/cb_to_plain.log" | head -1)" \
      || failed "CB+LEP checkpoint into an uncompressed run printed no notice (stage 1's LEP state ignored silently)"
  fi
fi
# A checkpoint of one DP method into a run of another (int8 + EF -> PowerSGD + EF): the
# residuals are named by method, so the other method's are not taken for its own.
if [[ -d "$WORK/dp_ef_only_straight/$ITER_N" ]]; then
  interrupted dp_ef_only_straight method_change
  if train method_change --grad-comp --grad-comp-error-feedback --selective-grad-comp-way 1 --load "$WORK/method_change"; then
    grep -q "^notice: part of the checkpoint's compressor state does not fit" "$WORK/method_change.log" \
      && pass "checkpoint of another DP method: $(grep "notice:" "$WORK/method_change.log" | head -1)" \
      || failed "checkpoint of DP int8 loaded into DP PowerSGD without a notice: $(grep notice "$WORK/method_change.log")"
  fi
fi
for name in plain_to_comp comp_to_plain plain_to_cb cb_to_plain method_change; do
  [[ -f "$WORK/$name.jsonl" ]] || continue
  if "$PY" - "$WORK/$name.jsonl" $N <<'EOF'
import json, math, sys
rows, n = [json.loads(l) for l in open(sys.argv[1])], int(sys.argv[2])
ok = [r["iter"] for r in rows] == list(range(n + 1, 2 * n + 1)) and all(math.isfinite(r["loss"]) for r in rows)
print("    ", [(r["iter"], round(r["loss"], 4)) for r in rows])
sys.exit(0 if ok else 1)
EOF
  then
    pass "$name: trained iterations $((N + 1))..$((2 * N)) to finite losses"
  else
    failed "$name: did not train iterations $((N + 1))..$((2 * N))"
  fi
done
finish
