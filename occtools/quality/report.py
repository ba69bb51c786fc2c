"""The quality ablation's report from the runs in OUT: OUT/quality.json, OUT/quality.md and
OUT/quality.png. Every run OUT/NAME[_rCBRANK]_sSEED.jsonl is compared with the baseline of the
same seed (OUT/1_baseline_sSEED.jsonl); bytes and LEP ratios are means over the last 80 % of
iterations. (The paper-regime experiment has its own report: occtools/regime/report.py.)"""

import glob
import json
import os
import re
import statistics

from occtools.common import metrics, plots
from occtools.common.tables import table

LABEL = {"1_baseline": "baseline", "2_dp_powersgd": "DP-only PowerSGD", "3_cb": "CB (no LEP)", "4_cb_lep": "CB + LEP",
         "5_cb_lep_ec": "CB + LEP + EC", "6_cb_lep_ec_fe": "+ FE", "7_optimus_cc": "+ SC (full Optimus-CC)",
         "8_cb_ec_no_lep": "(diagnostic) CB + EC, no LEP"}


def summarize_run(rows):
    tail = metrics.last_80_percent(rows)
    lep = [r["lep_check"] for r in tail if "lep_check" in r]
    lep_means = {k: statistics.mean(c[k] for c in lep) for k in ("cosine", "error_ratio", "delta_ratio")
                 if lep and k in lep[0]}
    val = metrics.val_curve(rows)
    return {"val_curve": val, "final_val_loss": val[-1][1],
            "final_train_loss": statistics.mean(r["loss"] for r in rows[-10:]),
            "ms_per_iter_median": statistics.median(r["ms"] for r in rows[2:]),
            "bytes_per_iter": metrics.mean_bytes(tail), **({"lep_check_mean": lep_means} if lep_means else {})}


def summarize(out):
    """{variant[_rRANK]: its seeds against their baselines} of the runs in OUT."""
    runs = {}  # (variant, cb rank or 0) -> seed -> summary
    for path in sorted(glob.glob(f"{out}/[0-9]_*_s*.jsonl")):
        m = re.fullmatch(r"(\d_[a-z_]+?)(?:_r(\d+))?_s(\d+)\.jsonl", os.path.basename(path))
        rows = metrics.read_run(path) if m else None
        if not rows or not metrics.val_curve(rows):
            continue
        runs.setdefault((m.group(1), int(m.group(2) or 0)), {})[int(m.group(3))] = summarize_run(rows)
    base = runs.get(("1_baseline", 0), {})
    res = {}
    for (name, rank) in sorted(runs):
        seeds = runs[(name, rank)]
        rel = {s: metrics.pct_vs(r["final_val_loss"], base[s]["final_val_loss"]) for s, r in seeds.items() if s in base}
        res[name + (f"_r{rank}" if rank else "")] = {
            "variant": name, "cb_rank": rank or None, "seeds": sorted(seeds),
            "mean_vs_baseline_pct": statistics.mean(rel.values()) if rel else None,
            "per_seed": {str(s): {**r, "vs_baseline_pct": rel.get(s)} for s, r in seeds.items()}}
    return res


def render(res):
    iters = max((it for r in res.values() for p in r["per_seed"].values() for it, _ in p["val_curve"]), default=0)
    title = (f"Optimus-CC quality ablation: 5.8 M-parameter GPT (6 layers, hidden 256, seq 128), P2 D2 on 4 ranks, "
             f"{iters} iterations, global batch 32, the same tokens for every variant")
    rows = []
    for r in res.values():
        ps = r["per_seed"]
        first = ps[str(r["seeds"][0])]
        b = first["bytes_per_iter"]
        per = ", ".join(f"s{s}: {p['final_val_loss']:.4f}" + (f" ({p['vs_baseline_pct']:+.2f}%)" if p["vs_baseline_pct"]
                                                              is not None else "") for s, p in sorted(ps.items()))
        mean = "n/a" if r["mean_vs_baseline_pct"] is None else f"{r['mean_vs_baseline_pct']:+.2f}%"
        lc = first.get("lep_check_mean", {})
        lep = [f"{lc['error_ratio']:.2f}", f"{lc['delta_ratio']:.2f}"] if "error_ratio" in lc else ["", ""]
        rows.append([LABEL.get(r["variant"], r["variant"]), r["cb_rank"] or "-", per, mean, f"{b['pp_bwd']:.0f}",
                     f"{b['dp']:.0f}", f"{b['emb']:.0f}", f"{first['ms_per_iter_median']:.0f}", *lep])
    lines = [f"{title}; final validation loss, each run against the baseline of the same seed; bytes per iteration "
             f"summed over ranks; LEP ratios: means of --check-lep over the last 80 % of iterations.", ""]
    return lines + table(["variant", "CB rank", "final val loss per seed (vs same-seed baseline)", "mean vs baseline",
                          "pp_bwd B/iter", "dp B/iter", "emb B/iter", "ms/iter", "LEP residual / gradient",
                          "activation change / activation"], rows)


def plot(res, path):
    plt = plots.pyplot()
    if plt is None:
        return False
    ranks = sorted({r["cb_rank"] for r in res.values() if r["cb_rank"]})
    base = res.get("1_baseline", {}).get("seeds", [])
    fig, axes = plt.subplots(1, 2, figsize=(14, 5), sharey=True)

    def curve(ax, key, **kw):
        r = res[key]
        it, v = zip(*r["per_seed"][str(r["seeds"][0])]["val_curve"])
        ax.plot(it, v, marker="o", markersize=3, **kw)
    for key, r in res.items():  # left: the ablation at the first CB rank
        if r["cb_rank"] in (None, ranks[0] if ranks else None):
            curve(axes[0], key, label=LABEL.get(r["variant"], r["variant"]) + (f" (r{r['cb_rank']})" if r["cb_rank"] else ""))
    axes[0].set_title(f"Optimus-CC ablation, P2 D2, KJV (CB rank {ranks[0] if ranks else '-'}, "
                      f"seed {min(base) if base else '-'})")
    styles = ["-", "--", ":", "-."]
    colors = {"3_cb": "tab:orange", "4_cb_lep": "tab:red", "7_optimus_cc": "tab:blue"}
    for key, r in res.items():  # right: how the CB variants move with the rank
        if r["variant"] == "1_baseline":
            curve(axes[1], key, label="baseline", color="black")
        elif r["variant"] in colors and r["cb_rank"]:
            curve(axes[1], key, label=f"{LABEL[r['variant']]} r{r['cb_rank']}", color=colors[r["variant"]],
                  linestyle=styles[ranks.index(r["cb_rank"]) % len(styles)])
    axes[1].set_title("CB rank sweep")
    for ax in axes:
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("validation loss")
    plots.save(fig, path)
    return True


def write(out):
    res = summarize(out)
    with open(f"{out}/quality.json", "w") as f:
        json.dump(res, f, indent=1)
    lines = render(res)
    with open(f"{out}/quality.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    drew = plot(res, f"{out}/quality.png")
    print(f"wrote {out}/quality.json, quality.md" + (", quality.png" if drew else ""))
