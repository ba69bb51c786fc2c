#!/usr/bin/env bash
# A short probe of error feedback on DiLoCo's outer gradients (issue 50 item 5;
# docs/diloco.md, "Error feedback on the outer gradients"): per seed, DiLoCo D2 H 8
# uncompressed, with topk2 outer gradients (density 0.02) and with topk2 + EF, on the
# same tokens; prints each run's final validation loss, the change against the same
# seed's uncompressed DiLoCo, and the dp bytes per rank per outer sync.
#   bash bench/diloco_outer_ef.sh BIN DATA_PREFIX TOKENIZER_MODEL OUT_DIR [SEEDS] [ITERS]
# (e.g. build/optimus-cc build/test-data/kjv build/test-data/kjv.model /tmp/ef "1 2 3" 96).
# Run it under nice on a shared machine; it needs mpirun and 2 ranks.
set -euo pipefail
BIN=$1 DATA=$2 TOK=$3 OUT=$4 SEEDS=${5:-"1 2 3"} ITERS=${6:-96}
DENSITY=${DENSITY:-0.02}
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
MODEL=(--data-path "$DATA" --tokenizer-model "$TOK" --num-layers 4 --hidden-size 128 --num-attention-heads 4
       --seq-length 64 --max-position-embeddings 64 --micro-batch-size 4 --global-batch-size 16
       --train-iters "$ITERS" --eval-iters 8 --eval-interval 100000 --log-interval 8 --lr 1e-3
       --diloco-inner-steps 8)
declare -A VARIANT=([none]="" [topk2]="--diloco-outer-comp-method topk2 --diloco-outer-comp-topk-density $DENSITY"
                    [topk2_ef]="--diloco-outer-comp-method topk2 --diloco-outer-comp-topk-density $DENSITY --diloco-outer-comp-error-feedback")
for seed in $SEEDS; do
  for v in none topk2 topk2_ef; do
    [[ -s $OUT/${v}_s$seed.jsonl ]] && continue  # a rerun continues where it stopped
    # shellcheck disable=SC2086
    mpirun --oversubscribe -np 2 "$BIN" train "${MODEL[@]}" --seed "$seed" ${VARIANT[$v]} \
      --metrics "$OUT/${v}_s$seed.jsonl" > "$OUT/${v}_s$seed.log" 2>&1
  done
done
/usr/bin/python3 - "$OUT" "$SEEDS" <<'PY'
import json, re, sys
out, seeds = sys.argv[1], sys.argv[2].split()
def val(v, s):  # the final validation loss, from the log
    return float(re.findall(r"validation loss at iter \d+: ([0-9.]+)", open(f"{out}/{v}_s{s}.log").read())[-1])
def per_sync(v, s):  # dp bytes of rank 0 in the iterations where a sync landed
    rows = [json.loads(l) for l in open(f"{out}/{v}_s{s}.jsonl")]
    b = [r["ranks"][0]["bytes"].get("dp", 0) for r in rows if "ranks" in r]
    b = [x for x in b if x]
    return sum(b) / len(b), len(b)
print("| seed | DiLoCo fp32 | topk2 | topk2 + EF | topk2 vs fp32 | topk2 + EF vs fp32 |")
print("|---|---|---|---|---|---|")
d = {"topk2": [], "topk2_ef": []}
for s in seeds:
    base = val("none", s)
    row = [f"{val(v, s):.4f}" for v in ("none", "topk2", "topk2_ef")]
    for v in d:
        d[v].append(100 * (val(v, s) / base - 1))
    print(f"| {s} | " + " | ".join(row) + f" | {d['topk2'][-1]:+.2f} % | {d['topk2_ef'][-1]:+.2f} % |")
mean = {v: sum(x) / len(x) for v, x in d.items()}
print(f"| mean | | | | {mean['topk2']:+.2f} % | {mean['topk2_ef']:+.2f} % |")
for v in ("none", "topk2", "topk2_ef"):
    b, n = per_sync(v, seeds[0])
    print(f"{v}: {b:.0f} dp bytes per rank per outer sync ({n} syncs)")
PY
