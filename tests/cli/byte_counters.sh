#!/usr/bin/env bash
# labels: parallel
# The bytes each rank reports per traffic class ("ranks"[i]["bytes"] of the metrics JSONL)
# equal, exactly, what the code must send; "bytes" is their sum and "stages" their per-stage
# sums. Formulas (derived from the code; fp32 = 4 bytes, the two control values are doubles):
#
#   Notation: L layers, P stages, Ls = L/P layers per stage, T tensor-, D data-parallel size,
#   C hidden, V padded vocab, s seq length, b micro-batch size, M = global batch / (b D)
#   micro-batches, N = b s tokens per micro-batch, NC = N C activation floats.
#
#   ring(n, S, r): our ring all-reduce of n elements over S ranks (comm/mpi_communicator.cpp)
#     cuts n into chunks c = [n c/S, n (c+1)/S) and rank r sends every chunk but (r+1) mod S
#     in the reduce-scatter and every chunk but (r+2) mod S in the all-gather:
#     elements sent = 2n - len((r+1) mod S) - len((r+2) mod S)   (0 when S = 1).
#   allgather(k, S): (S-1) k elements.
#
#   pp_fwd  stage p < P-1 sends each micro-batch's output, its 1/T slice: M * 4 NC/T.
#   pp_bwd  stage p > 0 sends each input gradient slice:                  M * 4 NC/T.
#           Totals over the job: (P-1) T D * M * 4 NC/T = 4 (P-1) D M NC each.
#   tp      (T > 1) per micro-batch, with ring over the TP group (rank = tp):
#           forward: first stage ring(NC) (embedding), every layer 2 ring(NC) (attention
#           out-projection, MLP down-projection), last stage 3 ring(N) (cross-entropy max,
#           sum-exp, target logit), non-first stage allgather(NC/T, T) (received activations);
#           backward: last stage ring(NC) (LM head input gradient), every layer 2 ring(NC),
#           non-last stage allgather(NC/T, T) (received gradients). Times 4 bytes, times M.
#   dp      the reducer's buckets (parallel/grad_sync.h make_buckets over the rank's
#           ParamLayout, whole tensors from the end, a bucket closed once it holds
#           >= --dp-bucket-size elements): sum over buckets of 4 ring(n_bucket, D, dp).
#   emb     (P > 1) first and last stage: ring over {first, last} (2 ranks) of the word
#           embedding shard, V/T * C floats: 4 * V C/T.
#   other   the global grad norm, 8 ring(1, T P, p T + tp) (model group), plus the loss,
#           8 ring(1, world, world rank).
# Layouts: T2P2D2 (every class), P2D3 with small DP buckets (uneven ring chunks across 3
# ranks, many buckets), T4 with 30-token micro-batches (uneven cross-entropy chunks).
source "$(dirname "$0")/fixture/lib.sh"
export OCC_FIXTURE="$SRC/tests/cli/fixture"
ITERS=2
BASE=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 4 --hidden-size 64
      --num-attention-heads 4 --max-position-embeddings 32 --train-iters $ITERS --eval-iters 0 --seed 3)

# check NAME RANKS key=value... -- flags...: runs and compares every iteration's counters.
check() {
  local name=$1 np=$2
  shift 2
  local params=()
  while [[ $1 != -- ]]; do params+=("$1"); shift; done
  shift
  if ! timeout 120 mpirun -np "$np" --oversubscribe "$BIN" train "${BASE[@]}" "$@" \
      --metrics "$WORK/$name.jsonl" > "$WORK/$name.log" 2>&1; then
    tail -n 20 "$WORK/$name.log"
    failed "$name: training run failed"
    return
  fi
  local out
  if out=$("$PY" - "$WORK/$name.jsonl" "${params[@]}" <<'EOF'
import json, sys

import os
sys.path.insert(0, os.environ["OCC_FIXTURE"])
from traffic_model import CLASSES, make_buckets, metric_rows, numel, rank_tensors, ring  # noqa: E402

jsonl, params = sys.argv[1], dict(a.split("=") for a in sys.argv[2:])
L, C, H, V, maxpos, s, b, gb, T, P, D, bucket, iters = (int(params[k]) for k in
    ("L", "C", "H", "V", "maxpos", "s", "b", "gb", "T", "P", "D", "bucket", "iters"))
W, Ls, M, N = T * P * D, L // P, gb // (b * D), b * s
NC, F = N * C, 4 * C


def param_sizes(pp):
    return [numel(shape) for shape, _ in rank_tensors(L, C, V, maxpos, T, P, pp)]


def buckets(sizes):
    """make_buckets (parallel/grad_sync.h) with every tensor included: sizes of the buckets."""
    return [e for e, _ in make_buckets([([n], False) for n in sizes], bucket, lambda t: 0)]


def expected(tp, pp, dp, rank):
    first, last = pp == 0, pp == P - 1
    e = {"pp_fwd": 0 if last else M * 4 * NC // T, "pp_bwd": 0 if first else M * 4 * NC // T}
    tpe = 0
    if T > 1:
        r = lambda n: ring(n, T, tp)  # noqa: E731
        ag = (T - 1) * (NC // T)
        fwd = (r(NC) if first else 0) + 2 * Ls * r(NC) + (3 * r(N) if last else 0) + (0 if first else ag)
        bwd = (r(NC) if last else 0) + 2 * Ls * r(NC) + (0 if last else ag)
        tpe = 4 * M * (fwd + bwd)
    e["tp"] = tpe
    e["dp"] = 4 * sum(ring(n, D, dp) for n in buckets(param_sizes(pp)))
    e["emb"] = 4 * ring(V // T * C, 2, 0 if first else 1) if P > 1 and (first or last) else 0
    e["other"] = 8 * ring(1, T * P, pp * T + tp) + 8 * ring(1, W, rank)
    return e


rows, bad = metric_rows(jsonl, iters, W)
classes = CLASSES
for row in rows:
    it = row["iter"]
    ranks = row["ranks"]
    total = dict.fromkeys(classes, 0)
    stage = {p: dict.fromkeys(classes, 0) for p in range(P)}
    for r in ranks:
        tp, pp, dp, rank = r["tp"], r["pp"], r["dp"], r["rank"]
        if rank != pp * D * T + dp * T + tp:
            bad.append(f"iter {it}: rank {rank} reports tp {tp} pp {pp} dp {dp} (Megatron layout says otherwise)")
        want = expected(tp, pp, dp, rank)
        for k in classes:
            got = r["bytes"].get(k)
            if got != want[k]:
                bad.append(f"iter {it} rank {rank} (tp {tp} pp {pp} dp {dp}): {k} = {got}, expected {want[k]}")
            total[k] += want[k]
            stage[pp][k] += want[k]
    for k in classes:
        if row["bytes"].get(k) != total[k]:
            bad.append(f"iter {it}: total {k} = {row['bytes'].get(k)}, expected {total[k]}")
    for st in row.get("stages", []):
        for k in classes:
            if st["bytes"].get(k) != stage[st["stage"]][k]:
                bad.append(f"iter {it} stage {st['stage']}: {k} = {st['bytes'].get(k)}, expected {stage[st['stage']][k]}")
    if len(row.get("stages", [])) != P:
        bad.append(f"iter {it}: {len(row.get('stages', []))} stages reported, expected {P}")
    # The closed forms of the pipeline totals.
    for k in ("pp_fwd", "pp_bwd"):
        if row["bytes"].get(k) != 4 * (P - 1) * D * M * NC:
            bad.append(f"iter {it}: total {k} {row['bytes'].get(k)} != 4 (P-1) D M NC = {4 * (P - 1) * D * M * NC}")
for line in bad[:20]:
    print("   ", line)
if not bad:
    t = rows[-1]["bytes"]
    print(", ".join(f"{k} {t[k]}" for k in classes))
sys.exit(1 if bad else 0)
EOF
  ); then
    pass "$name: bytes of every rank, stage and class exact for $ITERS iterations (totals per iteration: $out)"
  else
    echo "$out"
    failed "$name: byte counters differ from the formulas"
  fi
}

V=512  # the fixture tokenizer's 512 tokens, already a multiple of 128
common="L=4 C=64 H=4 V=$V maxpos=32 iters=$ITERS"
check T2P2D2 8 $common s=32 b=2 gb=8 T=2 P=2 D=2 bucket=262144 -- \
  --seq-length 32 --micro-batch-size 2 --global-batch-size 8 \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
check P2D3 6 $common s=32 b=2 gb=12 T=1 P=2 D=3 bucket=5000 -- \
  --seq-length 32 --micro-batch-size 2 --global-batch-size 12 --pipeline-model-parallel-size 2 \
  --dp-bucket-size 5000
check T4 4 $common s=30 b=1 gb=2 T=4 P=1 D=1 bucket=262144 -- \
  --seq-length 30 --micro-batch-size 1 --global-batch-size 2 --tensor-model-parallel-size 4
finish
