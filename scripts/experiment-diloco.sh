#!/usr/bin/env bash
# DiLoCo's quality against per-step data parallelism (issue 34), on the quality experiment's
# model (scripts/quality_model.sh: 6 layers, hidden 256, seq 128, micro-batch 4, global batch
# 32, the same tokens for every variant) at two layouts on 4 ranks:
#   P2 D2 (the compressor sweep's layout) and P1 D4 (D4 with one process per replica: 8 ranks
#   would not fit this 2-core machine; P1 has no pipeline links, so the pipeline variant is P2 only)
# Variants, two seeds each, every run against the baseline of its seed and layout:
#   baseline | dp PowerSGD r16 + EF (the sweep's setting) | int8 on both pipeline links (P2 only:
#   pipeline compression alone) | DiLoCo H 8 | DiLoCo H 32
#   | Streaming DiLoCo (H 8, 3 fragments, overlap 2, mixing 0.5, int8 outer gradients)
#   | DiLoCo H 8 + int8 on both pipeline links (P2 only)
# Diagnostics (run only when named in --variants, on the seeds given; P2 D2): DiLoCo with outer
# lr 1 and momentum 0, i.e. the replicas' parameters averaged every H steps, at H 1, 8 and 32
# (whether the outer optimizer's defaults, not the rounds themselves, cost the loss).
# Writes OUT/variants.json, OUT/NAME_LAYOUT_sSEED.jsonl (metrics) and, via
# scripts/diloco_report.py, OUT/diloco-quality.{json,md,png}: the json's link_costs (DiLoCo
# settings measured at P2 D2) is what `optimus-cc plan --auto --max-loss-increase` reads
# with --diloco-json (docs/results/diloco-quality.json by default).
#   bash scripts/experiment-diloco.sh [--iters N] [--seeds "S1 S2"] [--out DIR]
#        [--layouts "p2d2 p1d4"] [--variants "a b .."] [--report-only]
# A run whose metrics reached the final evaluation is not run again (delete it to rerun).
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=128 EVAL=32 OUT=bench-results/diloco-quality SEEDS="1234 4321" LAYOUTS="p2d2 p1d4" ONLY="" REPORT_ONLY=0
BIN=${OCC_BIN:-build/optimus-cc}  # OCC_BIN: a copy of the binary, so rebuilding does not change a running experiment
while (($#)); do
  case $1 in
    --iters) ITERS=$2; shift 2;;
    --seeds) SEEDS=$2; shift 2;;
    --out) OUT=$2; shift 2;;
    --layouts) LAYOUTS=$2; shift 2;;
    --variants) ONLY=$2; shift 2;;
    --report-only) REPORT_ONLY=1; shift;;
    *) echo "error: unknown flag $1 (use --iters N, --seeds LIST, --out DIR, --layouts LIST, --variants LIST, --report-only)" >&2; exit 2;;
  esac
done
[[ $ITERS =~ ^[0-9]+$ && $ITERS -ge $EVAL && $((ITERS % EVAL)) -eq 0 ]] \
  || { echo "error: --iters must be a positive multiple of $EVAL (the evaluation interval, a multiple of every H)" >&2; exit 2; }

DPC="--grad-comp --grad-comp-error-feedback --grad-comp-warm-up 0.1 --grad-comp-rank 16"
STREAM="--diloco-inner-steps 8 --diloco-fragments 3 --diloco-overlap-steps 2 --diloco-mixing 0.5 --diloco-outer-comp-method int8"
PPINT8="--activation-comp-method int8 --inter-grad-comp --inter-grad-comp-method int8"
AVG="--diloco-outer-lr 1 --diloco-outer-momentum 0"
# name | label | kind | layouts | pp_fwd | pp_bwd | dp (JSON; null: uncompressed) | flags
#   kind: baseline, reference (per-step DP with compression, as the compressor sweep measures it),
#   single (DiLoCo alone: the planner's link_costs), combo, diagnostic (not a candidate; see above)
VARIANTS=(
  "baseline|baseline|baseline|p2d2 p1d4|null|null|null|"
  "dp_powersgd16|dp PowerSGD r16 + EF|reference|p2d2 p1d4|null|null|{\"method\": \"powersgd\", \"rank\": 16, \"error_feedback\": true, \"warmup\": 0.1}|$DPC"
  "pp_int8|int8 on both pipeline links (per-step DP)|reference|p2d2|{\"method\": \"int8\"}|{\"method\": \"int8\"}|null|$PPINT8"
  "diloco_h8|DiLoCo H 8|single|p2d2 p1d4|null|null|{\"method\": \"diloco\", \"inner_steps\": 8}|--diloco-inner-steps 8"
  "diloco_h32|DiLoCo H 32|single|p2d2 p1d4|null|null|{\"method\": \"diloco\", \"inner_steps\": 32}|--diloco-inner-steps 32"
  "streaming_int8|Streaming DiLoCo H 8, F 3, overlap 2, int8|single|p2d2 p1d4|null|null|{\"method\": \"diloco\", \"inner_steps\": 8, \"fragments\": 3, \"overlap\": 2, \"mixing\": 0.5, \"outer_comp\": \"int8\"}|$STREAM"
  "diloco_h8_pp_int8|DiLoCo H 8 + int8 pipeline links|combo|p2d2|{\"method\": \"int8\"}|{\"method\": \"int8\"}|{\"method\": \"diloco\", \"inner_steps\": 8}|--diloco-inner-steps 8 $PPINT8"
  "avg_h1|parameters averaged every step (DiLoCo H 1, outer lr 1, momentum 0)|diagnostic|p2d2|null|null|null|--diloco-inner-steps 1 $AVG"
  "avg_h8|parameters averaged every 8 steps (DiLoCo H 8, outer lr 1, momentum 0)|diagnostic|p2d2|null|null|null|--diloco-inner-steps 8 $AVG"
  "avg_h32|parameters averaged every 32 steps (DiLoCo H 32, outer lr 1, momentum 0)|diagnostic|p2d2|null|null|null|--diloco-inner-steps 32 $AVG"
)
declare -A LAYOUT_FLAGS=([p2d2]="--pipeline-model-parallel-size 2" [p1d4]="--pipeline-model-parallel-size 1")
source scripts/quality_model.sh
quality_model "$OUT" "$ITERS" "$EVAL"

printf '%s\n' "${VARIANTS[@]}" | /usr/bin/python3 -c '
import json, sys
iters, seeds, layouts, command = int(sys.argv[1]), [int(s) for s in sys.argv[2].split()], sys.argv[3].split(), sys.argv[4]
variants = []
for line in sys.stdin.read().splitlines():
    name, label, kind, where, fwd, bwd, dp, flags = line.split("|")
    variants.append({"name": name, "label": label, "kind": kind, "layouts": [l for l in where.split() if l in layouts],
                     "flags": flags.strip(), "links": {"pp_fwd": json.loads(fwd), "pp_bwd": json.loads(bwd),
                                                       "dp": json.loads(dp)}})
print(json.dumps({"description": f"DiLoCo vs per-step data parallelism on the quality model: 5.8 M-parameter GPT "
                  f"(6 layers, hidden 256, seq 128), global batch 32, {iters} iterations, the same tokens for every "
                  f"variant; P2 D2 and P1 D4 on 4 ranks", "command": command, "iters": iters, "seeds": seeds,
                  "layouts": layouts, "variants": variants}, indent=1))
' "$ITERS" "$SEEDS" "$LAYOUTS" "bash scripts/experiment-diloco.sh --iters $ITERS --seeds \"$SEEDS\" --layouts \"$LAYOUTS\"" \
  > "$OUT/variants.json"

complete() {  # complete FILE: the run reached its last evaluation
  [[ -f $1 ]] && tail -1 "$1" | grep -q "\"iter\":$ITERS[,}].*val_loss\|val_loss.*\"iter\":$ITERS[,}]"
}
((REPORT_ONLY)) && SEEDS=""
start=$(date +%s)
for layout in $LAYOUTS; do
  for entry in "${VARIANTS[@]}"; do
    IFS='|' read -r name label kind where fwd bwd dp flags <<< "$entry"
    [[ -z $ONLY || " $ONLY " == *" $name "* ]] || continue
    [[ $kind != diagnostic || " $ONLY " == *" $name "* ]] || continue  # diagnostics only when named
    [[ " $where " == *" $layout "* ]] || continue
    for seed in $SEEDS; do
      run=$OUT/${name}_${layout}_s$seed.jsonl
      if complete "$run"; then continue; fi
      printf '[%5ds] %-18s %s seed %s: %s\n' $(($(date +%s) - start)) "$name" "$layout" "$seed" "${flags:-(per-step DP)}"
      rm -f "$run"
      # shellcheck disable=SC2086
      mpirun -np 4 --oversubscribe "$BIN" train "${MODEL[@]}" ${LAYOUT_FLAGS[$layout]} --seed "$seed" $flags \
        --metrics "$run" > "$OUT/${name}_${layout}_s$seed.log" 2>&1 \
        || { echo "FAILED: see $OUT/${name}_${layout}_s$seed.log"; tail -3 "$OUT/${name}_${layout}_s$seed.log"; }
      grep -E "validation loss" "$OUT/${name}_${layout}_s$seed.log" | tail -1 || true
    done
  done
done
/usr/bin/python3 scripts/diloco_report.py "$OUT"
