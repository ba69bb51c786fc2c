#!/usr/bin/env bash
# Projects the paper's GPT-2.5B and GPT-8.3B settings (docs/planner.md: 16 nodes x 8 A100,
# T8 P4 D4, micro-batch 8, global batch 512, fp16 values, recomputation) with Megatron's
# scale features: the interleaved 1F1B schedule (--num-layers-per-virtual-pipeline-stage)
# and the distributed optimizer (--use-distributed-optimizer), without and with full
# Optimus-CC (CB + LEP + EC, FE, SC K = 3 with DP PowerSGD rank 128), at 25 and 6.25 GB/s
# per node. Prints the markdown table of docs/planner.md. Every number is the planner's
# prediction (a model), not a measurement.
#   bash scripts/plan-scale-features.sh [BIN]
set -euo pipefail
BIN=${1:-build/optimus-cc}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
COMMON=(--seq-length 1024 --max-position-embeddings 1024 --vocab-size 50257 --micro-batch-size 8
        --global-batch-size 512 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --nodes 16
        --devices-per-node 8 --device-tflops 312 --efficiency 0.45 --bytes-per-value 2 --checkpoint-activations)
OCC=(--inter-grad-comp --inter-grad-comp-rank 16 --use-error-feedback --inter-grad-comp-epilogue-only
     --emb-comm-opt --grad-comp --grad-comp-rank 128 --selective-grad-comp-way 3)
cell() {  # cell LAYERS_PER_CHUNK FLAGS...: "ms | GiB | activations" of the plan's prediction (largest stage)
  local chunk_layers=$1
  shift
  "$BIN" plan "${COMMON[@]}" "$@" --json "$TMP/p.json" > "$TMP/p.txt" || { cat "$TMP/p.txt" >&2; exit 1; }
  /usr/bin/python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
held = max(j['micro_batches_in_flight']) * int(sys.argv[2])
print(f\"{j['iteration_ms']:.0f} | {max(j['model_state_gib']):.2f} | {held}\")" "$TMP/p.json" "$chunk_layers"
}
echo "| model | inter-node | schedule | optimizer | baseline ms | weights+grads+Adam GiB/rank | activations held (micro-batch x layers) | Optimus-CC ms | speedup |"
echo "|---|---|---|---|---|---|---|---|---|"
for model in 2.5B 8.3B; do
  if [[ $model == 2.5B ]]; then
    SHAPE=(--num-layers 52 --hidden-size 1920 --num-attention-heads 24); STAGE_LAYERS=13
    SCHEDULES=("1F1B:" "interleaved V=13 (N=1):1")
  else
    SHAPE=(--num-layers 72 --hidden-size 3072 --num-attention-heads 24); STAGE_LAYERS=18
    SCHEDULES=("1F1B:" "interleaved V=2 (N=9):9" "interleaved V=6 (N=3):3")
  fi
  for bw in 25 6.25; do
    for sched in "${SCHEDULES[@]}"; do
      name=${sched%%:*} n=${sched##*:}
      VP=()
      [[ -n $n ]] && VP=(--num-layers-per-virtual-pipeline-stage "$n")
      for opt in replicated distributed; do
        OPT=()
        [[ $opt == distributed ]] && OPT=(--use-distributed-optimizer)
        base=$(cell "${n:-$STAGE_LAYERS}" "${SHAPE[@]}" --inter-node-bandwidth "$bw" "${VP[@]}" "${OPT[@]}")
        occ=$(cell "${n:-$STAGE_LAYERS}" "${SHAPE[@]}" --inter-node-bandwidth "$bw" "${VP[@]}" "${OPT[@]}" "${OCC[@]}")
        b=${base%% |*} o=${occ%% |*}
        echo "| GPT-$model | $bw GB/s | $name | $opt | $base | $o | $(/usr/bin/python3 -c "print(f'{$b/$o:.3f}x')") |"
      done
    done
  done
done
