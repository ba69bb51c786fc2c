#!/usr/bin/env bash
# Validates `optimus-cc plan` against measured runs: calibrates on DIR/baseline.jsonl
# and predicts every other DIR/VARIANT.jsonl from its DIR/VARIANT.flags (one line of
# the train flags that run used), then prints predicted vs measured ms per iteration.
#   bash scripts/validate-planner.sh DIR [--generate] [--iters N] [--rounds R] [-- extra plan flags]
# --generate first writes DIR/{baseline,dp_powersgd,cb_lep_ec,fe,full}.{jsonl,flags}
# from small local runs (mpirun -np 4 on this machine, T1 P2 D2, 4 layers, hidden 128):
# R rounds of N iterations per variant, variants interleaved, so that the load of a
# shared machine drifts over all of them alike (rows of the rounds are appended).
# A variant named nocomm is predicted with --no-comm (communication free).
# Measured = median ms of the rows after warm-up (the first iteration of every run,
# and any DP-compression warm-up iterations), as the calibration does.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:?usage: bash scripts/validate-planner.sh DIR [--generate] [--iters N] [-- extra plan flags]}
shift
GENERATE=0 ITERS=6 ROUNDS=3 EXTRA=()
while (($#)); do
  case $1 in
    --generate) GENERATE=1; shift;;
    --iters) ITERS=$2; shift 2;;
    --rounds) ROUNDS=$2; shift 2;;
    --) shift; EXTRA=("$@"); break;;
    *) echo "unknown flag $1" >&2; exit 2;;
  esac
done
BIN=${OCC_BIN:-build/optimus-cc}
[[ -x $BIN ]] || { echo "error: $BIN not built; run bash scripts/setup.sh" >&2; exit 1; }

if ((GENERATE)); then
  mkdir -p "$DIR"
  DATA=bench-results/data
  [[ -f $DATA/kjv.idx ]] || { mkdir -p "$DATA"; "$BIN" preprocess --input data/kjv.txt.zst --output-prefix "$DATA/kjv" --vocab-size 4096 > /dev/null; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
  BASE="--data-path $DATA/kjv --tokenizer-model $DATA/kjv.model --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 4 --global-batch-size 32 --train-iters $ITERS --eval-iters 0 --eval-interval 100000 --log-interval 1000 --hidden-dropout 0 --attention-dropout 0 --pipeline-model-parallel-size 2"
  source scripts/speedup_variants.sh
  speedup_variants 2
  LOCAL=(baseline dp_powersgd cb_lep_ec fe full)  # nocomm needs shaped links to differ from baseline
  for v in "${LOCAL[@]}"; do
    echo "$BASE ${FLAGS[$v]}" > "$DIR/$v.flags"
    rm -f "$DIR/$v.jsonl"
  done
  for ((round = 1; round <= ROUNDS; round++)); do
    for v in "${LOCAL[@]}"; do
      # shellcheck disable=SC2046
      mpirun -np 4 --oversubscribe "$BIN" train $(cat "$DIR/$v.flags") --metrics "$DIR/$v.jsonl" > "$DIR/$v.log" 2>&1
    done
    echo "round $round done"
  done
fi

[[ -f $DIR/baseline.jsonl && -f $DIR/baseline.flags ]] || { echo "error: $DIR/baseline.jsonl and baseline.flags are needed" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for f in "$DIR"/*.jsonl; do
  v=$(basename "$f" .jsonl)
  [[ -f $DIR/$v.flags ]] || { echo "skip $v: no $v.flags"; continue; }
  extra=()
  [[ $v == nocomm ]] && extra=(--no-comm)
  # shellcheck disable=SC2046
  "$BIN" plan --ignore-unknown-flags --calibrate "$DIR/baseline.jsonl" --calibrated-run-flags "$(cat "$DIR/baseline.flags")" \
    $(cat "$DIR/$v.flags") "${extra[@]}" "${EXTRA[@]}" --json "$OUT/$v.json" > "$OUT/$v.txt"
  [[ $v == baseline ]] && { echo "== calibration (baseline)"; grep -E "^(calibrated|  stage|  achieved|  inter|  main|  intra)" "$OUT/$v.txt"; }
done
/usr/bin/python3 - "$DIR" "$OUT" <<'PY'
import json, os, re, statistics, sys
d, out = sys.argv[1], sys.argv[2]
rows = []
for name in sorted(os.listdir(out)):
    if not name.endswith(".json"): continue
    v = name[:-5]
    pred = json.load(open(os.path.join(out, name)))
    flags = open(os.path.join(d, v + ".flags")).read()
    its = [json.loads(l) for l in open(os.path.join(d, v + ".jsonl")) if l.strip()]
    warm = re.search(r"--grad-comp-warm-up\s+([0-9.eE+-]+)", flags)
    total = re.search(r"--train-iters\s+(\d+)", flags)
    first = 0
    if warm and "--grad-comp" in flags.split():
        first = float(warm.group(1)) * (int(total.group(1)) if total else its[-1]["iter"])
    ms = [r["ms"] for r in its if r["iter"] > max(1, first)] or [r["ms"] for r in its]
    meas = statistics.median(ms)
    rows.append((v, pred["iteration_ms"], meas, pred["compression"], len(ms)))
order = {"baseline": 0}
rows.sort(key=lambda r: (order.get(r[0], 1), r[0]))
print("| variant | compression | predicted ms | measured ms (median) | error | rows |")
print("|---|---|---|---|---|---|")
worst = 0
for v, p, m, c, n in rows:
    e = (p - m) / m * 100
    if v != "baseline": worst = max(worst, abs(e))
    print(f"| {v} | {c} | {p:.1f} | {m:.1f} | {e:+.1f} % | {n} |")
print(f"largest error over the predicted variants: {worst:.1f} %")
PY
