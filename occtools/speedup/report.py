"""The speedup benchmark's report: OUT/speedup.json, OUT/speedup.md, OUT/breakdown.png from the
runs in OUT/runs (VARIANT.rK.jsonl, VARIANT.flags, VARIANT.rK.links, settings).

Iteration times are pooled over the repetitions after the warm-up iterations (the first ones pay
for page faults and, with DP PowerSGD, run uncompressed). Each variant's median ms/iter gets a
95 % confidence interval from a hierarchical bootstrap: resample the repetitions, then the
iterations within each chosen one. Both levels vary (a repetition can land in a slow phase of the
shared machine, and iterations scatter within one), so resampling only the pooled iterations
would understate the uncertainty. Two variants are ranked only when their intervals do not
overlap. The .md and .png render from the json alone.
"""

import glob
import json
import math
import os
import re
import statistics

from occtools.common import plots, stats
from occtools.speedup import checks

ORDER = ["baseline", "dp_powersgd", "cb_lep_ec", "fe", "full", "auto", "nocomm"]
LABEL = {"baseline": "Baseline", "dp_powersgd": "DP-only PowerSGD", "cb_lep_ec": "CB+LEP+EC", "fe": "+FE",
         "full": "+SC (Optimus-CC)", "auto": "auto plan (quality-aware)", "nocomm": "Baseline, unshaped (T_nocomm)",
         "dp_powersgd_distopt": "DP-only PowerSGD, distributed optimizer",
         "dp_powersgd_overlap": "DP-only PowerSGD, distributed optimizer, --overlap-param-gather"}
PHASES = ["forward", "backward", "pp_wait", "dp_allreduce", "dp_allgather", "emb_allreduce", "compress", "decompress",
          "norm_allreduce", "optimizer"]
CLASSES = ["pp_fwd", "pp_bwd", "dp", "emb", "tp", "other"]
BOOT_N, BOOT_SEED, TARGET_PCT = 2000, 1234, 3.0  # resamples; fixed seed: the report is reproducible


def label(v):
    return LABEL.get(v, v)


def variant(runs, v, skip, iters):
    files = sorted(glob.glob(os.path.join(runs, f"{v}.r[0-9]*.jsonl")))
    per_rep = [[json.loads(line) for line in open(f)] for f in files]
    steady = [r for rows in per_rep for r in rows if r["iter"] > skip]
    ms = [r["ms"] for r in steady]
    reps_ms = [m for m in ([r["ms"] for r in rows if r["iter"] > skip] for rows in per_rep) if m]
    # Seeded per variant: a variant's interval does not depend on which other variants ran.
    boot = stats.boot_medians(reps_ms, BOOT_N, f"{BOOT_SEED}:{v}")
    ci = stats.ci95(boot)
    half_pct = 100 * (ci[1] - ci[0]) / 2 / statistics.median(ms)
    stages = []
    for s in range(len(steady[0]["stages"])):
        t = {p: statistics.mean(r["stages"][s]["timers"].get(p, 0.0) for r in steady) for p in PHASES}
        it = statistics.mean(r["stages"][s]["timers"]["iteration"] for r in steady)
        t["other"] = max(0.0, it - sum(t.values()))
        t["iteration"] = it
        stages.append(t)
    link = [int(line.split()[1].split("=")[1]) for f in sorted(glob.glob(os.path.join(runs, f"{v}.r*.links")))
            for line in open(f)]
    return boot, {
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


def round_medians(runs, v, skip):
    med = {}
    for f in glob.glob(os.path.join(runs, f"{v}.r[0-9]*.jsonl")):
        rnd = int(re.fullmatch(r".+\.r(\d+)\.jsonl", os.path.basename(f)).group(1))
        ms = [m for i, m in enumerate((json.loads(line)["ms"] for line in open(f)), 1) if i > skip]
        if ms:
            med[rnd] = statistics.median(ms)
    return med


def summarize(out):
    runs = os.path.join(out, "runs")
    bandwidth, latency, nodes, iters, reps, layout = open(os.path.join(runs, "settings")).read().split()
    iters = int(iters)
    skip = max(3, math.ceil(0.1 * iters) + 1)  # DP PowerSGD's warm-up is the first 10 %
    found = {m.group(1) for f in glob.glob(os.path.join(runs, "*.r[0-9]*.jsonl"))
             if (m := re.fullmatch(r"(.+)\.r\d+\.jsonl", os.path.basename(f)))}
    res, boot = {}, {}
    for v in ORDER + sorted(found - set(ORDER)):  # variants not listed above come after them, under their name
        if v in found:
            boot[v], res[v] = variant(runs, v, skip, iters)
    base, nocomm = res["baseline"], res.get("nocomm")  # a subset run may lack nocomm
    exposed = base["ms_median"] - nocomm["ms_median"] if nocomm else None
    for v, r in res.items():
        r["speedup"] = base["ms_median"] / r["ms_median"]
        # The ratio of two independent bootstrap medians per draw (the baseline's is 1 exactly).
        r["speedup_ci95"] = stats.ci95([b / m for b, m in zip(boot["baseline"], boot[v])])
        r["overhead_removed"] = (base["ms_median"] - r["ms_median"]) / exposed if exposed and exposed > 0 else None
        r["loss_vs_baseline"] = (r["final_loss"] - base["final_loss"]) / base["final_loss"]
    # Ranking: "A faster than B" only when the 95 % intervals of the medians do not overlap.
    ranked = [v for v in res if v != "nocomm"]
    ranking = []
    for i, a in enumerate(ranked):
        for b in ranked[i + 1:]:
            side = stats.separated(res[a]["ms_median_ci95"], res[b]["ms_median_ci95"])
            faster, slower = (a, b) if side < 0 else (b, a) if side > 0 else (None, None)
            ranking.append({"a": a, "b": b, "separated": faster is not None, "faster": faster,
                            "text": f"{label(faster)} faster than {label(slower)}" if faster
                            else f"{label(a)} vs {label(b)}: not separated (intervals overlap)"})
    # Supplementary, for pairs the ranking leaves unseparated: the variants ran in the same rounds
    # (interleaved), so a slow phase of the machine hits both in one round. The ratio of their
    # per-round medians, bootstrapped over the rounds, asks whether one is faster round for round.
    paired = []
    for r in ranking:
        if r["separated"]:
            continue
        ma, mb = round_medians(runs, r["a"], skip), round_medians(runs, r["b"], skip)
        common = sorted(set(ma) & set(mb))
        if len(common) < 5:
            continue
        ratios = [ma[k] / mb[k] for k in common]
        paired.append({"a": r["a"], "b": r["b"], "rounds": len(common), "ratio_median": statistics.median(ratios),
                       "ratio_ci95": stats.boot_median_ci(ratios, BOOT_N, f"{BOOT_SEED}:paired:{r['a']}:{r['b']}"),
                       "a_faster_rounds": sum(x < 1 for x in ratios)})
    summary = {"settings": {"bandwidth": bandwidth, "latency": latency, "nodes": int(nodes), "iters": iters,
                            "reps": int(reps), "layout": layout, "warmup_iters_skipped": skip},
               "exposed_communication_ms": exposed, "variants": res,
               "bootstrap": {"method": "hierarchical: repetitions, then iterations within each, with replacement; "
                                       "statistic: median of the pooled resample; percentile interval",
                             "resamples": BOOT_N, "seed": BOOT_SEED, "confidence": 0.95},
               "ranking": ranking, "paired_by_round": paired}
    summary["checks"] = [{"check": c, "met": bool(ok), "value": val} for c, ok, val in checks.targets(res, label)]
    return summary


def mb(b):
    return f"{b / 1e6:.2f}"


def render(summary):
    s, res = summary["settings"], summary["variants"]
    exposed = summary["exposed_communication_ms"]
    lines = [f"Emulated cluster: {s['nodes']} nodes x 1 rank ({s['layout']}), links {s['bandwidth']}, added latency "
             f"{s['latency']}; {s['iters']} iterations x {s['reps']} interleaved repetitions, first "
             f"{s['warmup_iters_skipped']} iterations of each run skipped; final loss = mean training loss of the last 5 "
             f"iterations. " + (f"Exposed communication of the baseline (T_base - T_nocomm): {exposed:.0f} ms. "
                                if "nocomm" in res else "")
             + f"95 % confidence intervals: hierarchical bootstrap ({BOOT_N} resamples of the repetitions, then of the "
             f"iterations within each; seed {BOOT_SEED}); ± % = half-width of the interval / median.", "",
             "| variant | ms/iter median | median [95 % CI] | ± % | best | speedup [95 % CI] | overhead removed | "
             "pp_fwd MB/it | pp_bwd MB/it | dp MB/it | emb MB/it | link MB/it/node | final loss | vs baseline |",
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
    ranked = [v for v in res if v != "nocomm"]
    lines += ["", f"Precision (95 % interval of the median ms/iter; target ±{TARGET_PCT:.0f} %):", ""]
    lines += [f"- {label(v)}: {res[v]['ms_median']:.0f} ms [{res[v]['ms_median_ci95'][0]:.0f}, "
              f"{res[v]['ms_median_ci95'][1]:.0f}], ±{res[v]['ms_median_ci95_halfwidth_pct']:.1f} % "
              f"({'within' if res[v]['ms_median_ci95_halfwidth_pct'] <= TARGET_PCT else 'NOT within'} "
              f"±{TARGET_PCT:.0f} %)" for v in ranked]
    lines += ["", "Ranking (a variant is faster than another only when their 95 % intervals do not overlap):", ""]
    lines += [f"- {r['text']}" for r in summary["ranking"]] or ["- (one variant only)"]
    if summary["paired_by_round"]:
        lines += ["", "Paired by round, for the pairs above that are not separated (ratio of the two variants' medians "
                  "in the same round, bootstrapped over rounds; a supplementary view, not the ranking rule):", ""]
        lines += [f"- {label(p['a'])} / {label(p['b'])}: {p['ratio_median']:.3f} [{p['ratio_ci95'][0]:.3f}, "
                  f"{p['ratio_ci95'][1]:.3f}] over {p['rounds']} rounds; {label(p['a'])} faster in "
                  f"{p['a_faster_rounds']} of them" for p in summary["paired_by_round"]]
    lines += ["", "Time per phase (ms per iteration, mean over the stage's ranks; `other` = iteration minus the phases):",
              "", "| variant | stage | " + " | ".join(PHASES) + " | other | iteration |",
              "|---|---|" + "---|" * (len(PHASES) + 2)]
    for v, r in res.items():
        for i, t in enumerate(r["stages"]):
            lines.append(f"| {label(v)} | {i} | " + " | ".join(f"{t[p]:.0f}" for p in PHASES) +
                         f" | {t['other']:.0f} | {t['iteration']:.0f} |")
    if summary["checks"]:
        lines += ["", *[f"- {'met' if c['met'] else 'NOT met'}: {c['check']} ({c['value']})" for c in summary["checks"]]]
    return lines


def plot(summary, path):
    plt = plots.pyplot()
    if plt is None:
        return False
    res = summary["variants"]
    n_stages = len(res["baseline"]["stages"])
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
    fig.suptitle(f"Iteration time by phase, emulated cluster ({summary['settings']['bandwidth']} links)")
    plots.save(fig, path, dpi=110)
    return True


def write(out):
    summary = summarize(out)
    with open(os.path.join(out, "speedup.json"), "w") as f:
        json.dump(summary, f, indent=1)
    text = "\n".join(render(summary)) + "\n"
    with open(os.path.join(out, "speedup.md"), "w") as f:
        f.write(text)
    print(text)
    drew = plot(summary, os.path.join(out, "breakdown.png"))
    print(f"wrote {out}/speedup.json, speedup.md{', breakdown.png' if drew else ''}, traces/*.json")
