#!/usr/bin/env bash
# labels: parallel checkpoint
# DiLoCo and Streaming DiLoCo (--diloco-*, train/diloco.h), on a 4-layer model of hidden 32:
#  (a) D1 with outer lr 1 and momentum 0 trains bit for bit as plain training (losses, and
#      the weights and AdamW moments of the final checkpoint), with 1 and 2 fragments;
#  (b) the outer step against NumPy (tests/cli/fixture/diloco_check.py) on the dumped
#      per-replica parameters: D2 at H 1, lr 1, momentum 0 (the replicas' mean within
#      1e-6, and both restart from it), and D2 with Nesterov lr 0.7 / 0.9, 2 fragments,
#      int8 outer gradients and an overlapped landing (tau 1, mixing 0.5);
#  (c) under DiLoCo D2 a T2 P2 replica trains as a one-process replica (losses within 1e-5);
#  (d) resuming in the middle of a round equals the straight run bit for bit: losses, and
#      every file of the final checkpoint (every rank's DiLoCo state: local parameters,
#      moments, outer parameters, momentum), plain, streaming (a fragment's sync in flight at
#      the save), and at P2 D2 with CB + LEP + EC and int8 activations inside the replicas;
#  (e) bytes: every rank's "dp" bytes per iteration are exactly the syncs that land in it
#      (P2 D2: fp32 all-reduces, 2 fragments, int8 and fp8 wires), so N = k H iterations
#      move k parameter all-reduces; the tied embedding's "emb" sync is as without DiLoCo;
#  (f) one-line errors on every rank for what DiLoCo cannot do.
source "$(dirname "$0")/fixture/lib.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1
source "$(dirname "$0")/fixture/diloco_model.sh"
check() {  # NAME -- COMMAND...: passes when COMMAND succeeds, printing its last line
  local name=$1 out
  shift 2
  if out=$("$@" 2>&1); then pass "$name: $(tail -1 <<< "$out")"; else failed "$name: $out"; fi
}
shard() { echo "$WORK/$1/iter_$(printf %07d "$2")/mp_rank_00_000"; }

# (a) D1: lr 1, momentum 0 is plain training, bit for bit.
LR1=(--diloco-outer-lr 1 --diloco-outer-momentum 0)
train_run plain 1 --train-iters 6 --save "$WORK/plain" &&
  train_run d1 1 --train-iters 6 --diloco-inner-steps 2 "${LR1[@]}" --save "$WORK/d1" &&
  train_run d1_f2 1 --train-iters 6 --diloco-inner-steps 2 --diloco-fragments 2 "${LR1[@]}" --save "$WORK/d1_f2" && {
  compare_losses plain d1 0
  compare_losses plain d1_f2 0
  for run in d1 d1_f2; do
    for part in param/ adam_m/ adam_v/; do
      check "$run: final $part" -- "$PY" "$CHECK" same-tensors "$(shard plain 6)/model_optim_rng.bin" \
        "$(shard $run 6)/model_optim_rng.bin" "$part"
    done
  done
}

# (b) The outer step against NumPy, from every replica's dumped parameters.
train_run h1 2 --train-iters 3 --diloco-inner-steps 1 "${LR1[@]}" --debug-diloco-dump "$WORK/dump_h1" &&
  check "D2 H1 lr 1 momentum 0: the replicas' mean" -- "$PY" "$CHECK" outer-step "$WORK/dump_h1" --lr 1 --momentum 0
STREAM=(--diloco-inner-steps 2 --diloco-fragments 2 --diloco-overlap-steps 1 --diloco-mixing 0.5
        --diloco-outer-comp-method int8)
train_run nesterov 2 --train-iters 7 "${STREAM[@]}" --debug-diloco-dump "$WORK/dump_nesterov" &&
  check "D2 Nesterov, 2 fragments, int8, overlap 1" -- "$PY" "$CHECK" outer-step "$WORK/dump_nesterov" \
    --lr 0.7 --momentum 0.9 --comp int8 --mixing 0.5 --overlap 1
# MXFP4 outer gradients against NumPy's MXFP4 written from the OCP MX spec.
train_run mxfp4 2 --train-iters 4 --diloco-inner-steps 2 --diloco-outer-comp-method mxfp4 \
  --debug-diloco-dump "$WORK/dump_mxfp4" &&
  check "D2 Nesterov, mxfp4 outer gradients" -- "$PY" "$CHECK" outer-step "$WORK/dump_mxfp4" \
    --lr 0.7 --momentum 0.9 --comp mxfp4
# Issue 50: topk2 outer gradients (top 5 % of each chunk at 2 bits) against NumPy's, from the definition.
train_run topk2 2 --train-iters 4 --diloco-inner-steps 2 --diloco-outer-comp-method topk2 \
  --diloco-outer-comp-topk-density 0.05 --debug-diloco-dump "$WORK/dump_topk2" &&
  check "D2 Nesterov, topk2 outer gradients" -- "$PY" "$CHECK" outer-step "$WORK/dump_topk2" \
    --lr 0.7 --momentum 0.9 --comp topk2 --density 0.05

# (c) A T2 P2 replica equals a one-process replica (D2 either way).
train_run rep_1 2 --train-iters 4 --diloco-inner-steps 2 &&
  train_run rep_t2p2 8 --train-iters 4 --diloco-inner-steps 2 --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 && compare_losses rep_1 rep_t2p2 1e-5

# (d) Resume in the middle of a round (H 4, saved after step 3; streaming: after step 2,
# when fragment 0's sync is in flight), bit for bit.
resume() {  # NAME RANKS STOP FLAGS...
  local name=$1 np=$2 stop=$3 final
  shift 3
  train_run "${name}_straight" "$np" --train-iters 6 "$@" --save "$WORK/${name}_straight" --save-interval "$stop" ||
    return
  mkdir -p "$WORK/${name}_resumed"
  cp -r "$WORK/${name}_straight/iter_$(printf %07d "$stop")" "$WORK/${name}_resumed/"
  echo "$stop" > "$WORK/${name}_resumed/latest_checkpointed_iteration.txt"
  train_run "${name}_resumed" "$np" --train-iters 6 "$@" --load "$WORK/${name}_resumed" --save "$WORK/${name}_resumed" ||
    return
  compare_losses "${name}_straight" "${name}_resumed" 0 $((stop + 1))
  # Every file of the final checkpoint: weights, moments, every rank's DiLoCo and compressor state.
  final=iter_0000006
  if diff -r -q "$WORK/${name}_straight/$final" "$WORK/${name}_resumed/$final" > "$WORK/diff" &&
      [[ $(find "$WORK/${name}_straight/$final" -name 'diloco_dp_*.bin' | wc -l) -eq $np ]]; then
    pass "$name: every file of the final checkpoint bit-identical ($(find "$WORK/${name}_straight/$final" -type f | wc -l) files, a DiLoCo state per rank)"
  else
    failed "$name: final checkpoints differ: $(head -3 "$WORK/diff")"
  fi
}
resume plain_resume 2 3 --diloco-inner-steps 4
resume stream_resume 2 2 --diloco-inner-steps 4 --diloco-fragments 2 --diloco-overlap-steps 1 \
  --diloco-outer-comp-method int8
# Pipeline compression inside the replicas (P2 D2): CB + LEP + EC and int8 activations, with their state.
resume pipeline_resume 4 2 --diloco-inner-steps 4 --diloco-fragments 2 --diloco-overlap-steps 1 \
  --pipeline-model-parallel-size 2 --inter-grad-comp --inter-grad-comp-rank 4 --use-error-feedback \
  --inter-grad-comp-epilogue-only --activation-comp-method int8

# (e) Bytes at P2 D2: N = 4 iterations of H 2 (k = 2); fragments; int8 / fp8 wires.
bytes() {  # NAME -- FLAGS... -- CHECK ARGS...
  local name=$1 flags=() args=()
  shift 2
  while [[ $1 != -- ]]; do flags+=("$1"); shift; done
  shift
  train_run "$name" 4 --train-iters 4 --pipeline-model-parallel-size 2 --eval-iters 0 "${flags[@]}" &&
    check "$name: dp bytes" -- "$PY" "$CHECK" bytes "$WORK/$name.jsonl" --layers $L --hidden $C --vocab $V \
      --maxpos $S --pp 2 --dp 2 --iters 4 "$@"
}
bytes bytes_h2 -- --diloco-inner-steps 2 -- --inner-steps 2
bytes bytes_f2 -- --diloco-inner-steps 2 --diloco-fragments 2 -- --inner-steps 2 --fragments 2
bytes bytes_int8 -- --diloco-inner-steps 2 --diloco-fragments 2 --diloco-overlap-steps 1 \
  --diloco-outer-comp-method int8 -- --inner-steps 2 --fragments 2 --overlap 1 --comp int8
bytes bytes_fp8 -- --diloco-inner-steps 2 --diloco-outer-comp-method fp8-e4m3 -- --inner-steps 2 --comp fp8-e4m3
bytes bytes_mxfp4 -- --diloco-inner-steps 2 --diloco-outer-comp-method mxfp4 -- --inner-steps 2 --comp mxfp4
# Issue 50: the 2-bit Lloyd-Max code behind a Hadamard rotation (the rotation adds no byte).
bytes bytes_lloydmax2_rotated -- --diloco-inner-steps 2 --diloco-outer-comp-method lloydmax2 \
  --diloco-outer-comp-rotation hadamard:64 -- --inner-steps 2 --comp lloydmax2
bytes bytes_topk2 -- --diloco-inner-steps 2 --diloco-outer-comp-method topk2 -- --inner-steps 2 --comp topk2
if [[ -f $WORK/bytes_h2.jsonl ]]; then
  # The tied embedding's sync inside each replica, every iteration, as without DiLoCo.
  train_run bytes_plain 4 --train-iters 4 --pipeline-model-parallel-size 2 --eval-iters 0 &&
    check "emb bytes as without DiLoCo" -- "$PY" -c "
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
e = lambda rows: [[r['bytes'].get('emb', 0) for r in row['ranks']] for row in rows]
assert e(a) == e(b) and sum(map(sum, e(a))) > 0, (e(a), e(b))
print('emb bytes per rank and iteration equal the plain run\'s')" "$WORK/bytes_h2.jsonl" "$WORK/bytes_plain.jsonl"
fi

# (f) One-line errors, every rank exiting non-zero.
train_one_error() {  # NAME PATTERN RANKS -- FLAGS...: a short train run refused
  local name=$1 pattern=$2 np=$3
  shift 4
  if timeout 120 mpirun -np "$np" "$BIN" train "${MODEL[@]}" --train-iters 2 "$@" > "$WORK/out" 2> "$WORK/err"; then
    failed "$name: exit 0"
  elif [[ $(grep -c "^error:" "$WORK/err") -eq 1 ]] && grep -qE "^error: .*$pattern" "$WORK/err"; then
    pass "$name: $(grep '^error:' "$WORK/err")"
  else
    failed "$name: $(cat "$WORK/err")"
  fi
}
train_one_error "with --grad-comp" "--grad-comp compresses the per-step" 2 -- --diloco-inner-steps 2 --grad-comp
train_one_error "with FE" "--emb-comm-opt \(FE\)" 4 -- --diloco-inner-steps 2 --emb-comm-opt --pipeline-model-parallel-size 2
train_one_error "with the distributed optimizer" "--use-distributed-optimizer shards" 2 -- --diloco-inner-steps 2 \
  --use-distributed-optimizer
train_one_error "mixing without overlap" "--diloco-mixing merges" 2 -- --diloco-inner-steps 2 --diloco-mixing 0.3
train_one_error "a flag without DiLoCo" "--diloco-fragments has no effect" 2 -- --diloco-fragments 2
train_one_error "more fragments than layers" "--diloco-fragments 5" 2 -- --diloco-inner-steps 8 --diloco-fragments 5
train_one_error "outer PowerSGD" "is not offered" 2 -- --diloco-inner-steps 2 --diloco-outer-comp-method powersgd
if [[ -d $WORK/plain_resume_straight ]]; then
  train_one_error "resume with another H" "resume with the saved run's --diloco-inner-steps" 2 -- --train-iters 6 \
    --diloco-inner-steps 2 --load "$WORK/plain_resume_straight"
  train_one_error "resume at another DP size" "holds the DiLoCo state of 2 replicas" 1 -- --train-iters 6 \
    --diloco-inner-steps 4 --load "$WORK/plain_resume_straight"
fi
finish
