#!/usr/bin/env bash
# End-to-end speedup of Optimus-CC on an emulated cluster (the paper's Table 2 and
# Fig. 10, measured): real MPI ranks on N network namespaces joined by shaped links
# (scripts/cluster.sh), the same model, data and seed for every variant:
#   baseline | dp_powersgd (DP-only PowerSGD) | cb_lep_ec | fe (+FE) | full (+SC: Optimus-CC)
#   | auto (the quality-aware plan: `plan --auto --max-loss-increase 0.5` calibrated on this
#     run's own first baseline repetition, with the loss costs the compressor sweep measured,
#     docs/results/compressors.json; computed here, between the baseline's and its own first run)
#   | nocomm (baseline on unshaped links: T_nocomm, the bound compression approaches)
# Repetitions are interleaved (every variant once per round) so slow phases of
# the shared machine hit all variants alike.
#
#   bash scripts/bench-speedup.sh [--quick] [--iters N] [--reps R] [--bandwidth RATE]
#                                 [--latency DELAY] [--out DIR] [--small]
# --small: the same model on 4 nodes (P2 D2, global batch 32: 4 micro-batches per DP
# rank) instead of 8, so a 2-core machine runs 2 ranks per core rather than 4: less
# contention between the ranks, tighter intervals.
# speedup_report.py gives each variant's median ms/iter with a 95 % bootstrap confidence
# interval (repetitions, then iterations within them, resampled) and ranks two variants
# only where their intervals do not overlap.
#   MAX_LOSS=X (default 0.5): the auto plan's loss budget in %; COMPRESSORS_JSON=FILE: the
#   sweep's measured loss costs (default docs/results/compressors.json; the plan also reads
#   DiLoCo's, docs/results/diloco-quality.json, where it exists).
#   OCC_VARIANTS="a b ..": a subset, or other variants of scripts/speedup_variants.sh (the
#   DiLoCo ones: scripts/bench-diloco.sh); OCC_CLUSTER_NAME: the emulated cluster's name.
# Writes OUT/speedup.json, OUT/speedup.md, OUT/breakdown.png (stacked per-phase
# time per stage and variant), OUT/traces/VARIANT.json (Perfetto), the metrics
# of every run (OUT/runs/VARIANT.rK.jsonl) and each variant's train flags
# (OUT/runs/VARIANT.flags, for scripts/validate-planner.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=30 REPS=2 BANDWIDTH=300mbit LATENCY=0 OUT=bench-results/speedup SMALL=0
while (($#)); do
  case $1 in
    --quick) ITERS=8; REPS=1; shift;;
    --iters) ITERS=$2; shift 2;;
    --reps) REPS=$2; shift 2;;
    --bandwidth) BANDWIDTH=$2; shift 2;;
    --latency) LATENCY=$2; shift 2;;
    --out) OUT=$2; shift 2;;
    --small) SMALL=1; shift;;
    *) echo "error: unknown flag $1 (use --quick, --iters N, --reps R, --bandwidth RATE, --latency DELAY, --out DIR, --small)" >&2; exit 2;;
  esac
done
[[ $ITERS =~ ^[0-9]+$ && $ITERS -ge 6 ]] || { echo "error: --iters must be at least 6 (the first iterations are warm-up)" >&2; exit 2; }
bash scripts/cluster.sh check > /dev/null || { echo "error: $(bash scripts/cluster.sh check)" >&2; exit 3; }
bash scripts/setup.sh > /dev/null
rm -rf "$OUT/runs" "$OUT/traces"  # no stale repetitions from an earlier run
mkdir -p "$OUT/runs" "$OUT/traces"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

# The model: 8 layers of hidden 256 on 4 pipeline stages x 2 data-parallel
# replicas, one rank per node (8 nodes, the paper's P4 with SC k = 3): every
# pipeline and data-parallel transfer crosses a shaped link. 8 micro-batches per
# iteration; a 1024-token vocabulary keeps the word embedding at 4 % of the
# parameters, as in GPT-2.5B.
NODES=8 VOCAB=1024 LAYOUT=T1P4D2 P=4 GB=64
((SMALL)) && NODES=4 LAYOUT=T1P2D2 P=2 GB=32
DATA=$OUT/data-v$VOCAB
[[ -f $DATA/kjv.idx ]] || { mkdir -p "$DATA"; build/optimus-cc preprocess --input data/kjv.txt.zst --output-prefix "$DATA/kjv" --vocab-size $VOCAB > /dev/null; }
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 8 --hidden-size 256
  --num-attention-heads 8 --seq-length 64 --max-position-embeddings 64 --micro-batch-size 4 --global-batch-size $GB
  --train-iters "$ITERS" --lr 6e-4 --min-lr 6e-5 --lr-warmup-fraction 0.2 --eval-iters 0 --log-interval 1000
  --pipeline-model-parallel-size $P --seed 1234 --comm-timeout 300 ${OCC_TRAIN_FLAGS:-})  # OCC_TRAIN_FLAGS: extra train flags
source scripts/speedup_variants.sh
speedup_variants $P
COMPRESSORS_JSON=${COMPRESSORS_JSON:-docs/results/compressors.json} MAX_LOSS=${MAX_LOSS:-0.5}
if [[ -f $COMPRESSORS_JSON ]]; then
  VARIANTS=("${VARIANTS[@]:0:${#VARIANTS[@]}-1}" auto nocomm)  # auto before nocomm
  FLAGS[auto]=""  # set once the baseline's first run has been measured
else
  echo "note: no $COMPRESSORS_JSON (run scripts/experiment-compressors.sh): the auto variant is left out"
fi
# shellcheck disable=SC2206
[[ -n ${OCC_VARIANTS:-} ]] && VARIANTS=($OCC_VARIANTS)  # OCC_VARIANTS="a b": a subset
CLUSTER=${OCC_CLUSTER_NAME:-occbench}  # another name lets two benchmarks share a machine
bash scripts/cluster.sh down --name $CLUSTER > /dev/null
trap 'bash scripts/cluster.sh down --name $CLUSTER > /dev/null' EXIT
bash scripts/cluster.sh up --name $CLUSTER --nodes $NODES --bandwidth "$BANDWIDTH" --latency "$LATENCY"
echo "$BANDWIDTH $LATENCY $NODES $ITERS $REPS $LAYOUT" > "$OUT/runs/settings"
for v in "${VARIANTS[@]}"; do [[ $v == auto ]] || echo "${MODEL[*]} ${FLAGS[$v]}" > "$OUT/runs/$v.flags"; done
# The auto plan, calibrated on the baseline's first repetition of this benchmark.
plan_auto() {
  build/optimus-cc plan --ignore-unknown-flags "${MODEL[@]}" --devices-per-node 1 \
    --calibrate "$OUT/runs/baseline.r1.jsonl" --auto --max-loss-increase "$MAX_LOSS" \
    --compressors-json "$COMPRESSORS_JSON" > "$OUT/runs/auto.plan.txt" 2>&1 \
    || { echo "FAILED: plan --auto (see $OUT/runs/auto.plan.txt)"; tail -3 "$OUT/runs/auto.plan.txt"; exit 1; }
  FLAGS[auto]=$(sed -n 's/^train flags: //p' "$OUT/runs/auto.plan.txt")
  [[ ${FLAGS[auto]} == "(none)" ]] && FLAGS[auto]=""
  echo "${MODEL[*]} ${FLAGS[auto]}" > "$OUT/runs/auto.flags"
  echo "auto plan (calibrated on baseline.r1): $(grep -E '^(chosen|expected loss cost)' "$OUT/runs/auto.plan.txt" | tr '\n' ' ')"
}
start=$(date +%s)
for ((rep = 1; rep <= REPS; rep++)); do
  # Rotate the order each round so no variant always runs first (cold caches) or last.
  for ((i = 0; i < ${#VARIANTS[@]}; i++)); do
    v=${VARIANTS[$(((i + rep - 1) % ${#VARIANTS[@]}))]}
    if [[ $v == auto && ! -f $OUT/runs/auto.flags ]]; then
      # Round 1 starts with the baseline, so its measurement exists by now.
      [[ -f $OUT/runs/baseline.r1.jsonl ]] || { echo "error: the auto variant needs the baseline's first run" >&2; exit 1; }
      plan_auto
    fi
    bw=$BANDWIDTH lat=$LATENCY
    [[ $v == nocomm ]] && bw=0 lat=0
    rm -f "$OUT/runs/$v.r$rep.jsonl"
    trace=()
    ((rep == 1)) && trace=(--trace "$OUT/traces/$v.json")
    printf '[%4ds] round %d/%d  %-12s ' $(($(date +%s) - start)) "$rep" "$REPS" "$v"
    # shellcheck disable=SC2086
    OCC_CLUSTER_STATS="$OUT/runs/$v.r$rep.links" bash scripts/cluster.sh run --name $CLUSTER --nodes $NODES \
      --ranks-per-node 1 --bandwidth "$bw" --latency "$lat" -- \
      build/optimus-cc train "${MODEL[@]}" ${FLAGS[$v]} --metrics "$OUT/runs/$v.r$rep.jsonl" "${trace[@]}" \
      > "$OUT/runs/$v.r$rep.log" 2>&1 || { echo "FAILED (see $OUT/runs/$v.r$rep.log)"; tail -5 "$OUT/runs/$v.r$rep.log"; exit 1; }
    grep -o "[0-9.]* ms/it" "$OUT/runs/$v.r$rep.log" | tail -1
  done
done
# All repetitions of a variant in one file, with its flags: the input of scripts/validate-planner.sh.
for v in "${VARIANTS[@]}"; do cat "$OUT/runs/$v".r*.jsonl > "$OUT/runs/$v.jsonl"; done
/usr/bin/python3 scripts/speedup_report.py "$OUT"
