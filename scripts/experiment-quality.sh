#!/usr/bin/env bash
# The Optimus-CC quality ablation on the bundled corpus: a ~5.8 M-parameter GPT
# (6 layers, hidden 256, 8 heads, seq 128) on 4 ranks (pipeline 2 x data 2),
# the same tokens for every variant:
#   baseline | DP-only PowerSGD | CB without LEP | CB+LEP | CB+LEP+EC | +FE | +SC (full Optimus-CC)
# Shapes chosen to sit closer to the paper's regime than a toy batch: micro-batch 4 x
# seq 128 = n 512 token rows per CB message (n > m = hidden 256), global batch 32 =
# M 4 micro-batches per DP rank per iteration (M = 2P), CB rank 16 (paper 12..16),
# DP rank 16 (~6 % of the columns, as 128 of 1920 in the paper). ~4k tokens/iteration.
# The first CB rank of --cb-ranks (16, the paper's) runs the whole ablation; each further
# rank (default 64) repeats the variants whose quality depends on it (CB, CB+LEP,
# CB+LEP+EC, full), so the table shows how the gaps move with the compression error.
# Writes OUT/quality.json, OUT/quality.md (final validation loss, bytes per iteration per
# class, ms per iteration, LEP's premises from --check-lep) and OUT/quality.png
# (validation curves: the ablation, and the rank sweep).
#   bash scripts/experiment-quality.sh [--iters N] [--quick] [--out DIR] [--seeds "S1 S2 .."]
#        [--cb-ranks "16 64"] [--variants "3_cb 4_cb_lep .."] [--report-only]
#   (--quick: 40 iterations, CB rank 16 only; DP_RANK=r: DP rank, default 16;
#   --variants 8_cb_ec_no_lep: the opt-in diagnostic EC without LEP)
# Runs accumulate in OUT as NAME[_rCBRANK]_sSEED.jsonl; the tables report every run found
# there, each compared with the baseline of the same seed, by scripts/quality_report.py
# (--report-only: no new runs).
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=160 EVAL=20 OUT=bench-results/quality SEEDS=1234 ONLY="" CB_RANKS="16 64" REPORT_ONLY=0
while (($#)); do
  case $1 in
    --iters) ITERS=$2; shift 2;;
    --quick) ITERS=40; EVAL=10; CB_RANKS=16; shift;;
    --out) OUT=$2; shift 2;;
    --seeds) SEEDS=$2; shift 2;;
    --cb-ranks) CB_RANKS=$2; shift 2;;
    --variants) ONLY=$2; shift 2;;
    --report-only) REPORT_ONLY=1; shift;;
    *) echo "error: unknown flag $1 (use --iters N, --quick, --out DIR, --seeds LIST, --cb-ranks LIST, --variants LIST, --report-only)"; exit 2;;
  esac
done
source scripts/quality_model.sh
quality_model "$OUT" "$ITERS" "$EVAL"
CB="--inter-grad-comp --inter-grad-comp-rank @R"  # @R: the CB rank of the run
DPC="--grad-comp --grad-comp-rank ${DP_RANK:-16} --grad-comp-warm-up 0.1"
declare -A VARIANTS=(
  [1_baseline]=""
  [2_dp_powersgd]="$DPC --use-error-feedback"
  [3_cb]="$CB"
  [4_cb_lep]="$CB --use-error-feedback --check-lep"
  [5_cb_lep_ec]="$CB --use-error-feedback --inter-grad-comp-epilogue-only"
  [6_cb_lep_ec_fe]="$CB --use-error-feedback --inter-grad-comp-epilogue-only --emb-comm-opt"
  [7_optimus_cc]="$CB --use-error-feedback --inter-grad-comp-epilogue-only --emb-comm-opt $DPC --selective-grad-comp-way 1"
  # Diagnostic, run only when named in --variants: EC without LEP (is LEP what EC costs?).
  [8_cb_ec_no_lep]="$CB --inter-grad-comp-epilogue-only"
)
OPT_IN=" 8_cb_ec_no_lep "
SWEPT=" 3_cb 4_cb_lep 5_cb_lep_ec 7_optimus_cc "  # repeated at every further CB rank
read -ra RANKS <<< "$CB_RANKS"
((REPORT_ONLY)) && SEEDS=""
for seed in $SEEDS; do
  for name in $(printf '%s\n' "${!VARIANTS[@]}" | sort); do
    if [[ -z $ONLY ]]; then [[ $OPT_IN != *" $name "* ]] || continue
    else [[ " $ONLY " == *" $name "* ]] || continue; fi
    flags=${VARIANTS[$name]}
    ranks=("")
    if [[ $flags == *@R* ]]; then
      ranks=("${RANKS[0]}")
      [[ -n $ONLY || $SWEPT == *" $name "* ]] && ranks=("${RANKS[@]}")
    fi
    for r in "${ranks[@]}"; do
      run=$name${r:+_r$r}_s$seed
      echo "== $run: ${flags//@R/$r}"
      rm -f "$OUT/$run.jsonl"
      # shellcheck disable=SC2086
      mpirun -np 4 --oversubscribe build/optimus-cc train "${MODEL[@]}" --seed "$seed" ${flags//@R/$r} \
        --metrics "$OUT/$run.jsonl" | grep -E "validation loss|traffic" || true
    done
  done
done
/usr/bin/python3 scripts/quality_report.py "$OUT"
