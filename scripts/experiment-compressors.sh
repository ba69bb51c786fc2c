#!/usr/bin/env bash
# The compressor sweep: every compression method on every pipeline/data-parallel link class,
# the sensible combinations and the paper's configurations, on the quality experiment's model
# (scripts/quality_model.sh: 6 layers, hidden 256, P2 D2 on 4 ranks), two seeds, the same
# tokens for every variant, in --bf16 (the precision users train in; the uncompressed wire
# is then bf16 on the pipeline links) unless --precision fp32. Each run is compared with the
# baseline of the same seed and precision.
#   link classes: pp_fwd (activations sent forward, --activation-comp-method),
#                 pp_bwd (activation gradients sent backward: CB, --inter-grad-comp-method),
#                 dp     (data-parallel gradients: --grad-comp-method)
# Writes OUT/variants.json (what each variant is), OUT/NAME_sSEED.jsonl (its metrics), and
# via scripts/compressors_report.py OUT/compressors.json (bytes per iteration per class,
# final validation loss vs baseline per seed, and per link class the measured loss cost of
# each method: what `optimus-cc plan --auto --compressors-json` reads), OUT/compressors.md
# and OUT/pareto.png (pipeline bytes vs loss, the paper's configurations marked).
#   bash scripts/experiment-compressors.sh [--iters N] [--seeds "S1 S2"] [--out DIR]
#        [--precision bf16|fp32] [--variants "a b .."] [--list] [--report-only]
# Variants run in the order below, or in --variants' order, both seeds each; a variant
# whose run files are complete is not run again (delete them to rerun).
# Settings: DP compression always with error feedback (--grad-comp-error-feedback) and a
# 10 % uncompressed warm-up (as the quality experiment's DP PowerSGD) unless the variant says
# "no EF"; CB and activation methods plain (no LEP) unless the variant says LEP (the paper's
# configurations, with --use-error-feedback: LEP and DP error feedback at once). The block
# methods (mxfp4, nvfp4, int4, int3) round to nearest unless the variant says SR.
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=100 EVAL=20 OUT=bench-results/compressors SEEDS="1234 4321" ONLY="" REPORT_ONLY=0 LIST=0 PRECISION=bf16
BIN=${OCC_BIN:-build/optimus-cc}  # OCC_BIN: a copy of the binary, so rebuilding does not change a running sweep
while (($#)); do
  case $1 in
    --iters) ITERS=$2; shift 2;;
    --seeds) SEEDS=$2; shift 2;;
    --out) OUT=$2; shift 2;;
    --variants) ONLY=$2; shift 2;;
    --precision) PRECISION=$2; shift 2;;
    --list) LIST=1; shift;;
    --report-only) REPORT_ONLY=1; shift;;
    *) echo "error: unknown flag $1 (use --iters N, --seeds LIST, --out DIR, --precision bf16|fp32, --variants LIST, --list, --report-only)" >&2; exit 2;;
  esac
done
[[ $ITERS =~ ^[0-9]+$ && $ITERS -ge $EVAL && $((ITERS % EVAL)) -eq 0 ]] \
  || { echo "error: --iters must be a positive multiple of $EVAL (the evaluation interval)" >&2; exit 2; }
[[ $PRECISION == bf16 || $PRECISION == fp32 ]] || { echo "error: --precision must be bf16 or fp32" >&2; exit 2; }
PRECISION_FLAGS=()
[[ $PRECISION == bf16 ]] && PRECISION_FLAGS=(--bf16)

CB="--inter-grad-comp"
DPC="--grad-comp --grad-comp-error-feedback --grad-comp-warm-up 0.1"
DPN="--grad-comp --grad-comp-warm-up 0.1"  # without error feedback
LEP="--use-error-feedback"
# name | label | kind | pp_fwd | pp_bwd | dp | flags
#   a link setting: - (uncompressed) or METHOD[:PARAM][+lep][+ec][+ef][+sr][+rans][+scK][+wuF]
#   (PARAM: PowerSGD rank or topk fraction; sr: stochastic rounding; rans: the lossless stage
#   --*-comp-lossless rans, the same training with fewer bytes; F: DP warm-up fraction);
#   kind: baseline, single (one link class), combo, paper.
VARIANTS=(
  "baseline|baseline|baseline|-|-|-|"
  "fwd_int8|pp_fwd int8|single|int8|-|-|--activation-comp-method int8"
  "bwd_int8|pp_bwd int8|single|-|int8|-|$CB --inter-grad-comp-method int8"
  "dp_int8|dp int8 + EF|single|-|-|int8+ef+wu0.1|$DPC --grad-comp-method int8"
  "pp_int8|pp_fwd int8 + pp_bwd int8|combo|int8|int8|-|--activation-comp-method int8 $CB --inter-grad-comp-method int8"
  "bwd_powersgd16|pp_bwd PowerSGD r16 (CB)|single|-|powersgd:16|-|$CB --inter-grad-comp-rank 16"
  "dp_powersgd16|dp PowerSGD r16 + EF|single|-|-|powersgd:16+ef+wu0.1|$DPC --grad-comp-rank 16"
  "bwd_sign_lep|pp_bwd sign + LEP|single|-|sign+lep|-|$CB --inter-grad-comp-method sign --use-error-feedback"
  "dp_sign|dp sign + EF|single|-|-|sign+ef+wu0.1|$DPC --grad-comp-method sign"
  "dp_topk1|dp topk 1% + EF|single|-|-|topk:0.01+ef+wu0.1|$DPC --grad-comp-method topk --grad-comp-topk-fraction 0.01"
  "paper_full|Optimus-CC (CB r16+LEP+EC, FE, DP r16+SC)|paper|-|powersgd:16+lep+ec|powersgd:16+ef+sc1+wu0.1|$CB --inter-grad-comp-rank 16 --use-error-feedback --inter-grad-comp-epilogue-only --emb-comm-opt $DPC --grad-comp-rank 16 --selective-grad-comp-way 1"
  "fwd_topk25|pp_fwd topk 25%|single|topk:0.25|-|-|--activation-comp-method topk --activation-comp-topk-fraction 0.25"
  "bwd_topk10_lep|pp_bwd topk 10% + LEP|single|-|topk:0.1+lep|-|$CB --inter-grad-comp-method topk --inter-grad-comp-topk-fraction 0.1 --use-error-feedback"
  "bwd_fp8e5m2|pp_bwd fp8-e5m2|single|-|fp8-e5m2|-|$CB --inter-grad-comp-method fp8-e5m2"
  "fwd_fp8e4m3|pp_fwd fp8-e4m3|single|fp8-e4m3|-|-|--activation-comp-method fp8-e4m3"
  "dp_fp8e5m2|dp fp8-e5m2 + EF|single|-|-|fp8-e5m2+ef+wu0.1|$DPC --grad-comp-method fp8-e5m2"
  "pp_int8_sign_lep|pp_fwd int8 + pp_bwd sign + LEP|combo|int8|sign+lep|-|--activation-comp-method int8 $CB --inter-grad-comp-method sign --use-error-feedback"
  "bwd_sign|pp_bwd sign|single|-|sign|-|$CB --inter-grad-comp-method sign"
  "pp_int8_psgd|pp_fwd int8 + pp_bwd PowerSGD r16|combo|int8|powersgd:16|-|--activation-comp-method int8 $CB --inter-grad-comp-rank 16"
  "bwd_topk10|pp_bwd topk 10%|single|-|topk:0.1|-|$CB --inter-grad-comp-method topk --inter-grad-comp-topk-fraction 0.1"
  "pp_fp8|pp_fwd fp8-e4m3 + pp_bwd fp8-e5m2|combo|fp8-e4m3|fp8-e5m2|-|--activation-comp-method fp8-e4m3 $CB --inter-grad-comp-method fp8-e5m2"
  "pp_int8_sign|pp_fwd int8 + pp_bwd sign|combo|int8|sign|-|--activation-comp-method int8 $CB --inter-grad-comp-method sign"
  "bwd_fp8e4m3|pp_bwd fp8-e4m3|single|-|fp8-e4m3|-|$CB --inter-grad-comp-method fp8-e4m3"
  "dp_fp8e4m3|dp fp8-e4m3 + EF|single|-|-|fp8-e4m3+ef+wu0.1|$DPC --grad-comp-method fp8-e4m3"
  "all_int8|int8 on every link (EF on dp)|combo|int8|int8|int8+ef+wu0.1|--activation-comp-method int8 $CB --inter-grad-comp-method int8 $DPC --grad-comp-method int8"
  "paper_cb_lep|CB r16 + LEP|paper|-|powersgd:16+lep|-|$CB --inter-grad-comp-rank 16 --use-error-feedback"
)
# The block-scaled codecs (issue 40): each on both pipeline links (with and without LEP on
# pp_bwd), on each link class alone, and on DP with and without error feedback.
for m in int3 mxfp4 nvfp4 int4; do
  VARIANTS+=(
    "pp_${m}_lep|pp_fwd $m + pp_bwd $m + LEP|combo|$m|$m+lep|-|--activation-comp-method $m $CB --inter-grad-comp-method $m $LEP"
    "pp_${m}|pp_fwd $m + pp_bwd $m|combo|$m|$m|-|--activation-comp-method $m $CB --inter-grad-comp-method $m"
    "fwd_${m}|pp_fwd $m|single|$m|-|-|--activation-comp-method $m"
    "bwd_${m}_lep|pp_bwd $m + LEP|single|-|$m+lep|-|$CB --inter-grad-comp-method $m $LEP"
    "bwd_${m}|pp_bwd $m|single|-|$m|-|$CB --inter-grad-comp-method $m"
    "dp_${m}|dp $m + EF|single|-|-|$m+ef+wu0.1|$DPC --grad-comp-method $m"
    "dp_${m}_noef|dp $m (no EF)|single|-|-|$m+wu0.1|$DPN --grad-comp-method $m")
done
VARIANTS+=(
  "pp_mxfp4_int3_lep|pp_fwd mxfp4 + pp_bwd int3 + LEP|combo|mxfp4|int3+lep|-|--activation-comp-method mxfp4 $CB --inter-grad-comp-method int3 $LEP"
  "bwd_int3_sr|pp_bwd int3 SR|single|-|int3+sr|-|$CB --inter-grad-comp-method int3 --inter-grad-comp-rounding stochastic"
  "dp_mxfp4_sr_noef|dp mxfp4 SR (no EF)|single|-|-|mxfp4+sr+wu0.1|$DPN --grad-comp-method mxfp4 --grad-comp-rounding stochastic")
# Below 4 bits without another rounding: the block codes entropy-coded on the host (rANS).
RANS="--activation-comp-lossless rans --inter-grad-comp-lossless rans"
for m in mxfp4 int4 int3; do
  VARIANTS+=("pp_${m}_lep_rans|pp_fwd $m + pp_bwd $m + LEP, rANS-coded|combo|$m+rans|$m+lep+rans|-|--activation-comp-method $m $CB --inter-grad-comp-method $m $LEP $RANS")
done
VARIANTS+=("pp_mxfp4_int3_lep_rans|pp_fwd mxfp4 + pp_bwd int3 + LEP, rANS-coded|combo|mxfp4+rans|int3+lep+rans|-|--activation-comp-method mxfp4 $CB --inter-grad-comp-method int3 $LEP $RANS")
if ((LIST)); then printf '%s\n' "${VARIANTS[@]}" | cut -d'|' -f1,2 | tr '|' '\t'; exit 0; fi
source scripts/quality_model.sh
quality_model "$OUT" "$ITERS" "$EVAL"

# The manifest the report reads (link settings parsed into JSON).
printf '%s\n' "${VARIANTS[@]}" | /usr/bin/python3 -c '
import json, sys
iters, seeds, command, precision = int(sys.argv[1]), [int(s) for s in sys.argv[2].split()], sys.argv[3], sys.argv[4]
def setting(text):
    if text == "-":
        return None
    head, *extras = text.split("+")
    method, _, param = head.partition(":")
    s = {"method": method}
    if param:
        s["rank" if method == "powersgd" else "fraction"] = int(param) if method == "powersgd" else float(param)
    for e in extras:
        if e.startswith("sc"):
            s["sc"] = int(e[2:])
        elif e.startswith("wu"):
            s["warmup"] = float(e[2:])
        else:
            s[{"ef": "error_feedback", "sr": "stochastic"}.get(e, e)] = True
    if s.pop("rans", False):
        s["lossless"] = "rans"
    return s
variants = []
for line in sys.stdin.read().splitlines():
    name, label, kind, fwd, bwd, dp, flags = line.split("|")
    variants.append({"name": name, "label": label, "kind": kind, "paper": kind == "paper", "flags": flags.strip(),
                     "links": {"pp_fwd": setting(fwd), "pp_bwd": setting(bwd), "dp": setting(dp)}})
print(json.dumps({"description": f"compressor sweep on the quality model: 5.8 M-parameter GPT (6 layers, hidden 256, "
                  f"seq 128), P2 D2 on 4 ranks, global batch 32, {iters} iterations, {precision}, the same tokens "
                  f"for every variant", "precision": precision,
                  "command": command, "iters": iters, "seeds": seeds, "variants": variants}, indent=1))
' "$ITERS" "$SEEDS" "bash scripts/experiment-compressors.sh --iters $ITERS --seeds \"$SEEDS\" --precision $PRECISION" \
  "$PRECISION" > "$OUT/variants.json"

complete() {  # complete FILE: the run reached its last evaluation
  [[ -f $1 ]] && tail -1 "$1" | grep -q "\"iter\":$ITERS[,}].*val_loss\|val_loss.*\"iter\":$ITERS[,}]"
}
((REPORT_ONLY)) && SEEDS=""
start=$(date +%s)
ORDER=("${VARIANTS[@]}")
if [[ -n $ONLY ]]; then  # --variants' order
  ORDER=()
  for want in $ONLY; do
    for entry in "${VARIANTS[@]}"; do [[ ${entry%%|*} == "$want" ]] && ORDER+=("$entry"); done
    [[ " ${ORDER[*]%%|*} " == *" $want "* ]] || { echo "error: no variant $want (see --list)" >&2; exit 2; }
  done
fi
for entry in "${ORDER[@]}"; do
  IFS='|' read -r name label kind fwd bwd dp flags <<< "$entry"
  for seed in $SEEDS; do
    run=$OUT/${name}_s$seed.jsonl
    if complete "$run"; then continue; fi
    printf '[%5ds] %-16s seed %s (load %s): %s\n' $(($(date +%s) - start)) "$name" "$seed" \
      "$(cut -d' ' -f1-3 /proc/loadavg)" "${flags:-(no compression)}"
    rm -f "$run"
    t0=$(date +%s) l0=$(cut -d' ' -f1 /proc/loadavg)
    # shellcheck disable=SC2086
    mpirun -np 4 --oversubscribe "$BIN" train "${MODEL[@]}" "${PRECISION_FLAGS[@]}" --seed "$seed" $flags --metrics "$run" \
      > "$OUT/${name}_s$seed.log" 2>&1 || { echo "FAILED: see $OUT/${name}_s$seed.log"; tail -3 "$OUT/${name}_s$seed.log"; }
    # The machine's load over the run (start time and 1-minute load average, then the end's): the report states it.
    echo "$name $seed $t0 $l0 $(date +%s) $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/load.txt"
    grep -E "validation loss" "$OUT/${name}_s$seed.log" | tail -1 || true
  done
done
/usr/bin/python3 scripts/compressors_report.py "$OUT"
