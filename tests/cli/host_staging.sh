#!/usr/bin/env bash
# labels: parallel
# The host-staged transfer path of multi-rank GPU jobs (core/host_staging.h,
# comm/host_staged_communicator.h), run on the CPU with the hidden
# --debug-host-staging: the model's TP collectives, the data-parallel buckets
# (downloaded, reduced and uploaded by the reducer thread), DP compression's
# messages and the tied-embedding sync (through the staged communicator), the
# distributed optimizer's all-gather, every pipeline message (compressed "on
# the device" first) and --check-lep's inputs all go through separate host copies.
# Every run must equal the same run without staging bit for bit (loss, grad
# norm, and the bytes of every traffic class in every iteration), and the job
# says how it communicates. A GPU job takes this path with real device copies
# (python3 -m occtools gpu-check: gpu_3d_layouts).
source "$(dirname "$0")/fixture/lib.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 4 --hidden-size 32
       --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2
       --global-batch-size 8 --eval-iters 1 --eval-interval 3 --log-interval 1 --seed 7 --lr 3e-3
       --hidden-dropout 0.1 --train-iters 4)

# same_bytes A B: every iteration's bytes per traffic class (sum over ranks) equal.
same_bytes() {
  local out
  if out=$("$PY" - "$WORK/$1.jsonl" "$WORK/$2.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["bytes"] for l in open(p)] for p in sys.argv[1:3])
if a != b:
    print(f"bytes differ: {a[0]} vs {b[0]}"); sys.exit(1)
print(f"{len(a)} iterations, per class {a[-1]}")
PY
  ); then pass "$2 vs $1: same bytes on the wire ($out)"; else failed "$2 vs $1: $out"; fi
}
# pair NAME RANKS FLAGS...: the run with and without staging, compared exactly.
pair() {
  local name=$1 np=$2
  shift 2
  train_run "$name" "$np" "$@" && train_run "${name}_staged" "$np" "$@" --debug-host-staging || return
  compare_losses "$name" "${name}_staged" 0
  same_bytes "$name" "${name}_staged"
}

# P2 D2 with the paper's full configuration: CB + LEP + EC, DP PowerSGD + FE + SC, --check-lep.
OCC=(--inter-grad-comp --inter-grad-comp-rank 4 --use-error-feedback --inter-grad-comp-epilogue-only
     --grad-comp --grad-comp-rank 4 --grad-comp-warm-up 0.25 --emb-comm-opt --selective-grad-comp-way 1 --check-lep)
pair p2d2_occ 4 --pipeline-model-parallel-size 2 "${OCC[@]}"
grep -q "^comm: mpi (host-staged on the CPU: --debug-host-staging)" "$WORK/p2d2_occ_staged.log" &&
  pass "the staged job says how it communicates" || failed "no 'comm: mpi (host-staged ...)' line in the staged job"
grep -q "^comm:" "$WORK/p2d2_occ.log" && failed "an unstaged CPU job prints a comm line" ||
  pass "an unstaged CPU job prints no comm line"
# Compressor state crosses: a checkpoint saved staged (CB's warm start and LEP
# residual, DP PowerSGD's warm start and error feedback, copied out of "device"
# buffers) resumes unstaged, and one saved unstaged resumes staged; each resumed
# run continues the straight run bit for bit. (GPU to CPU: tests/cuda, gpu-check.)
cross_resume() {
  local name=$1 save=$2 load=$3
  train_run "${name}_first" 4 --pipeline-model-parallel-size 2 "${OCC[@]}" $save --exit-interval 2 \
    --save "$WORK/$name" --save-interval 2 &&
    train_run "${name}_resumed" 4 --pipeline-model-parallel-size 2 "${OCC[@]}" $load --load "$WORK/$name" || return
  grep -q "notice:" "$WORK/${name}_resumed.log" && failed "$name: the resume printed $(grep "notice:" "$WORK/${name}_resumed.log")"
  compare_losses p2d2_occ "${name}_resumed" 0 3
}
cross_resume staged_to_plain --debug-host-staging ""
cross_resume plain_to_staged "" --debug-host-staging
# T2 P2 (TP collectives in the model, scatter-gather between stages) with int8 activations
# and CB by top-k with LEP, packed on the "device" (kernels/row_codes.h) under error
# feedback there.
pair t2p2_act 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --activation-comp-method int8 \
  --inter-grad-comp --inter-grad-comp-method topk --use-error-feedback
# T2 D2 with the distributed optimizer (reduce-scattered buckets, the all-gather of parameters).
pair t2d2_zero 4 --tensor-model-parallel-size 2 --use-distributed-optimizer
# P2 D2 without FE: the tied embedding synchronised between the first and last stage.
pair p2d2_tied 4 --pipeline-model-parallel-size 2
# Interleaved P2 with two chunks per rank (the ring of activations).
pair p2v2 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
finish
