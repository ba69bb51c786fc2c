"""Summarises the runs of scripts/experiment-quality.sh in OUT: OUT/quality.json,
OUT/quality.md and OUT/quality.png. (The paper-regime experiment has its own report:
scripts/regime_report.py.)
    python3 quality_report.py OUT

Every run OUT/NAME[_rCBRANK]_sSEED.jsonl is compared with the baseline of the same seed
(OUT/1_baseline_sSEED.jsonl); bytes and LEP ratios are means over the last 80 % of
iterations.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

ap = argparse.ArgumentParser()
ap.add_argument("out")
args = ap.parse_args()
out = args.out
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
title = (f"Optimus-CC quality ablation: 5.8 M-parameter GPT (6 layers, hidden 256, seq 128), P2 D2 on 4 ranks, "
         f"{iters} iterations, global batch 32, the same tokens for every variant")
lines = [f"{title}; final validation loss, each run "
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

try:  # the plot is optional: a GPU machine's Python may lack matplotlib
    import matplotlib  # noqa: E402

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: E402
except ImportError:
    print(f"wrote {out}/quality.json, quality.md (no matplotlib: no quality.png)")
    sys.exit(0)

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
