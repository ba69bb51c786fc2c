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
# there, each compared with the baseline of the same seed (--report-only: no new runs).
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
bash scripts/setup.sh > /dev/null
mkdir -p "$OUT"
DATA=$OUT/data
[[ -f $DATA/kjv.idx ]] || { mkdir -p "$DATA"; build/optimus-cc preprocess --input data/kjv.txt.zst --output-prefix "$DATA/kjv" --vocab-size 4096; }
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 6 --hidden-size 256
  --num-attention-heads 8 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 4 --global-batch-size 32
  --train-iters "$ITERS" --lr 1e-3 --min-lr 1e-4 --lr-warmup-fraction 0.05 --weight-decay 0.1 --clip-grad 1.0
  --hidden-dropout 0.1 --attention-dropout 0.1 --eval-interval "$EVAL" --eval-iters 8 --log-interval 1000
  --pipeline-model-parallel-size 2)
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
/usr/bin/python3 - "$OUT" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
LABEL = {"1_baseline": "baseline", "2_dp_powersgd": "DP-only PowerSGD", "3_cb": "CB (no LEP)", "4_cb_lep": "CB + LEP",
         "5_cb_lep_ec": "CB + LEP + EC", "6_cb_lep_ec_fe": "+ FE", "7_optimus_cc": "+ SC (full Optimus-CC)",
         "8_cb_ec_no_lep": "(diagnostic) CB + EC, no LEP"}
runs = {}  # (variant, cb rank or 0) -> seed -> summary
for path in sorted(glob.glob(f"{out}/[0-9]_*_s*.jsonl")):
    m = re.fullmatch(r"(\d_[a-z_]+?)(?:_r(\d+))?_s(\d+)\.jsonl", os.path.basename(path))
    if not m:
        continue
    rows = [json.loads(l) for l in open(path)]
    val = [(r["iter"], r["val_loss"]) for r in rows if "val_loss" in r]
    if not val:
        continue
    tail = rows[len(rows) // 5:]
    bytes_ = {k: statistics.mean(r["bytes"].get(k, 0) for r in tail) for k in ("pp_fwd", "pp_bwd", "dp", "emb")}
    lep = [r["lep_check"] for r in tail if "lep_check" in r]
    lep_means = {k: statistics.mean(c[k] for c in lep) for k in ("cosine", "error_ratio", "delta_ratio") if lep and k in lep[0]}
    runs.setdefault((m.group(1), int(m.group(2) or 0)), {})[int(m.group(3))] = {
        "val_curve": val, "final_val_loss": val[-1][1], "final_train_loss": statistics.mean(r["loss"] for r in rows[-10:]),
        "ms_per_iter_median": statistics.median(r["ms"] for r in rows[2:]), "bytes_per_iter": bytes_,
        **({"lep_check_mean": lep_means} if lep_means else {})}
base = runs.get(("1_baseline", 0), {})
res = {}
for (name, rank) in sorted(runs):
    seeds = runs[(name, rank)]
    rel = {s: 100 * (r["final_val_loss"] - base[s]["final_val_loss"]) / base[s]["final_val_loss"] for s, r in seeds.items() if s in base}
    res[name + (f"_r{rank}" if rank else "")] = {
        "variant": name, "cb_rank": rank or None, "seeds": sorted(seeds),
        "mean_vs_baseline_pct": statistics.mean(rel.values()) if rel else None,
        "per_seed": {str(s): {**r, "vs_baseline_pct": rel.get(s)} for s, r in seeds.items()}}
json.dump(res, open(f"{out}/quality.json", "w"), indent=1)
iters = max((it for r in res.values() for p in r["per_seed"].values() for it, _ in p["val_curve"]), default=0)
lines = [f"Optimus-CC quality ablation: 5.8 M-parameter GPT (6 layers, hidden 256, seq 128), P2 D2 on 4 ranks, "
         f"{iters} iterations, global batch 32, the same tokens for every variant; final validation loss, each run "
         f"against the baseline of the same seed; bytes per iteration summed over ranks; LEP ratios: means of "
         f"--check-lep over the last 80 % of iterations.", "",
         "| variant | CB rank | final val loss per seed (vs same-seed baseline) | mean vs baseline | pp_bwd B/iter | dp B/iter | emb B/iter | ms/iter | LEP residual / gradient | activation change / activation |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for key, r in res.items():
    ps = r["per_seed"]
    first = ps[str(r["seeds"][0])]
    b = first["bytes_per_iter"]
    per = ", ".join(f"s{s}: {p['final_val_loss']:.4f}" + (f" ({p['vs_baseline_pct']:+.2f}%)" if p["vs_baseline_pct"] is not None else "")
                    for s, p in sorted(ps.items()))
    mean = "n/a" if r["mean_vs_baseline_pct"] is None else f"{r['mean_vs_baseline_pct']:+.2f}%"
    lc = first.get("lep_check_mean", {})
    lep_cells = f"{lc['error_ratio']:.2f} | {lc['delta_ratio']:.2f}" if "error_ratio" in lc else " | "
    lines.append(f"| {LABEL.get(r['variant'], r['variant'])} | {r['cb_rank'] or '-'} | {per} | {mean} | {b['pp_bwd']:.0f} | "
                 f"{b['dp']:.0f} | {b['emb']:.0f} | {first['ms_per_iter_median']:.0f} | {lep_cells} |")
open(f"{out}/quality.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
ranks = sorted({r["cb_rank"] for r in res.values() if r["cb_rank"]})
fig, axes = plt.subplots(1, 2, figsize=(14, 5), sharey=True)
def curve(ax, key, **kw):
    r = res[key]
    s = r["seeds"][0]
    it, v = zip(*r["per_seed"][str(s)]["val_curve"])
    ax.plot(it, v, marker="o", markersize=3, **kw)
for key, r in res.items():  # left: the ablation at the first CB rank
    if r["cb_rank"] in (None, ranks[0] if ranks else None):
        curve(axes[0], key, label=LABEL.get(r["variant"], r["variant"]) + (f" (r{r['cb_rank']})" if r["cb_rank"] else ""))
axes[0].set_title(f"Optimus-CC ablation, P2 D2, KJV (CB rank {ranks[0] if ranks else '-'}, seed {min(base) if base else '-'})")
styles = ["-", "--", ":", "-."]
for key, r in res.items():  # right: how the CB variants move with the rank
    if r["variant"] == "1_baseline":
        curve(axes[1], key, label="baseline", color="black")
    elif r["variant"] in ("3_cb", "4_cb_lep", "7_optimus_cc") and r["cb_rank"]:
        color = {"3_cb": "tab:orange", "4_cb_lep": "tab:red", "7_optimus_cc": "tab:blue"}[r["variant"]]
        curve(axes[1], key, label=f"{LABEL[r['variant']]} r{r['cb_rank']}", color=color,
              linestyle=styles[ranks.index(r["cb_rank"]) % len(styles)])
axes[1].set_title("CB rank sweep")
for ax in axes:
    ax.set_xlabel("iteration"); ax.grid(alpha=0.3); ax.legend(fontsize=8)
axes[0].set_ylabel("validation loss")
plt.savefig(f"{out}/quality.png", dpi=120, bbox_inches="tight")
print(f"wrote {out}/quality.json, quality.md, quality.png")
PY
