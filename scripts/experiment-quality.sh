#!/usr/bin/env bash
# The Optimus-CC quality ablation on the bundled corpus: a ~5.8 M-parameter GPT
# (6 layers, hidden 256, 8 heads, seq 64) on 4 ranks (pipeline 2 x data 2),
# the same tokens for every variant:
#   baseline | DP-only PowerSGD | CB without LEP | CB+LEP | CB+LEP+EC | +FE | +SC (full Optimus-CC)
# Writes OUT/quality.json, OUT/quality.md (final validation loss, bytes per
# iteration per class, ms per iteration) and OUT/quality.png (validation curves).
#   bash scripts/experiment-quality.sh [--iters N] [--quick] [--out DIR]   (CB_RANK=r: CB rank, default 32)
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=300 EVAL=25 OUT=bench-results/quality
while (($#)); do
  case $1 in
    --iters) ITERS=$2; shift 2;;
    --quick) ITERS=60; EVAL=10; shift;;
    --out) OUT=$2; shift 2;;
    *) echo "error: unknown flag $1 (use --iters N, --quick, --out DIR)"; exit 2;;
  esac
done
bash scripts/setup.sh > /dev/null
mkdir -p "$OUT"
DATA=$OUT/data
[[ -f $DATA/kjv.idx ]] || { mkdir -p "$DATA"; build/optimus-cc preprocess --input data/kjv.txt.zst --output-prefix "$DATA/kjv" --vocab-size 4096; }
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 6 --hidden-size 256
  --num-attention-heads 8 --seq-length 64 --max-position-embeddings 64 --micro-batch-size 4 --global-batch-size 16
  --train-iters "$ITERS" --lr 1e-3 --min-lr 1e-4 --lr-warmup-fraction 0.05 --weight-decay 0.1 --clip-grad 1.0
  --hidden-dropout 0.1 --attention-dropout 0.1 --eval-interval "$EVAL" --eval-iters 8 --log-interval 1000
  --pipeline-model-parallel-size 2 --seed 1234)
CB=(--inter-grad-comp --inter-grad-comp-rank "${CB_RANK:-32}")
DPC=(--grad-comp --grad-comp-rank 16 --grad-comp-warm-up 0.1)
declare -A VARIANTS=(
  [1_baseline]=""
  [2_dp_powersgd]="${DPC[*]} --use-error-feedback"
  [3_cb]="${CB[*]}"
  [4_cb_lep]="${CB[*]} --use-error-feedback --check-lep"
  [5_cb_lep_ec]="${CB[*]} --use-error-feedback --inter-grad-comp-epilogue-only"
  [6_cb_lep_ec_fe]="${CB[*]} --use-error-feedback --inter-grad-comp-epilogue-only --emb-comm-opt"
  [7_optimus_cc]="${CB[*]} --use-error-feedback --inter-grad-comp-epilogue-only --emb-comm-opt ${DPC[*]} --selective-grad-comp-way 1"
)
for name in $(printf '%s\n' "${!VARIANTS[@]}" | sort); do
  echo "== $name: ${VARIANTS[$name]:-(no compression)}"
  rm -f "$OUT/$name.jsonl"
  # shellcheck disable=SC2086
  mpirun -np 4 --oversubscribe build/optimus-cc train "${MODEL[@]}" ${VARIANTS[$name]} --metrics "$OUT/$name.jsonl" \
    | grep -E "validation loss|traffic" || true
done
/usr/bin/python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
res = {}
for path in sorted(glob.glob(f"{out}/[0-9]_*.jsonl")):
    name = os.path.basename(path)[:-6]
    rows = [json.loads(l) for l in open(path)]
    val = [(r["iter"], r["val_loss"]) for r in rows if "val_loss" in r]
    bytes_ = {k: statistics.mean(r["bytes"].get(k, 0) for r in rows[len(rows) // 5:]) for k in ("pp_fwd", "pp_bwd", "dp", "emb")}
    res[name] = {"val_curve": val, "final_val_loss": val[-1][1], "final_train_loss": statistics.mean(r["loss"] for r in rows[-10:]),
                 "ms_per_iter_median": statistics.median(r["ms"] for r in rows[2:]), "bytes_per_iter": bytes_}
json.dump(res, open(f"{out}/quality.json", "w"), indent=1)
base = res["1_baseline"]["final_val_loss"]
lines = ["| variant | final val loss | vs baseline | pp_bwd B/iter | dp B/iter | emb B/iter | ms/iter |", "|---|---|---|---|---|---|---|"]
for name, r in res.items():
    b = r["bytes_per_iter"]
    lines.append(f"| {name[2:]} | {r['final_val_loss']:.4f} | {100 * (r['final_val_loss'] - base) / base:+.2f}% | "
                 f"{b['pp_bwd']:.0f} | {b['dp']:.0f} | {b['emb']:.0f} | {r['ms_per_iter_median']:.0f} |")
open(f"{out}/quality.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
plt.figure(figsize=(8, 5))
for name, r in res.items():
    it, v = zip(*r["val_curve"])
    plt.plot(it, v, label=name[2:], marker="o", markersize=3)
plt.xlabel("iteration"); plt.ylabel("validation loss"); plt.title("Optimus-CC ablation, P2 D2, KJV")
plt.legend(); plt.grid(alpha=0.3)
plt.savefig(f"{out}/quality.png", dpi=120, bbox_inches="tight")
print(f"wrote {out}/quality.json, quality.md, quality.png")
PY
