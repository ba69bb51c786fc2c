"""Summarises a scripts/bench-speedup.sh run: OUT/speedup.json, OUT/speedup.md, OUT/breakdown.png.

Iteration times are pooled over the repetitions after the warm-up iterations (the
first ones pay for page faults and, with DP PowerSGD, run uncompressed).
"""
import glob
import json
import math
import os
import statistics
import sys

out = sys.argv[1]
runs = os.path.join(out, "runs")
bandwidth, latency, nodes, iters, reps, layout = open(os.path.join(runs, "settings")).read().split()
iters = int(iters)
skip = max(3, math.ceil(0.1 * iters) + 1)  # DP PowerSGD warm-up is the first 10 %
ORDER = ["baseline", "dp_powersgd", "cb_lep_ec", "fe", "full", "nocomm"]
LABEL = {"baseline": "Baseline", "dp_powersgd": "DP-only PowerSGD", "cb_lep_ec": "CB+LEP+EC", "fe": "+FE",
         "full": "+SC (Optimus-CC)", "nocomm": "Baseline, unshaped (T_nocomm)"}
PHASES = ["forward", "backward", "pp_wait", "dp_allreduce", "emb_allreduce", "compress", "decompress", "norm_allreduce", "optimizer"]
CLASSES = ["pp_fwd", "pp_bwd", "dp", "emb", "tp", "other"]

res = {}
for v in ORDER:
    files = sorted(glob.glob(os.path.join(runs, f"{v}.r[0-9]*.jsonl")))
    if not files:
        continue
    per_rep = [[json.loads(line) for line in open(f)] for f in files]
    steady = [r for rows in per_rep for r in rows if r["iter"] > skip]
    ms = [r["ms"] for r in steady]
    n_stages = len(steady[0]["stages"])
    stages = []
    for s in range(n_stages):
        t = {p: statistics.mean(r["stages"][s]["timers"].get(p, 0.0) for r in steady) for p in PHASES}
        it = statistics.mean(r["stages"][s]["timers"]["iteration"] for r in steady)
        t["other"] = max(0.0, it - sum(t.values()))
        t["iteration"] = it
        stages.append(t)
    link = []
    for f in sorted(glob.glob(os.path.join(runs, f"{v}.r*.links"))):
        for line in open(f):
            host, tx, rx = line.split()
            link.append(int(tx.split("=")[1]))
    res[v] = {
        "flags": open(os.path.join(runs, f"{v}.flags")).read().strip(),
        "ms_median": statistics.median(ms), "ms_best": min(ms),
        "ms_median_per_rep": [statistics.median(r["ms"] for r in rows if r["iter"] > skip) for rows in per_rep],
        "bytes_per_iter": {c: statistics.mean(r["bytes"].get(c, 0) for r in steady) for c in CLASSES},
        "bytes_saved_per_iter": {c: statistics.mean(r.get("bytes_saved", {}).get(c, 0) for r in steady) for c in CLASSES},
        "link_tx_bytes_per_iter_per_node": statistics.mean(link) / iters if link else None,
        "stages": stages,
        # Training loss of the last 5 iterations (one iteration's loss is one batch: noisy).
        "final_loss": statistics.mean(r["loss"] for rows in per_rep for r in rows[-5:]),
        "loss_curve": [r["loss"] for r in per_rep[0]],
    }

base, nocomm = res["baseline"], res["nocomm"]
exposed = base["ms_median"] - nocomm["ms_median"]
for v, r in res.items():
    r["speedup"] = base["ms_median"] / r["ms_median"]
    r["overhead_removed"] = (base["ms_median"] - r["ms_median"]) / exposed if exposed > 0 else None
    r["loss_vs_baseline"] = (r["final_loss"] - base["final_loss"]) / base["final_loss"]
summary = {"settings": {"bandwidth": bandwidth, "latency": latency, "nodes": int(nodes), "iters": iters,
                        "reps": int(reps), "layout": layout, "warmup_iters_skipped": skip},
           "exposed_communication_ms": exposed, "variants": res}
full, dpo = res.get("full"), res.get("dp_powersgd")
checks = []
if full and dpo:
    checks = [
        ("full Optimus-CC removes >= 70 % of the baseline's exposed communication",
         full["overhead_removed"] is not None and full["overhead_removed"] >= 0.70, f"{100 * (full['overhead_removed'] or 0):.0f} %"),
        ("full Optimus-CC beats DP-only PowerSGD", full["ms_median"] < dpo["ms_median"],
         f"{full['ms_median']:.0f} vs {dpo['ms_median']:.0f} ms"),
        ("full Optimus-CC within 1 % of the baseline's final training loss", abs(full["loss_vs_baseline"]) <= 0.01,
         f"{100 * full['loss_vs_baseline']:+.2f} %"),
    ]
summary["checks"] = [{"check": c, "met": bool(ok), "value": val} for c, ok, val in checks]
json.dump(summary, open(os.path.join(out, "speedup.json"), "w"), indent=1)

mb = lambda b: f"{b / 1e6:.2f}"
lines = [f"Emulated cluster: {nodes} nodes x 1 rank ({layout}), links {bandwidth}, added latency {latency}; "
         f"{iters} iterations x {reps} interleaved repetitions, first {skip} iterations of each run skipped; "
         f"final loss = mean training loss of the last 5 iterations. "
         f"Exposed communication of the baseline (T_base - T_nocomm): {exposed:.0f} ms.", "",
         "| variant | ms/iter median | best | speedup | overhead removed | pp_fwd MB/it | pp_bwd MB/it | dp MB/it | emb MB/it | link MB/it/node | final loss | vs baseline |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for v, r in res.items():
    b = r["bytes_per_iter"]
    removed = "—" if v == "baseline" or r["overhead_removed"] is None else f"{100 * r['overhead_removed']:.0f} %"
    link = "—" if r["link_tx_bytes_per_iter_per_node"] is None else mb(r["link_tx_bytes_per_iter_per_node"])
    lines.append(f"| {LABEL[v]} | {r['ms_median']:.0f} | {r['ms_best']:.0f} | {r['speedup']:.2f}x | {removed} | "
                 f"{mb(b['pp_fwd'])} | {mb(b['pp_bwd'])} | {mb(b['dp'])} | {mb(b['emb'])} | {link} | "
                 f"{r['final_loss']:.4f} | {100 * r['loss_vs_baseline']:+.2f} % |")
lines += ["", "Time per phase (ms per iteration, mean over the stage's ranks; `other` = iteration minus the phases):", "",
          "| variant | stage | " + " | ".join(PHASES) + " | other | iteration |", "|---|---|" + "---|" * (len(PHASES) + 2)]
for v, r in res.items():
    for s, t in enumerate(r["stages"]):
        lines.append(f"| {LABEL[v]} | {s} | " + " | ".join(f"{t[p]:.0f}" for p in PHASES) +
                     f" | {t['other']:.0f} | {t['iteration']:.0f} |")
if checks:
    lines += ["", *[f"- {'met' if ok else 'NOT met'}: {c} ({val})" for c, ok, val in checks]]
text = "\n".join(lines) + "\n"
open(os.path.join(out, "speedup.md"), "w").write(text)
print(text)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

n_stages = len(base["stages"])
fig, axes = plt.subplots(1, n_stages, figsize=(6 * n_stages, 5), sharey=True)
axes = [axes] if n_stages == 1 else axes
colors = plt.cm.tab10.colors
for s, ax in enumerate(axes):
    bottom = [0.0] * len(res)
    for i, p in enumerate(PHASES + ["other"]):
        vals = [r["stages"][s][p] for r in res.values()]
        ax.bar(range(len(res)), vals, bottom=bottom, label=p, color=colors[i % len(colors)])
        bottom = [a + b for a, b in zip(bottom, vals)]
    ax.set_xticks(range(len(res)))
    ax.set_xticklabels([LABEL[v].replace(" (", "\n(").replace(", ", ",\n") for v in res], fontsize=8,
                       rotation=35, ha="right")
    ax.set_title(f"stage {s}")
    ax.grid(axis="y", alpha=0.3)
axes[0].set_ylabel("ms per iteration")
handles, labels = axes[0].get_legend_handles_labels()
fig.legend(handles[::-1], labels[::-1], fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
fig.suptitle(f"Iteration time by phase, emulated cluster ({bandwidth} links)")
fig.savefig(os.path.join(out, "breakdown.png"), dpi=110, bbox_inches="tight")
print(f"wrote {out}/speedup.json, speedup.md, breakdown.png, traces/*.json")
