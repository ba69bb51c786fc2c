#!/usr/bin/env bash
# labels: precision parallel
# The wire in the step's format (issue 40; core/wire_format.h). Each --bf16 run
# against the same run with --debug-fp32-wire (every value in fp32: the wire
# before), checked by fixture/wire_check.py:
#   P2, T2, T2 SP, T2P2 (also host-staged), P2D2 with the distributed optimizer
#   and the overlapped parameter gather: losses and grad norms bit-identical (the
#   values that travel are the step's 16-bit ones; TP = 2 sums round once either
#   way); pipeline bytes exactly half; TP bytes: 2 x 16-bit - fp32 = the fp32
#   statistics TP still carries (cross-entropy, SP's gradient sums); DP: the
#   reduce-scatter's fp32 gradients unchanged and the parameter all-gather half,
#   and with --grad-reduce-in-bf16 both half (and the embedding sync half);
#   P2D2's checkpoint bit-identical (DP rank 0 writes every owner's fp32 master
#   weights), and resuming it continues exactly.
#   fp16 P2: bit-identical, pipeline bytes half.
#   T4: the 16-bit TP reduction (rounded at each of 3 ring steps) within 5e-3
#   relative (a little over bf16's unit roundoff, 2^-8) of --tp-reduce-in-fp32's
#   fp32 sums in loss and grad norm, not bit-identical; --tp-reduce-in-fp32 is
#   bit-identical to the fp32 wire; bytes as above. --grad-reduce-in-bf16 at P2D2
#   within the same 5e-3.
#   plan --calibrate on the T2P2 and P2D2 runs: planned pipeline, TP and DP bytes
#   equal the measured ones (bytes per value taken from the run's flags).
#   The traffic summary and metrics name each class's wire.
source "$(dirname "$0")/fixture/lib.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1
CHECK=("$PY" "$SRC/tests/cli/fixture/wire_check.py")
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 2 --hidden-size 32
       --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2
       --eval-iters 0 --log-interval 1 --train-iters 3 --seed 7)
L2=(L=2 C=32 V=512 maxpos=32 N=64 bucket=262144)

check() {  # check WHAT MODE ARGS...: one wire_check.py verdict
  local what=$1 out
  shift
  if out=$("${CHECK[@]}" "$@" 2>&1); then pass "$what: $out"; else failed "$what: $out"; fi
}
pair() {  # pair NAME RANKS FLAGS...: NAME (16-bit wire) and NAME_fp32 (--debug-fp32-wire)
  local name=$1 np=$2
  shift 2
  train_run "$name" "$np" --bf16 "$@" && train_run "${name}_fp32" "$np" --bf16 "$@" --debug-fp32-wire
}

pair p2 2 --global-batch-size 4 --pipeline-model-parallel-size 2 && {
  check "P2 losses" same "$WORK/p2.jsonl" "$WORK/p2_fp32.jsonl"
  check "P2 bytes" bytes "$WORK/p2.jsonl" "$WORK/p2_fp32.jsonl" half=pp_fwd,pp_bwd same=tp,dp,emb,other
}
pair t2 2 --global-batch-size 4 --tensor-model-parallel-size 2 && {
  check "T2 losses" same "$WORK/t2.jsonl" "$WORK/t2_fp32.jsonl"
  check "T2 bytes" bytes "$WORK/t2.jsonl" "$WORK/t2_fp32.jsonl" same=dp,emb,other tp=1 T=2 P=1 M=2 "${L2[@]}"
}
pair t2sp 2 --global-batch-size 4 --tensor-model-parallel-size 2 --sequence-parallel && {
  check "T2 SP losses" same "$WORK/t2sp.jsonl" "$WORK/t2sp_fp32.jsonl"
  check "T2 SP bytes" bytes "$WORK/t2sp.jsonl" "$WORK/t2sp_fp32.jsonl" same=dp,emb,other tp=1 sp=1 T=2 P=1 M=2 \
    "${L2[@]}"
}
T2P2=(--global-batch-size 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2)
pair t2p2 4 "${T2P2[@]}" && {
  check "T2P2 losses" same "$WORK/t2p2.jsonl" "$WORK/t2p2_fp32.jsonl"
  check "T2P2 bytes" bytes "$WORK/t2p2.jsonl" "$WORK/t2p2_fp32.jsonl" half=pp_fwd,pp_bwd same=emb,other tp=1 \
    T=2 P=2 M=2 "${L2[@]}"
}
# Host-staged (the GPU-on-MPI path: packed before the host copy): the same losses and bytes.
train_run t2p2_staged 4 --bf16 "${T2P2[@]}" --debug-host-staging && {
  check "T2P2 host-staged losses" same "$WORK/t2p2_staged.jsonl" "$WORK/t2p2.jsonl"
  check "T2P2 host-staged bytes" bytes "$WORK/t2p2_staged.jsonl" "$WORK/t2p2.jsonl" same=pp_fwd,pp_bwd,tp,dp,emb,other
}
# The distributed optimizer, overlapped parameter gather, checkpoints and resume.
P2D2=(--bf16 --global-batch-size 8 --pipeline-model-parallel-size 2 --use-distributed-optimizer --overlap-param-gather)
train_run p2d2 4 "${P2D2[@]}" --save "$WORK/p2d2.ckpt" --save-interval 1 &&
  train_run p2d2_fp32 4 "${P2D2[@]}" --debug-fp32-wire --save "$WORK/p2d2_fp32.ckpt" --save-interval 1 &&
  train_run p2d2_bf16grads 4 "${P2D2[@]}" --grad-reduce-in-bf16 && {
  check "P2D2 distributed optimizer losses" same "$WORK/p2d2.jsonl" "$WORK/p2d2_fp32.jsonl"
  check "P2D2 bytes (fp32 gradients, bf16 parameters)" bytes "$WORK/p2d2.jsonl" "$WORK/p2d2_fp32.jsonl" \
    half=pp_fwd,pp_bwd same=emb,other dp=4,4 T=1 P=2 D=2 M=2 "${L2[@]}"
  check "P2D2 --grad-reduce-in-bf16 bytes (all half)" bytes "$WORK/p2d2_bf16grads.jsonl" "$WORK/p2d2_fp32.jsonl" \
    half=pp_fwd,pp_bwd,emb same=other dp=2,4 T=1 P=2 D=2 M=2 "${L2[@]}"
  check "P2D2 --grad-reduce-in-bf16 losses within 5e-3" close "$WORK/p2d2_bf16grads.jsonl" "$WORK/p2d2.jsonl" 5e-3
}
# Checkpoints: bit-identical to the fp32 wire's; resuming iteration 2 ends where the straight run ends.
last=iter_0000003
same_ckpts() {  # same_ckpts DIR_A DIR_B: both final checkpoints exist, every shard the same bytes
  local s
  for s in mp_rank_00_000 mp_rank_00_001; do
    [[ -f $1/$last/$s/model_optim_rng.bin ]] && cmp -s "$1/$last/$s/model_optim_rng.bin" "$2/$last/$s/model_optim_rng.bin" ||
      return 1
  done
}
same_ckpts "$WORK/p2d2.ckpt" "$WORK/p2d2_fp32.ckpt" &&
  pass "P2D2: final checkpoint bit-identical to the fp32 wire's (DP rank 0 gathers every owner's fp32 master weights)" ||
  failed "P2D2: final checkpoint differs from the fp32 wire's"
mkdir -p "$WORK/resumed.ckpt" && cp -r "$WORK/p2d2.ckpt/iter_0000002" "$WORK/resumed.ckpt/" 2> /dev/null &&
  echo 2 > "$WORK/resumed.ckpt/latest_checkpointed_iteration.txt" &&
  train_run p2d2_resumed 4 "${P2D2[@]}" --load "$WORK/resumed.ckpt" --save "$WORK/resumed.ckpt" --save-interval 1 &&
  if same_ckpts "$WORK/p2d2.ckpt" "$WORK/resumed.ckpt"; then
    pass "P2D2: resumed from iteration 2, the final checkpoint equals the straight run's"
  else
    failed "P2D2: the resumed run's final checkpoint differs"
  fi

# fp16 (its own 16-bit format; static loss scale): bit-identical, pipeline bytes half.
train_run p2_fp16 2 --fp16 --loss-scale 1024 --global-batch-size 4 --pipeline-model-parallel-size 2 &&
  train_run p2_fp16_fp32 2 --fp16 --loss-scale 1024 --global-batch-size 4 --pipeline-model-parallel-size 2 \
    --debug-fp32-wire && {
  check "fp16 P2 losses" same "$WORK/p2_fp16.jsonl" "$WORK/p2_fp16_fp32.jsonl"
  check "fp16 P2 bytes" bytes "$WORK/p2_fp16.jsonl" "$WORK/p2_fp16_fp32.jsonl" half=pp_fwd,pp_bwd same=tp,dp,emb,other
}

# T4: three rounding steps per sum. Against fp32 partial sums (--tp-reduce-in-fp32, the wire before).
train_run t4 4 --bf16 --global-batch-size 4 --tensor-model-parallel-size 4 &&
  train_run t4_fp32sums 4 --bf16 --global-batch-size 4 --tensor-model-parallel-size 4 --tp-reduce-in-fp32 &&
  train_run t4_fp32 4 --bf16 --global-batch-size 4 --tensor-model-parallel-size 4 --debug-fp32-wire && {
  check "T4 16-bit TP sums against fp32 partial sums" close "$WORK/t4.jsonl" "$WORK/t4_fp32sums.jsonl" 5e-3
  check "T4 --tp-reduce-in-fp32 is the fp32 wire's numerics" same "$WORK/t4_fp32sums.jsonl" "$WORK/t4_fp32.jsonl"
  check "T4 bytes" bytes "$WORK/t4.jsonl" "$WORK/t4_fp32sums.jsonl" same=dp,emb,other tp=1 T=4 P=1 M=2 "${L2[@]}"
}

# The planner, calibrated on the runs, plans their bytes (2 per activation value, from --bf16).
plan_check() {  # plan_check NAME T P M FLAGS...: plan --calibrate on NAME's metrics
  local name=$1 T=$2 P=$3 M=$4
  shift 4
  if "$BIN" plan "${MODEL[@]}" "$@" --calibrate "$WORK/$name.jsonl" --calibrate-skip 0 --json "$WORK/$name.plan.json" \
      > "$WORK/$name.plan.log" 2>&1; then
    check "plan --calibrate on $name" plan "$WORK/$name.plan.json" "$WORK/$name.jsonl" T="$T" P="$P" M="$M"
  else
    tail -n 3 "$WORK/$name.plan.log"
    failed "plan --calibrate on $name failed"
  fi
}
plan_check t2p2 2 2 2 --bf16 "${T2P2[@]}"
plan_check p2d2 1 2 2 "${P2D2[@]}"
plan_check p2d2_bf16grads 1 2 2 "${P2D2[@]}" --grad-reduce-in-bf16

# What the metrics and the end-of-run summary call each class's wire.
"$PY" - "$WORK/p2d2.jsonl" "$WORK/t4_fp32sums.jsonl" << 'PY' && pass "metrics name the wire per class" || failed "metrics' wire names"
import json, sys
a, b = (json.loads(open(p).readline())["wire"] for p in sys.argv[1:])
assert a == {"pp_fwd": "bf16", "pp_bwd": "bf16", "tp": "bf16", "dp": "fp32 gradients, bf16 parameters", "emb": "fp32",
             "other": "fp32"}, a
assert b["tp"] == "bf16, sums fp32", b
PY
grep -q "^traffic over 3 iterations (all ranks): dp [0-9.]* MB fp32 gradients, bf16 parameters, emb [0-9.]* MB fp32, .*pp_bwd [0-9.]* MB bf16, pp_fwd [0-9.]* MB bf16" \
  "$WORK/p2d2.log" && pass "the traffic summary names the wire: $(grep '^traffic over' "$WORK/p2d2.log")" ||
  failed "traffic summary: $(grep '^traffic over' "$WORK/p2d2.log")"

# Flags that would do nothing are refused.
for flag in --grad-reduce-in-bf16 --tp-reduce-in-fp32; do
  out=$("$BIN" train "${MODEL[@]}" --global-batch-size 4 $flag 2>&1); rc=$?
  if ((rc != 0)) && grep -q "^error: $flag .* add --bf16 (or --fp16), or drop it" <<< "$out"; then
    pass "$flag without --bf16/--fp16 refused: $out"
  else
    failed "$flag in an fp32 run: exit $rc, $out"
  fi
done
finish
