"""DiLoCo on the emulated cluster: OUT.md and OUT.json from scripts/bench-diloco.sh's runs.

   /usr/bin/python3 scripts/diloco_speedup_report.py --quality diloco-quality.json --out OUT \
       [--load load.txt] [--window 64] [--command CMD] BENCH_DIR...

Each BENCH_DIR is one bandwidth's scripts/bench-speedup.sh output (runs/VARIANT.rK.jsonl,
runs/settings). A run's time is its MEAN ms per iteration over its last --window iterations:
whole rounds of every DiLoCo setting (the median of the iterations would hide the syncs,
which are a few long iterations per round). Per variant: the mean over the repetitions with
a 95 % t-interval (repetitions are the independent samples; the machine is shared, so a
repetition can land in a slow phase), best, median and spread of the repetitions, and the
speedup paired by round (the variants run interleaved: round k's baseline over round k's
variant), also with a 95 % t-interval. Quality comes from the quality experiment (the
final validation loss against the same-seed baseline at P2 D2, worst of the seeds; the auto
plan's from the plan's own expected cost), since the benchmark's runs are too short for it;
the benchmark's final training loss is listed beside it.
"""
import argparse
import glob
import json
import math
import os
import re
import statistics

# Two-sided 95 % Student t quantiles by degrees of freedom.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
LABEL = {"baseline": "Baseline (per-step DP)", "dp_powersgd": "DP PowerSGD r16 + EF",
         "pp_int8": "int8 pipeline links (per-step DP)", "diloco_h8": "DiLoCo H 8",
         "diloco_h32": "DiLoCo H 32", "streaming_int8": "Streaming DiLoCo (H 8, F 3, overlap 2, int8)",
         "diloco_h8_pp_int8": "DiLoCo H 8 + int8 pipeline links", "auto": "auto plan (quality-aware)"}
ORDER = list(LABEL)
BUDGET = 0.5  # % of the baseline's loss


def t_interval(xs):
    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, [m, m]
    h = T975.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, [m - h, m + h]


def quality_of(q, variant):
    """(worst-seed %, mean %, how) at the planner's layout, or None."""
    for r in q.get("results", []):
        if r["name"] == variant and r["layout"] == q.get("planner_layout", "p2d2") and r["max_pct"] is not None:
            return r["max_pct"], r["mean_pct"], f"measured ({r['layout']}, {len(r['final_val_loss'])} seeds)"
    return None


def bench(dir_, q, window):
    runs = os.path.join(dir_, "runs")
    bandwidth, latency, nodes, iters, reps, layout = open(os.path.join(runs, "settings")).read().split()
    iters = int(iters)
    first = iters - window + 1
    found = {m.group(1) for f in glob.glob(os.path.join(runs, "*.r[0-9]*.jsonl"))
             if (m := re.fullmatch(r"(.+)\.r\d+\.jsonl", os.path.basename(f)))}
    order = [v for v in ORDER if v in found] + sorted(found - set(ORDER))
    per_round = {}  # variant -> round -> mean ms
    res = {}
    for v in order:
        rows_by_rep = {}
        for f in glob.glob(os.path.join(runs, f"{v}.r[0-9]*.jsonl")):
            k = int(re.fullmatch(r".+\.r(\d+)\.jsonl", os.path.basename(f)).group(1))
            rows = [json.loads(line) for line in open(f)]
            win = [r for r in rows if r["iter"] >= first]
            if len(win) != window:
                continue  # an incomplete run
            rows_by_rep[k] = (rows, win)
        if not rows_by_rep:
            continue
        means = {k: statistics.mean(r["ms"] for r in win) for k, (rows, win) in rows_by_rep.items()}
        per_round[v] = means
        mean, ci = t_interval(list(means.values()))
        wins = [r for _, win in rows_by_rep.values() for r in win]
        b = {c: statistics.mean(r["bytes"].get(c, 0) for r in wins) / 1e6 for c in ("pp_fwd", "pp_bwd", "dp", "emb")}
        res[v] = {"label": LABEL.get(v, v), "reps": len(means), "ms_mean": mean, "ms_ci95": ci,
                  "ms_ci95_halfwidth_pct": 100 * (ci[1] - ci[0]) / 2 / mean,
                  "ms_rep_means": [means[k] for k in sorted(means)], "ms_best_rep": min(means.values()),
                  "ms_median_rep": statistics.median(means.values()),
                  "ms_spread_rep": max(means.values()) - min(means.values()),
                  "bytes_mb_per_iter": b,
                  "train_loss_last8": statistics.mean(r["loss"] for rows, _ in rows_by_rep.values() for r in rows[-8:]),
                  "flags": ""}
    # The flags that differ from the baseline's (the model's are shared).
    base_flags = open(os.path.join(runs, "baseline.flags")).read().split()
    for v in res:
        mine = open(os.path.join(runs, f"{v}.flags")).read().split()
        res[v]["flags"] = " ".join(mine[len(base_flags):]) if mine[:len(base_flags)] == base_flags else " ".join(mine)
    base = per_round.get("baseline", {})
    for v, r in res.items():
        ratios = [base[k] / per_round[v][k] for k in per_round[v] if k in base]
        r["speedup"], r["speedup_ci95"] = t_interval(ratios) if ratios else (None, None)
        qual = quality_of(q, v)
        if v == "auto":
            plan = open(os.path.join(runs, "auto.plan.txt")).read() if os.path.exists(os.path.join(runs, "auto.plan.txt")) else ""
            m = re.search(r"^expected loss cost: \+?(-?[0-9.]+) %: (.*)$", plan, re.M)
            c = re.search(r"^chosen: .*?: (.*) \(the lowest", plan, re.M)
            r["chosen"] = c.group(1) if c else None
            qual = (float(m.group(1)), None, "the plan's expected cost: " + m.group(2)) if m else None
        if v == "baseline":
            qual = (0.0, 0.0, "the reference")
        r["quality_worst_pct"], r["quality_mean_pct"], r["quality_how"] = qual if qual else (None, None, "not measured")
        r["train_loss_vs_baseline_pct"] = 100 * (r["train_loss_last8"] - res["baseline"]["train_loss_last8"]) / \
            res["baseline"]["train_loss_last8"] if "baseline" in res else None
    within = [v for v, r in res.items() if r["quality_worst_pct"] is not None and r["quality_worst_pct"] <= BUDGET]
    fastest = min(within, key=lambda v: res[v]["ms_mean"]) if within else None
    separated = []
    if fastest:
        lo, hi = res[fastest]["ms_ci95"]
        for v in within:
            if v == fastest:
                continue
            olo, ohi = res[v]["ms_ci95"]
            separated.append({"other": v, "separated": hi < olo})
    return {"bandwidth": bandwidth, "layout": layout, "nodes": int(nodes), "iters": iters, "reps": int(reps),
            "window": [first, iters], "variants": res, "within_budget": within, "fastest_within_budget": fastest,
            "fastest_vs_others": separated}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dirs", nargs="+")
    p.add_argument("--quality", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--load", default="")
    p.add_argument("--window", type=int, default=64)
    p.add_argument("--command", default="")
    a = p.parse_args()
    q = json.load(open(a.quality)) if os.path.exists(a.quality) else {}
    benches = [bench(d, q, a.window) for d in a.dirs]
    load = None
    if a.load and os.path.exists(a.load):
        one = [float(line.split()[1]) for line in open(a.load) if len(line.split()) >= 2]
        if one:
            load = {"samples": len(one), "mean_1min": statistics.mean(one), "min_1min": min(one), "max_1min": max(one)}
    json.dump({"command": a.command, "quality": a.quality, "load": load, "benches": benches},
              open(a.out + ".json", "w"), indent=1)
    lines = [f"Emulated cluster (scripts/cluster.sh): 4 nodes of one rank, T1 P2 D2, the speedup model (8 layers, "
             f"hidden 256, seq 64, vocab 1024, global batch 32), every pipeline and DP transfer over a shaped link. "
             f"A run's time is its mean ms/iteration over its last {a.window} iterations (whole rounds of every H); "
             f"per variant the mean over the interleaved repetitions with a 95 % t-interval, and the speedup paired "
             f"by round with its 95 % t-interval. Quality (val loss vs baseline): the DiLoCo quality experiment "
             f"({a.quality}, P2 D2, worst of its seeds), the auto plan's own expected cost. Made by `{a.command}`."]
    if load:
        lines.append(f"Machine load during the benchmark (1-minute load average on 2 vCPUs shared with other jobs, "
                     f"{load['samples']} samples): mean {load['mean_1min']:.1f}, range {load['min_1min']:.1f}-"
                     f"{load['max_1min']:.1f}.")
    for b in benches:
        lines += ["", f"### {b['bandwidth']} ({b['reps']} repetitions of {b['iters']} iterations; iterations "
                      f"{b['window'][0]}-{b['window'][1]} timed)", "",
                  "| variant | ms/iter mean [95 % CI] | ± % | reps: best / median / spread | speedup [95 % CI] | "
                  "dp MB/it | pp MB/it | emb MB/it | val loss vs baseline (worst seed) | train loss (last 8) vs baseline |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for v, r in b["variants"].items():
            by = r["bytes_mb_per_iter"]
            sp = "—" if r["speedup"] is None else f"{r['speedup']:.2f}x [{r['speedup_ci95'][0]:.2f}, {r['speedup_ci95'][1]:.2f}]"
            qv = "—" if r["quality_worst_pct"] is None else f"{r['quality_worst_pct']:+.2f} %"
            tl = "—" if r["train_loss_vs_baseline_pct"] is None else f"{r['train_loss_vs_baseline_pct']:+.2f} %"
            label = r["label"] + (f" ({r['chosen']})" if r.get("chosen") else "")
            lines.append(f"| {label} | {r['ms_mean']:.0f} [{r['ms_ci95'][0]:.0f}, {r['ms_ci95'][1]:.0f}] | "
                         f"{r['ms_ci95_halfwidth_pct']:.1f} | {r['ms_best_rep']:.0f} / {r['ms_median_rep']:.0f} / "
                         f"{r['ms_spread_rep']:.0f} | {sp} | {by['dp']:.2f} | {by['pp_fwd'] + by['pp_bwd']:.2f} | "
                         f"{by['emb']:.2f} | {qv} | {tl} |")
        f = b["fastest_within_budget"]
        lines.append("")
        if f:
            sep = [s for s in b["fastest_vs_others"]]
            lines.append(f"Fastest within {BUDGET} % of the baseline's loss: **{b['variants'][f]['label']}** "
                         f"({b['variants'][f]['ms_mean']:.0f} ms/iter); against the others within the budget: "
                         + (", ".join(f"{b['variants'][s['other']]['label']} "
                                      f"{'separated' if s['separated'] else 'intervals overlap'}" for s in sep) or "none")
                         + ".")
        else:
            lines.append(f"No variant is within {BUDGET} % of the baseline's loss.")
    open(a.out + ".md", "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
