#!/usr/bin/env bash
# LEP's premise against the CB message's shape, on the CPU (issue 15). The paper-regime
# quality experiment needs a GPU; this measures, as far as two CPU cores reach, whether the
# residual that lazy error propagation carries shrinks next to the gradient it joins
# (--check-lep's error_ratio, paper Fig. 11) as the CB message grows from our CPU
# experiments' 512 x 256 towards the paper's 8192 x 1024 (micro-batch 8 x seq 1024 rows,
# hidden 1024). Every shape gets the same depth (2 layers, P2, one DP replica), the same 2
# micro-batches per iteration, CB rank 16 (the paper's; --cb-rank) with LEP, the same optimizer,
# corpus, seed and number of iterations; only hidden (heads = hidden / 64), seq and
# micro-batch change. Short runs: the ratios are compared across shapes at equal iterations,
# after a start-up transient whose size and length depend on the shape (hence the peak and
# the per-iteration values in the report), not at the end of a long run.
#   bash scripts/experiment-lep-shapes.sh [--iters N (default 100)] [--out DIR]
#        [--shapes "HIDDEN:SEQ:MB ..." (default "256:128:4 512:256:8 1024:1024:8")]
#        [--seeds "S1 S2 .." (default 1)] [--cb-rank R (default 16)] [--bin PATH] [--smoke] [--report-only]
# On two cores the defaults take about an hour and a quarter, most of it the 8192 x 1024 run
# (about 33 s per iteration). --smoke: 3 iterations of two tiny shapes, the plumbing only
# (cli.lep_shapes).
# Writes OUT/lep-shapes.{json,md}: per shape and seed, the means of error_ratio, delta_ratio
# and cosine over the last quarter of the iterations, error_ratio's peak (the transient) and
# its iteration, CB's bytes, ms per iteration and the last loss, then error_ratio and
# delta_ratio per iteration; the runs' logs and metrics stay in OUT.
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
ITERS=100 OUT=bench-results/lep-shapes SHAPES="256:128:4 512:256:8 1024:1024:8" SEEDS=1 RANK=16 BIN="" SMOKE=0 REPORT_ONLY=0
while (($#)); do
  case $1 in
    --iters) ITERS=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --shapes) SHAPES=${2:?}; shift 2 ;;
    --seeds) SEEDS=${2:?}; shift 2 ;;
    --cb-rank) RANK=${2:?}; shift 2 ;;
    --bin) BIN=${2:?}; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    --report-only) REPORT_ONLY=1; shift ;;
    *) echo "error: unknown flag $1 (use --iters N, --out DIR, --shapes \"H:S:MB ..\", --seeds LIST, --cb-rank R, --bin PATH, --smoke, --report-only)" >&2; exit 2 ;;
  esac
done
[[ $ITERS =~ ^[0-9]+$ && $ITERS -ge 3 ]] || { echo "error: --iters $ITERS: use a whole number >= 3" >&2; exit 2; }
[[ $RANK =~ ^[0-9]+$ && $RANK -ge 1 ]] || { echo "error: --cb-rank $RANK: use a whole number >= 1" >&2; exit 2; }
for s in $SHAPES; do
  [[ $s =~ ^([0-9]+):([0-9]+):([0-9]+)$ && $((${s%%:*} % 64)) -eq 0 && ${s%%:*} -ge 64 ]] ||
    { echo "error: --shapes entry '$s': use HIDDEN:SEQ:MB with HIDDEN a multiple of 64 (heads = HIDDEN / 64)" >&2; exit 2; }
done
if ((SMOKE)); then ITERS=3 SHAPES="64:32:2 128:64:2"; fi
BIN=${BIN:-$HERE/build/optimus-cc}
PY=/usr/bin/python3
mkdir -p "$OUT" || exit 1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

DATA=$OUT/data/kjv
if ((!REPORT_ONLY)); then
  [[ -x $BIN ]] || { echo "error: $BIN is not built; run scripts/setup.sh or pass --bin PATH" >&2; exit 1; }
  if [[ ! -f $DATA.idx ]]; then  # the quality experiments' corpus and tokenizer (scripts/quality_model.sh)
    mkdir -p "$OUT/data" && "$BIN" preprocess --input "$HERE/data/kjv.txt.zst" --output-prefix "$DATA" --vocab-size 4096 ||
      exit 1
  fi
  for seed in $SEEDS; do
    for s in $SHAPES; do
      IFS=: read -r hidden seq mb <<< "$s"
      run=h${hidden}_s${seq}_mb${mb}_seed$seed
      ((RANK == 16)) || run=h${hidden}_s${seq}_mb${mb}_r${RANK}_seed$seed
      [[ -s $OUT/$run.jsonl && $(wc -l < "$OUT/$run.jsonl") -eq $ITERS ]] && { echo "lep-shapes: $run already done"; continue; }
      rm -f "$OUT/$run.jsonl"
      echo "lep-shapes: $run ($ITERS iterations; message $((seq * mb)) x $hidden, CB rank $RANK)"
      if ! mpirun --oversubscribe -np 2 "$BIN" train --data-path "$DATA" --tokenizer-model "$DATA.model" \
          --num-layers 2 --hidden-size "$hidden" --num-attention-heads $((hidden / 64)) --seq-length "$seq" \
          --max-position-embeddings "$seq" --micro-batch-size "$mb" --global-batch-size $((2 * mb)) \
          --pipeline-model-parallel-size 2 --train-iters "$ITERS" --seed "$seed" \
          --lr 6e-4 --min-lr 6e-5 --lr-warmup-fraction 0.05 --weight-decay 0.1 --clip-grad 1.0 \
          --hidden-dropout 0.1 --attention-dropout 0.1 --eval-interval $((ITERS + 1)) --eval-iters 1 --log-interval 5 \
          --inter-grad-comp --inter-grad-comp-rank "$RANK" --use-error-feedback --check-lep \
          --metrics "$OUT/$run.jsonl" > "$OUT/$run.log" 2>&1; then
        tail -n 5 "$OUT/$run.log"
        echo "error: run $run failed (log: $OUT/$run.log)" >&2
        exit 1
      fi
    done
  done
fi

"$PY" - "$OUT" << 'PYEOF'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
rows = []
for path in sorted(glob.glob(f"{out}/h*_s*_mb*_seed*.jsonl")):
    h, s, mb, rank, seed = re.search(r"h(\d+)_s(\d+)_mb(\d+)(?:_r(\d+))?_seed(\d+)\.jsonl$", path).groups()
    h, s, mb, rank, seed = int(h), int(s), int(mb), int(rank or 16), int(seed)
    recs = [json.loads(line) for line in open(path)]
    lep = [(r["iter"], r["lep_check"]) for r in recs if "lep_check" in r]
    if not lep:
        sys.exit(f"error: {path} has no lep_check rows (was --check-lep on?)")
    tail = [c for _, c in lep[-max(1, len(lep) // 4):]]  # the last quarter: past the start-up transient
    peak_iter, peak = max(((i, c["error_ratio"]) for i, c in lep), key=lambda p: p[1])
    mean = lambda xs, k: statistics.fmean(x[k] for x in xs)
    rows.append({"hidden": h, "seq": s, "micro_batch": mb, "cb_rank": rank, "seed": seed, "message": f"{s * mb} x {h}",
                 "message_floats": s * mb * h, "iterations": len(recs), "averaged_from_iter": lep[-len(tail)][0],
                 "error_ratio": mean(tail, "error_ratio"), "error_ratio_peak": peak, "error_ratio_peak_iter": peak_iter,
                 "delta_ratio": mean(tail, "delta_ratio"), "cosine": mean(tail, "cosine"),
                 "error_ratio_per_iter": [round(c["error_ratio"], 4) for _, c in lep],
                 "delta_ratio_per_iter": [round(c["delta_ratio"], 4) for _, c in lep],
                 "ms_per_iter_median": statistics.median(r["ms"] for r in recs[1:] or recs),
                 "pp_bwd_bytes_per_iter": recs[-1]["bytes"]["pp_bwd"],
                 "pp_bwd_bytes_saved_per_iter": recs[-1].get("bytes_saved", {}).get("pp_bwd", 0),
                 "last_loss": recs[-1]["loss"]})
if not rows:
    sys.exit(f"error: no runs in {out}")
rows.sort(key=lambda r: (r["message_floats"], r["cb_rank"], r["seed"]))
json.dump(rows, open(f"{out}/lep-shapes.json", "w"), indent=1)
lines = ["LEP's premise against the CB message's shape (scripts/experiment-lep-shapes.sh, CPU): 2 layers, P2, "
         "one DP replica, 2 micro-batches per iteration, CB (PowerSGD at the rank shown) with LEP, --check-lep on the backward link; "
         "the same optimizer, corpus (KJV, 4096-token SentencePiece) and iterations for every shape. "
         "error_ratio = |LEP residual| / |gradient it joins|; delta_ratio = |input change between consecutive "
         "micro-batches| / |input|; cosine = residual vs input change. Means over the last quarter of the iterations; "
         "the peak is error_ratio's start-up transient.",
         "",
         "| message (rows x hidden) | hidden | seq | micro-batch | CB rank | seed | iterations | error_ratio (mean) | "
         "error_ratio peak (iteration) | delta_ratio (mean) | cosine (mean) | CB bytes/iter (saved) | ms/iter | last loss |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
for r in rows:
    lines.append(f"| {r['message']} | {r['hidden']} | {r['seq']} | {r['micro_batch']} | {r['cb_rank']} | {r['seed']} | {r['iterations']} | "
                 f"{r['error_ratio']:.2f} | {r['error_ratio_peak']:.2f} ({r['error_ratio_peak_iter']}) | {r['delta_ratio']:.2f} | {r['cosine']:+.4f} | "
                 f"{r['pp_bwd_bytes_per_iter']} ({r['pp_bwd_bytes_saved_per_iter']}) | "
                 f"{r['ms_per_iter_median']:.0f} | {r['last_loss']:.4f} |")
for key in ("error_ratio", "delta_ratio"):
    lines += ["", f"{key} per iteration:", ""]
    for r in rows:
        lines.append(f"- {r['message']} rank {r['cb_rank']} seed {r['seed']}: " + " ".join(f"{x:.2f}" for x in r[f"{key}_per_iter"]))
open(f"{out}/lep-shapes.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines[2:3 + len(rows) + 1]))
PYEOF
