"""Summarises a scripts/bench-speedup.sh run: OUT/speedup.json, OUT/speedup.md, OUT/breakdown.png.

Iteration times are pooled over the repetitions after the warm-up iterations (the
first ones pay for page faults and, with DP PowerSGD, run uncompressed).

Each variant's median ms/iter gets a 95 % confidence interval from a hierarchical
bootstrap: resample the repetitions, then the iterations within each chosen one. Both
levels vary (a repetition can land in a slow phase of the shared machine, and
iterations scatter within one), so resampling only the pooled iterations would
understate the uncertainty. Two variants are ranked only when their intervals do not
overlap.
"""
import glob
import json
import math
import os
import random
import re
import statistics
import sys

out = sys.argv[1]
runs = os.path.join(out, "runs")
bandwidth, latency, nodes, iters, reps, layout = open(os.path.join(runs, "settings")).read().split()
iters = int(iters)
skip = max(3, math.ceil(0.1 * iters) + 1)  # DP PowerSGD warm-up is the first 10 %
ORDER = ["baseline", "dp_powersgd", "cb_lep_ec", "fe", "full", "auto", "nocomm"]
LABEL = {"baseline": "Baseline", "dp_powersgd": "DP-only PowerSGD", "cb_lep_ec": "CB+LEP+EC", "fe": "+FE",
         "full": "+SC (Optimus-CC)", "auto": "auto plan (quality-aware)", "nocomm": "Baseline, unshaped (T_nocomm)",
         "dp_powersgd_distopt": "DP-only PowerSGD, distributed optimizer",
         "dp_powersgd_overlap": "DP-only PowerSGD, distributed optimizer, --overlap-param-gather"}
PHASES = ["forward", "backward", "pp_wait", "dp_allreduce", "dp_allgather", "emb_allreduce", "compress", "decompress",
          "norm_allreduce", "optimizer"]
CLASSES = ["pp_fwd", "pp_bwd", "dp", "emb", "tp", "other"]
# Variants not listed above (an OCC_VARIANTS experiment) are reported after them, under their own name.
found = {m.group(1) for f in glob.glob(os.path.join(runs, "*.r[0-9]*.jsonl"))
         if (m := re.fullmatch(r"(.+)\.r\d+\.jsonl", os.path.basename(f)))}
ORDER += sorted(found - set(ORDER))
label = lambda v: LABEL.get(v, v)
BOOT_N, BOOT_SEED, TARGET_PCT = 2000, 1234, 3.0  # resamples; fixed seed: the report is reproducible


def boot_medians(reps_ms, v):
    """BOOT_N bootstrap medians of a variant's ms/iter: draw the repetitions with
    replacement, then each drawn repetition's iterations with replacement, and take the
    median of the pooled draw. The generator is seeded per variant, so a variant's interval
    does not depend on which other variants ran, and two variants' draws are independent."""
    rng = random.Random(f"{BOOT_SEED}:{v}")
    meds = []
    for _ in range(BOOT_N):
        pooled = []
        for rep in rng.choices(reps_ms, k=len(reps_ms)):
            pooled += rng.choices(rep, k=len(rep))
        meds.append(statistics.median(pooled))
    return meds


def ci95(samples):
    q = statistics.quantiles(samples, n=40, method="inclusive")  # cut points every 2.5 %
    return [q[0], q[-1]]


res = {}
boot = {}  # variant -> its bootstrap medians
for v in ORDER:
    files = sorted(glob.glob(os.path.join(runs, f"{v}.r[0-9]*.jsonl")))
    if not files:
        continue
    per_rep = [[json.loads(line) for line in open(f)] for f in files]
    steady = [r for rows in per_rep for r in rows if r["iter"] > skip]
    ms = [r["ms"] for r in steady]
    reps_ms = [m for m in ([r["ms"] for r in rows if r["iter"] > skip] for rows in per_rep) if m]
    boot[v] = boot_medians(reps_ms, v)
    ci = ci95(boot[v])
    half_pct = 100 * (ci[1] - ci[0]) / 2 / statistics.median(ms)
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
        "ms_median_ci95": ci, "ms_median_ci95_halfwidth_pct": half_pct,
        "ms_median_ci95_within_3pct": half_pct <= TARGET_PCT,
        "bytes_per_iter": {c: statistics.mean(r["bytes"].get(c, 0) for r in steady) for c in CLASSES},
        "bytes_saved_per_iter": {c: statistics.mean(r.get("bytes_saved", {}).get(c, 0) for r in steady) for c in CLASSES},
        "link_tx_bytes_per_iter_per_node": statistics.mean(link) / iters if link else None,
        "stages": stages,
        # Training loss of the last 5 iterations (one iteration's loss is one batch: noisy).
        "final_loss": statistics.mean(r["loss"] for rows in per_rep for r in rows[-5:]),
        "loss_curve": [r["loss"] for r in per_rep[0]],
    }

base, nocomm = res["baseline"], res.get("nocomm")  # a subset run (OCC_VARIANTS) may lack nocomm
exposed = base["ms_median"] - nocomm["ms_median"] if nocomm else None
for v, r in res.items():
    r["speedup"] = base["ms_median"] / r["ms_median"]
    # The ratio of two independent bootstrap medians per draw (the baseline's is 1 exactly).
    r["speedup_ci95"] = ci95([b / m for b, m in zip(boot["baseline"], boot[v])])
    r["overhead_removed"] = (base["ms_median"] - r["ms_median"]) / exposed if exposed and exposed > 0 else None
    r["loss_vs_baseline"] = (r["final_loss"] - base["final_loss"]) / base["final_loss"]
# Ranking: "A faster than B" only when the 95 % intervals of the medians do not overlap.
ranked = [v for v in res if v != "nocomm"]
ranking = []
for i, a in enumerate(ranked):
    for b in ranked[i + 1:]:
        (alo, ahi), (blo, bhi) = res[a]["ms_median_ci95"], res[b]["ms_median_ci95"]
        faster, slower = (a, b) if ahi < blo else (b, a) if bhi < alo else (None, None)
        ranking.append({"a": a, "b": b, "separated": faster is not None, "faster": faster,
                        "text": f"{label(faster)} faster than {label(slower)}" if faster
                        else f"{label(a)} vs {label(b)}: not separated (intervals overlap)"})
# Supplementary, for pairs the ranking leaves unseparated: the variants ran in the same
# rounds (interleaved), so a slow phase of the machine hits both in one round. The ratio of
# their per-round medians, bootstrapped over the rounds, asks whether one is faster round
# for round. It does not replace the ranking rule above (independent intervals).
def round_medians(v):
    med = {}
    for f in glob.glob(os.path.join(runs, f"{v}.r[0-9]*.jsonl")):
        rnd = int(re.fullmatch(r".+\.r(\d+)\.jsonl", os.path.basename(f)).group(1))
        ms = [json.loads(line)["ms"] for line in open(f)]
        ms = [m for i, m in enumerate(ms, 1) if i > skip]
        if ms:
            med[rnd] = statistics.median(ms)
    return med


paired = []
for r in ranking:
    if r["separated"]:
        continue
    ma, mb = round_medians(r["a"]), round_medians(r["b"])
    common = sorted(set(ma) & set(mb))
    if len(common) < 5:
        continue
    ratios = [ma[k] / mb[k] for k in common]
    rng = random.Random(f"{BOOT_SEED}:paired:{r['a']}:{r['b']}")
    ci = ci95([statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(BOOT_N)])
    paired.append({"a": r["a"], "b": r["b"], "rounds": len(common), "ratio_median": statistics.median(ratios),
                   "ratio_ci95": ci, "a_faster_rounds": sum(x < 1 for x in ratios)})
summary = {"settings": {"bandwidth": bandwidth, "latency": latency, "nodes": int(nodes), "iters": iters,
                        "reps": int(reps), "layout": layout, "warmup_iters_skipped": skip},
           "exposed_communication_ms": exposed, "variants": res,
           "bootstrap": {"method": "hierarchical: repetitions, then iterations within each, with replacement; "
                                   "statistic: median of the pooled resample; percentile interval",
                         "resamples": BOOT_N, "seed": BOOT_SEED, "confidence": 0.95},
           "ranking": ranking, "paired_by_round": paired}
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
auto = res.get("auto")
if auto:
    # The quality-aware plan's targets: within 0.5 % of the baseline's loss, the fastest
    # such variant, and faster than DP-only PowerSGD and full Optimus-CC with 95 %
    # intervals that do not overlap.
    def separated_faster(a, b):
        return b in res and res[a]["ms_median_ci95"][1] < res[b]["ms_median_ci95"][0]
    near = [v for v in ranked if abs(res[v]["loss_vs_baseline"]) <= 0.005]
    fastest_near = min(near, key=lambda v: res[v]["ms_median"]) if near else None
    checks += [
        ("auto plan within 0.5 % of the baseline's final training loss", abs(auto["loss_vs_baseline"]) <= 0.005,
         f"{100 * auto['loss_vs_baseline']:+.2f} %"),
        ("auto plan is the fastest variant within 0.5 % of the baseline's loss (median)", fastest_near == "auto",
         f"fastest such: {label(fastest_near) if fastest_near else 'none'}"),
    ]
    for other in ("dp_powersgd", "full"):
        if other in res:
            checks.append((f"auto plan beats {label(other)} with non-overlapping 95 % intervals",
                           separated_faster("auto", other),
                           "[{:.0f}, {:.0f}] vs [{:.0f}, {:.0f}] ms".format(*auto["ms_median_ci95"],
                                                                           *res[other]["ms_median_ci95"])))
summary["checks"] = [{"check": c, "met": bool(ok), "value": val} for c, ok, val in checks]
json.dump(summary, open(os.path.join(out, "speedup.json"), "w"), indent=1)

mb = lambda b: f"{b / 1e6:.2f}"
lines = [f"Emulated cluster: {nodes} nodes x 1 rank ({layout}), links {bandwidth}, added latency {latency}; "
         f"{iters} iterations x {reps} interleaved repetitions, first {skip} iterations of each run skipped; "
         f"final loss = mean training loss of the last 5 iterations. "
         + (f"Exposed communication of the baseline (T_base - T_nocomm): {exposed:.0f} ms. " if nocomm else "")
         + f"95 % confidence intervals: hierarchical bootstrap ({BOOT_N} resamples of the repetitions, then of the "
         f"iterations within each; seed {BOOT_SEED}); ± % = half-width of the interval / median.", "",
         "| variant | ms/iter median | median [95 % CI] | ± % | best | speedup [95 % CI] | overhead removed | pp_fwd MB/it | pp_bwd MB/it | dp MB/it | emb MB/it | link MB/it/node | final loss | vs baseline |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for v, r in res.items():
    b = r["bytes_per_iter"]
    removed = "—" if v == "baseline" or r["overhead_removed"] is None else f"{100 * r['overhead_removed']:.0f} %"
    link = "—" if r["link_tx_bytes_per_iter_per_node"] is None else mb(r["link_tx_bytes_per_iter_per_node"])
    lo, hi = r["ms_median_ci95"]
    speedup = f"{r['speedup']:.2f}x" + ("" if v == "baseline" else " [{:.2f}, {:.2f}]".format(*r["speedup_ci95"]))
    lines.append(f"| {label(v)} | {r['ms_median']:.0f} | {r['ms_median']:.0f} [{lo:.0f}, {hi:.0f}] | "
                 f"{r['ms_median_ci95_halfwidth_pct']:.1f} | {r['ms_best']:.0f} | {speedup} | {removed} | "
                 f"{mb(b['pp_fwd'])} | {mb(b['pp_bwd'])} | {mb(b['dp'])} | {mb(b['emb'])} | {link} | "
                 f"{r['final_loss']:.4f} | {100 * r['loss_vs_baseline']:+.2f} % |")
lines += ["", f"Precision (95 % interval of the median ms/iter; target ±{TARGET_PCT:.0f} %):", ""]
lines += [f"- {label(v)}: {res[v]['ms_median']:.0f} ms [{res[v]['ms_median_ci95'][0]:.0f}, "
          f"{res[v]['ms_median_ci95'][1]:.0f}], ±{res[v]['ms_median_ci95_halfwidth_pct']:.1f} % "
          f"({'within' if res[v]['ms_median_ci95_halfwidth_pct'] <= TARGET_PCT else 'NOT within'} ±{TARGET_PCT:.0f} %)"
          for v in ranked]
lines += ["", "Ranking (a variant is faster than another only when their 95 % intervals do not overlap):", ""]
lines += [f"- {r['text']}" for r in ranking] or ["- (one variant only)"]
if paired:
    lines += ["", "Paired by round, for the pairs above that are not separated (ratio of the two variants' medians "
              "in the same round, bootstrapped over rounds; a supplementary view, not the ranking rule):", ""]
    lines += [f"- {label(p['a'])} / {label(p['b'])}: {p['ratio_median']:.3f} [{p['ratio_ci95'][0]:.3f}, "
              f"{p['ratio_ci95'][1]:.3f}] over {p['rounds']} rounds; {label(p['a'])} faster in "
              f"{p['a_faster_rounds']} of them" for p in paired]
lines += ["", "Time per phase (ms per iteration, mean over the stage's ranks; `other` = iteration minus the phases):", "",
          "| variant | stage | " + " | ".join(PHASES) + " | other | iteration |", "|---|---|" + "---|" * (len(PHASES) + 2)]
for v, r in res.items():
    for s, t in enumerate(r["stages"]):
        lines.append(f"| {label(v)} | {s} | " + " | ".join(f"{t[p]:.0f}" for p in PHASES) +
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
colors = plt.cm.tab10.colors if len(PHASES) + 1 <= 10 else plt.cm.tab20.colors
for s, ax in enumerate(axes):
    bottom = [0.0] * len(res)
    for i, p in enumerate(PHASES + ["other"]):
        vals = [r["stages"][s][p] for r in res.values()]
        ax.bar(range(len(res)), vals, bottom=bottom, label=p, color=colors[i % len(colors)])
        bottom = [a + b for a, b in zip(bottom, vals)]
    ax.set_xticks(range(len(res)))
    ax.set_xticklabels([label(v).replace(" (", "\n(").replace(", ", ",\n") for v in res], fontsize=8,
                       rotation=35, ha="right")
    ax.set_title(f"stage {s}")
    ax.grid(axis="y", alpha=0.3)
axes[0].set_ylabel("ms per iteration")
handles, labels = axes[0].get_legend_handles_labels()
fig.legend(handles[::-1], labels[::-1], fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
fig.suptitle(f"Iteration time by phase, emulated cluster ({bandwidth} links)")
fig.savefig(os.path.join(out, "breakdown.png"), dpi=110, bbox_inches="tight")
print(f"wrote {out}/speedup.json, speedup.md, breakdown.png, traces/*.json")
