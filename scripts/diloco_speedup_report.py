"""DiLoCo on the emulated cluster: OUT.md and OUT.json from scripts/bench-diloco.sh's runs.

   /usr/bin/python3 scripts/diloco_speedup_report.py --quality diloco-quality.json --out OUT \
       [--load load.txt] [--window 32] [--command CMD] BENCH_DIR...

Each BENCH_DIR is a scripts/bench-speedup.sh output (runs/VARIANT.rK.jsonl, runs/settings); the
outputs of one bandwidth are pooled, their rounds counted apart. A run's time is its MEAN ms per iteration over its last --window iterations:
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
QUALITY_NAME = {"dp_powersgd": "dp_powersgd16"}  # the quality experiment's name of a benchmark variant
BUDGET = 0.5  # % of the baseline's loss
# Pairs compared round by round besides the budget's ranking: pipeline compression with and without DiLoCo.
PAIRS = [("diloco_h8_pp_int8", "diloco_h8"), ("diloco_h8_pp_int8", "pp_int8"), ("diloco_h8", "dp_powersgd"),
         ("streaming_int8", "diloco_h8"), ("streaming_int8", "dp_powersgd")]


def t_interval(xs):
    """The mean and its 95 % t-interval (None from fewer than 2 samples: no interval)."""
    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, None
    h = T975.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, [m - h, m + h]


def ci_text(ci, fmt):
    return "[—]" if ci is None else f"[{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def quality_of(q, variant):
    """(worst-seed %, mean %, how) at the planner's layout, or None."""
    for r in q.get("results", []):
        if r["name"] == QUALITY_NAME.get(variant, variant) and r["layout"] == q.get("planner_layout", "p2d2") and r["max_pct"] is not None:
            return r["max_pct"], r["mean_pct"], f"measured ({r['layout']}, {len(r['final_val_loss'])} seeds)"
    return None


def flags_in(dir_, variant):
    """A variant's train flags in one output, its own data path (under the output) written OUT/: the
    outputs pooled differ there only."""
    return open(os.path.join(dir_, "runs", f"{variant}.flags")).read().replace(dir_.rstrip("/") + "/", "OUT/")


def bench(dirs, q, window):
    """One bandwidth's runs, from one or more bench-speedup.sh outputs of the same settings, their
    rounds pooled. A variant's flags are those of the first output that ran it; an output that ran
    it with other flags (the auto plan, calibrated per output, may choose otherwise) is left out."""
    runs = os.path.join(dirs[0], "runs")
    bandwidth, latency, nodes, iters, reps, layout = open(os.path.join(runs, "settings")).read().split()
    iters = int(iters)
    first = iters - window + 1
    for d in dirs[1:]:
        if open(os.path.join(d, "runs", "settings")).read().split()[:4] != [bandwidth, latency, nodes, str(iters)]:
            raise SystemExit(f"{d}: other cluster settings or iterations than {dirs[0]}")
    found = {m.group(1) for d in dirs for f in glob.glob(os.path.join(d, "runs", "*.r[0-9]*.jsonl"))
             if (m := re.fullmatch(r"(.+)\.r\d+\.jsonl", os.path.basename(f)))}
    order = [v for v in ORDER if v in found] + sorted(found - set(ORDER))
    home = {v: next(d for d in dirs if os.path.exists(os.path.join(d, "runs", f"{v}.flags"))) for v in order}
    flags_of = {v: flags_in(home[v], v) for v in order}
    per_round = {}  # variant -> round -> mean ms
    res = {}
    for v in order:
        rows_by_rep = {}
        for i, d in enumerate(dirs):
            path = os.path.join(d, "runs", f"{v}.flags")
            if not os.path.exists(path):
                continue
            if flags_in(d, v) != flags_of[v]:
                print(f"note: {d}: {v} ran with other flags than in {home[v]}; left out")
                continue
            for f in glob.glob(os.path.join(d, "runs", f"{v}.r[0-9]*.jsonl")):
                k = (i, int(re.fullmatch(r".+\.r(\d+)\.jsonl", os.path.basename(f)).group(1)))
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
                  "ms_ci95_halfwidth_pct": 100 * (ci[1] - ci[0]) / 2 / mean if ci else None,
                  "ms_rep_means": [means[k] for k in sorted(means)], "ms_best_rep": min(means.values()),
                  "ms_median_rep": statistics.median(means.values()),
                  "ms_spread_rep": max(means.values()) - min(means.values()),
                  "bytes_mb_per_iter": b,
                  "train_loss_last8": statistics.mean(r["loss"] for rows, _ in rows_by_rep.values() for r in rows[-8:]),
                  "flags": ""}
    # The flags that differ from the baseline's (the model's are shared).
    base_flags = flags_of["baseline"].split() if "baseline" in flags_of else []
    for v in res:
        mine = flags_of[v].split()
        res[v]["flags"] = " ".join(mine[len(base_flags):]) if mine[:len(base_flags)] == base_flags else " ".join(mine)
    base = per_round.get("baseline", {})
    for v, r in res.items():
        ratios = [base[k] / per_round[v][k] for k in per_round[v] if k in base]
        r["speedup"], r["speedup_ci95"] = t_interval(ratios) if ratios else (None, None)
        qual = quality_of(q, v)
        if v == "auto":
            plan_path = os.path.join(home[v], "runs", "auto.plan.txt")
            plan = open(plan_path).read() if os.path.exists(plan_path) else ""
            m = re.search(r"^expected loss cost: \+?(-?[0-9.]+) % of the baseline's final validation loss: (.*)$",
                          plan, re.M)
            c = re.search(r"^chosen: .*?: (.*) \(the lowest", plan, re.M)
            r["chosen"] = c.group(1) if c else None
            qual = (float(m.group(1)), None, "the plan's expected cost: " + m.group(2)) if m else None
        if v == "baseline":
            qual = (0.0, 0.0, "the reference")
        r["quality_worst_pct"], r["quality_mean_pct"], r["quality_how"] = qual if qual else (None, None, "not measured")
        r["train_loss_vs_baseline_pct"] = 100 * (r["train_loss_last8"] - res["baseline"]["train_loss_last8"]) / \
            res["baseline"]["train_loss_last8"] if "baseline" in res else None
    def paired(a, b):
        """b's time over a's, round by round (> 1: a is faster), with its 95 % t-interval."""
        ratios = [per_round[b][k] / per_round[a][k] for k in per_round.get(a, {}) if k in per_round.get(b, {})]
        if not ratios:
            return None
        m, ci = t_interval(ratios)
        verdict = "too few rounds" if ci is None else "a faster" if ci[0] > 1 else "b faster" if ci[1] < 1 \
            else "not separated"
        return {"a": a, "b": b, "rounds": len(ratios), "ratio": m, "ratio_ci95": ci, "verdict": verdict}

    within = [v for v, r in res.items() if r["quality_worst_pct"] is not None and r["quality_worst_pct"] <= BUDGET]
    fastest = min(within, key=lambda v: res[v]["ms_mean"]) if within else None
    separated = [paired(fastest, v) for v in within if v != fastest] if fastest else []
    pairs = [p for p in (paired(a, b) for a, b in PAIRS if a in res and b in res) if p]
    # When each output ran (its settings written .. its last run's metrics): the load samples to count.
    spans = [(os.path.getmtime(os.path.join(d, "runs", "settings")),
              max(os.path.getmtime(f) for f in glob.glob(os.path.join(d, "runs", "*.r[0-9]*.jsonl")))) for d in dirs]
    return {"bandwidth": bandwidth, "layout": layout, "nodes": int(nodes), "iters": iters, "dirs": dirs, "spans": spans,
            "reps": max(r["reps"] for r in res.values()),
            "window": [first, iters], "variants": res, "within_budget": within, "fastest_within_budget": fastest,
            "fastest_vs_others": separated, "pairs": pairs}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dirs", nargs="+", help="bench-speedup.sh outputs; several of one bandwidth are pooled")
    p.add_argument("--quality", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--load", default="")
    p.add_argument("--window", type=int, default=32)
    p.add_argument("--command", default="")
    a = p.parse_args()
    q = json.load(open(a.quality)) if os.path.exists(a.quality) else {}
    by_bandwidth = {}  # the outputs of each bandwidth, in the order given
    for d in a.dirs:
        by_bandwidth.setdefault(open(os.path.join(d, "runs", "settings")).read().split()[0], []).append(d)
    benches = [bench(ds, q, a.window) for ds in by_bandwidth.values()]
    samples = [(float(w[0]), float(w[1])) for w in (line.split() for line in open(a.load)) if len(w) >= 2] \
        if a.load and os.path.exists(a.load) else []
    for b in benches:  # the 1-minute load averages sampled while this bandwidth's outputs ran
        one = [x for t, x in samples if any(lo <= t <= hi for lo, hi in b["spans"])]
        b["load"] = {"samples": len(one), "mean_1min": statistics.mean(one), "min_1min": min(one),
                     "max_1min": max(one)} if one else None
    json.dump({"command": a.command, "quality": a.quality, "benches": benches},
              open(a.out + ".json", "w"), indent=1)
    lines = [f"Emulated cluster (scripts/cluster.sh): 4 nodes of one rank, T1 P2 D2, the speedup model (8 layers, "
             f"hidden 256, seq 64, vocab 1024, global batch 32), every pipeline and DP transfer over a shaped link. "
             f"A run's time is its mean ms/iteration over its last {a.window} iterations (whole rounds of every H); "
             f"per variant the mean over the interleaved repetitions with a 95 % t-interval, and the speedup paired "
             f"by round with its 95 % t-interval. Quality (val loss vs baseline): the DiLoCo quality experiment "
             f"({a.quality}, P2 D2, worst of its seeds), the auto plan's own expected cost. Made by `{a.command}`."]
    lines.append("Machine load: the 1-minute load average (2 vCPUs shared with other jobs), sampled every 30 s "
                 "while each bandwidth ran; see each table's heading.")
    for b in benches:
        ld = b["load"]
        lines += ["", f"### {b['bandwidth']} ({b['reps']} repetitions of {b['iters']} iterations; iterations "
                      f"{b['window'][0]}-{b['window'][1]} timed; load " +
                  (f"mean {ld['mean_1min']:.1f}, range {ld['min_1min']:.1f}-{ld['max_1min']:.1f} over {ld['samples']} "
                   f"samples)" if ld else "not sampled)"), "",
                  "| variant | ms/iter mean [95 % CI] | ± % | reps: best / median / spread | speedup [95 % CI] | "
                  "dp MB/it | pp MB/it | emb MB/it | val loss vs baseline (worst seed) | train loss (last 8) vs baseline |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for v, r in b["variants"].items():
            by = r["bytes_mb_per_iter"]
            sp = "—" if r["speedup"] is None else f"{r['speedup']:.2f}x {ci_text(r['speedup_ci95'], '.2f')}"
            qv = "—" if r["quality_worst_pct"] is None else f"{r['quality_worst_pct']:+.2f} %"
            tl = "—" if r["train_loss_vs_baseline_pct"] is None else f"{r['train_loss_vs_baseline_pct']:+.2f} %"
            label = r["label"] + (f" ({r['chosen']})" if r.get("chosen") else "")
            hw = "—" if r["ms_ci95_halfwidth_pct"] is None else f"{r['ms_ci95_halfwidth_pct']:.1f}"
            lines.append(f"| {label} | {r['ms_mean']:.0f} {ci_text(r['ms_ci95'], '.0f')} | {hw} | {r['ms_best_rep']:.0f} / {r['ms_median_rep']:.0f} / "
                         f"{r['ms_spread_rep']:.0f} | {sp} | {by['dp']:.2f} | {by['pp_fwd'] + by['pp_bwd']:.2f} | "
                         f"{by['emb']:.2f} | {qv} | {tl} |")
        f = b["fastest_within_budget"]
        lab = lambda v: b["variants"][v]["label"]  # noqa: E731
        pair_text = lambda p: (f"{lab(p['b'])} / {lab(p['a'])} = {p['ratio']:.3f} {ci_text(p['ratio_ci95'], '.3f')} "  # noqa: E731
                               f"over {p['rounds']} rounds: "
                               + {"a faster": f"{lab(p['a'])} faster", "b faster": f"{lab(p['b'])} faster",
                                  "not separated": "not separated", "too few rounds": "too few rounds"}[p["verdict"]])
        lines.append("")
        if f:
            lines.append(f"Fastest (mean) within {BUDGET} % of the baseline's loss (worst seed): "
                         f"**{lab(f)}** ({b['variants'][f]['ms_mean']:.0f} ms/iter). Round by round against the "
                         f"others within the budget (time ratio, 95 % t-interval):")
            lines += [f"- {pair_text(p)}" for p in b["fastest_vs_others"]] or ["- (none)"]
        else:
            lines.append(f"No variant is within {BUDGET} % of the baseline's loss.")
        if b["pairs"]:
            lines += ["", "Other pairs, round by round:"] + [f"- {pair_text(p)}" for p in b["pairs"]]
    open(a.out + ".md", "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
