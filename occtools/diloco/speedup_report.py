"""diloco-speedup's report: OUT.md and OUT.json from `speedup` outputs (runs/VARIANT.rK.jsonl,
runs/settings); the outputs of one bandwidth are pooled, their rounds counted apart.

A run's time is its MEAN ms per iteration over its last --window iterations: whole rounds of
every DiLoCo setting (the median of the iterations would hide the syncs, which are a few long
iterations per round). Per variant: the mean over the repetitions with a 95 % t-interval
(repetitions are the independent samples; the machine is shared, so a repetition can land in a
slow phase), best, median and spread of the repetitions, and the speedup paired by round (the
variants run interleaved: round k's baseline over round k's variant), also with a 95 %
t-interval. Quality comes from the quality experiment (the final validation loss against the
same-seed baseline at P2 D2, worst of the seeds; the auto plan's from the plan's own expected
cost), since the benchmark's runs are too short for it; the benchmark's final training loss is
listed beside it. The .md renders from the json alone.
"""

import glob
import json
import os
import re
import statistics

from occtools.common import stats
from occtools.common.errors import Failure
from occtools.common.tables import table

LABEL = {"baseline": "Baseline (per-step DP)", "dp_powersgd": "DP PowerSGD r16 + EF",
         "pp_int8": "int8 pipeline links (per-step DP)", "diloco_h8": "DiLoCo H 8",
         "diloco_h32": "DiLoCo H 32", "streaming_int8": "Streaming DiLoCo (H 8, F 3, overlap 2, int8)",
         "diloco_h8_pp_int8": "DiLoCo H 8 + int8 pipeline links", "auto": "auto plan (quality-aware)"}
QUALITY_NAME = {"dp_powersgd": "dp_powersgd16"}  # the quality experiment's name of a benchmark variant
BUDGET = 0.5  # % of the baseline's loss
# Pairs compared round by round besides the budget's ranking: pipeline compression with and without DiLoCo.
PAIRS = [("diloco_h8_pp_int8", "diloco_h8"), ("diloco_h8_pp_int8", "pp_int8"), ("diloco_h8", "dp_powersgd"),
         ("streaming_int8", "diloco_h8"), ("streaming_int8", "dp_powersgd")]


def ci_text(ci, fmt):
    return "[—]" if ci is None else f"[{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def quality_of(q, variant):
    """(worst-seed %, mean %, how) at the planner's layout, or None."""
    for r in q.get("results", []):
        if r["name"] == QUALITY_NAME.get(variant, variant) and r["layout"] == q.get("planner_layout", "p2d2") \
                and r["max_pct"] is not None:
            return r["max_pct"], r["mean_pct"], f"measured ({r['layout']}, {len(r['final_val_loss'])} seeds)"
    return None


def settings(d):
    return open(os.path.join(d, "runs", "settings")).read().split()


def flags_in(d, variant):
    """A variant's train flags in one output, its own data path (under the output) written OUT/."""
    return open(os.path.join(d, "runs", f"{variant}.flags")).read().replace(d.rstrip("/") + "/", "OUT/")


def auto_quality(home):
    plan_path = os.path.join(home, "runs", "auto.plan.txt")
    plan = open(plan_path).read() if os.path.exists(plan_path) else ""
    m = re.search(r"^expected loss cost: \+?(-?[0-9.]+) % of the baseline's final validation loss: (.*)$", plan, re.M)
    c = re.search(r"^chosen: .*?: (.*) \(the lowest", plan, re.M)
    return (c.group(1) if c else None), ((float(m.group(1)), None, "the plan's expected cost: " + m.group(2)) if m else None)


def rep_means(dirs, v, flags, first, window):
    """{(output, round): mean ms over the window} and the runs' rows, of the outputs that ran V with FLAGS."""
    out = {}
    for i, d in enumerate(dirs):
        if not os.path.exists(os.path.join(d, "runs", f"{v}.flags")):
            continue
        if flags_in(d, v) != flags:
            print(f"note: {d}: {v} ran with other flags; left out")
            continue
        for f in glob.glob(os.path.join(d, "runs", f"{v}.r[0-9]*.jsonl")):
            k = (i, int(re.fullmatch(r".+\.r(\d+)\.jsonl", os.path.basename(f)).group(1)))
            rows = [json.loads(line) for line in open(f)]
            win = [r for r in rows if r["iter"] >= first]
            if len(win) == window:  # else an incomplete run
                out[k] = (rows, win)
    return out


def bench(dirs, q, window):
    """One bandwidth's runs, from one or more outputs of the same settings, their rounds pooled. A
    variant's flags are those of the first output that ran it; an output that ran it with other
    flags (the auto plan, calibrated per output, may choose otherwise) is left out."""
    bandwidth, latency, nodes, iters, _, layout = settings(dirs[0])
    iters = int(iters)
    first = iters - window + 1
    for d in dirs[1:]:
        if settings(d)[:4] != [bandwidth, latency, nodes, str(iters)]:
            raise Failure(f"{d}: other cluster settings or iterations than {dirs[0]}")
    found = {m.group(1) for d in dirs for f in glob.glob(os.path.join(d, "runs", "*.r[0-9]*.jsonl"))
             if (m := re.fullmatch(r"(.+)\.r\d+\.jsonl", os.path.basename(f)))}
    order = [v for v in LABEL if v in found] + sorted(found - set(LABEL))
    home = {v: next(d for d in dirs if os.path.exists(os.path.join(d, "runs", f"{v}.flags"))) for v in order}
    flags_of = {v: flags_in(home[v], v) for v in order}
    per_round, res = {}, {}
    for v in order:
        reps = rep_means(dirs, v, flags_of[v], first, window)
        if not reps:
            continue
        means = {k: statistics.mean(r["ms"] for r in win) for k, (_, win) in reps.items()}
        per_round[v] = means
        mean, ci = stats.t_interval(list(means.values()))
        wins = [r for _, win in reps.values() for r in win]
        res[v] = {"label": LABEL.get(v, v), "reps": len(means), "ms_mean": mean, "ms_ci95": ci,
                  "ms_ci95_halfwidth_pct": 100 * (ci[1] - ci[0]) / 2 / mean if ci else None,
                  "ms_rep_means": [means[k] for k in sorted(means)], "ms_best_rep": min(means.values()),
                  "ms_median_rep": statistics.median(means.values()),
                  "ms_spread_rep": max(means.values()) - min(means.values()),
                  "bytes_mb_per_iter": {c: statistics.mean(r["bytes"].get(c, 0) for r in wins) / 1e6
                                        for c in ("pp_fwd", "pp_bwd", "dp", "emb")},
                  "train_loss_last8": statistics.mean(r["loss"] for rows, _ in reps.values() for r in rows[-8:]),
                  "flags": ""}
    base_flags = flags_of["baseline"].split() if "baseline" in flags_of else []
    for v in res:  # the flags that differ from the baseline's (the model's are shared)
        mine = flags_of[v].split()
        res[v]["flags"] = " ".join(mine[len(base_flags):]) if mine[:len(base_flags)] == base_flags else " ".join(mine)
    base = per_round.get("baseline", {})
    for v, r in res.items():
        ratios = [base[k] / per_round[v][k] for k in per_round[v] if k in base]
        r["speedup"], r["speedup_ci95"] = stats.t_interval(ratios) if ratios else (None, None)
        qual = quality_of(q, v)
        if v == "auto":
            r["chosen"], qual = auto_quality(home[v])
        if v == "baseline":
            qual = (0.0, 0.0, "the reference")
        r["quality_worst_pct"], r["quality_mean_pct"], r["quality_how"] = qual if qual else (None, None, "not measured")
        r["train_loss_vs_baseline_pct"] = 100 * (r["train_loss_last8"] - res["baseline"]["train_loss_last8"]) / \
            res["baseline"]["train_loss_last8"] if "baseline" in res else None

    def paired(a, b):
        """b's time over a's, round by round (> 1: a is faster), with its 95 % t-interval."""
        ratios = stats.paired(per_round.get(a, {}), per_round.get(b, {}))
        if not ratios:
            return None
        m, ci = stats.t_interval(ratios)
        verdict = "too few rounds" if ci is None else "a faster" if ci[0] > 1 else "b faster" if ci[1] < 1 \
            else "not separated"
        return {"a": a, "b": b, "rounds": len(ratios), "ratio": m, "ratio_ci95": ci, "verdict": verdict}

    within = [v for v, r in res.items() if r["quality_worst_pct"] is not None and r["quality_worst_pct"] <= BUDGET]
    fastest = min(within, key=lambda v: res[v]["ms_mean"]) if within else None
    # When each output ran (its settings written .. its last run's metrics): the load samples to count.
    spans = [(os.path.getmtime(os.path.join(d, "runs", "settings")),
              max(os.path.getmtime(f) for f in glob.glob(os.path.join(d, "runs", "*.r[0-9]*.jsonl")))) for d in dirs]
    return {"bandwidth": bandwidth, "layout": layout, "nodes": int(nodes), "iters": iters, "dirs": dirs, "spans": spans,
            "reps": max(r["reps"] for r in res.values()), "window": [first, iters], "variants": res,
            "within_budget": within, "fastest_within_budget": fastest,
            "fastest_vs_others": [paired(fastest, v) for v in within if v != fastest] if fastest else [],
            "pairs": [p for p in (paired(a, b) for a, b in PAIRS if a in res and b in res) if p]}


def summarize(dirs, quality, load, command, window):
    q = json.load(open(quality)) if os.path.exists(quality) else {}
    by_bandwidth = {}  # the outputs of each bandwidth, in the order given
    for d in dirs:
        by_bandwidth.setdefault(settings(d)[0], []).append(d)
    benches = [bench(ds, q, window) for ds in by_bandwidth.values()]
    samples = [(float(w[0]), float(w[1])) for w in (line.split() for line in open(load)) if len(w) >= 2] \
        if load and os.path.exists(load) else []
    for b in benches:  # the 1-minute load averages sampled while this bandwidth's outputs ran
        one = [x for t, x in samples if any(lo <= t <= hi for lo, hi in b["spans"])]
        b["load"] = {"samples": len(one), "mean_1min": statistics.mean(one), "min_1min": min(one),
                     "max_1min": max(one)} if one else None
    return {"command": command, "quality": quality, "benches": benches}


def pair_text(b, p):
    lab = lambda v: b["variants"][v]["label"]  # noqa: E731
    verdict = {"a faster": f"{lab(p['a'])} faster", "b faster": f"{lab(p['b'])} faster",
               "not separated": "not separated", "too few rounds": "too few rounds"}[p["verdict"]]
    return f"{lab(p['b'])} / {lab(p['a'])} = {p['ratio']:.3f} {ci_text(p['ratio_ci95'], '.3f')} over {p['rounds']} " \
           f"rounds: {verdict}"


def render(doc):
    window = doc["benches"][0]["iters"] - doc["benches"][0]["window"][0] + 1 if doc["benches"] else 0
    lines = [f"Emulated cluster (scripts/cluster.sh): 4 nodes of one rank, T1 P2 D2, the speedup model (8 layers, "
             f"hidden 256, seq 64, vocab 1024, global batch 32), every pipeline and DP transfer over a shaped link. "
             f"A run's time is its mean ms/iteration over its last {window} iterations (whole rounds of every H); "
             f"per variant the mean over the interleaved repetitions with a 95 % t-interval, and the speedup paired "
             f"by round with its 95 % t-interval. Quality (val loss vs baseline): the DiLoCo quality experiment "
             f"({doc['quality']}, P2 D2, worst of its seeds), the auto plan's own expected cost. Made by "
             f"`{doc['command']}`.",
             "Machine load: the 1-minute load average (2 vCPUs shared with other jobs), sampled every 30 s "
             "while each bandwidth ran; see each table's heading."]
    for b in doc["benches"]:
        ld = b["load"]
        lines += ["", f"### {b['bandwidth']} ({b['reps']} repetitions of {b['iters']} iterations; iterations "
                      f"{b['window'][0]}-{b['window'][1]} timed; load " +
                  (f"mean {ld['mean_1min']:.1f}, range {ld['min_1min']:.1f}-{ld['max_1min']:.1f} over {ld['samples']} "
                   f"samples)" if ld else "not sampled)"), ""]
        rows = []
        for v, r in b["variants"].items():
            by = r["bytes_mb_per_iter"]
            sp = "—" if r["speedup"] is None else f"{r['speedup']:.2f}x {ci_text(r['speedup_ci95'], '.2f')}"
            qv = "—" if r["quality_worst_pct"] is None else f"{r['quality_worst_pct']:+.2f} %"
            tl = "—" if r["train_loss_vs_baseline_pct"] is None else f"{r['train_loss_vs_baseline_pct']:+.2f} %"
            hw = "—" if r["ms_ci95_halfwidth_pct"] is None else f"{r['ms_ci95_halfwidth_pct']:.1f}"
            rows.append([r["label"] + (f" ({r['chosen']})" if r.get("chosen") else ""),
                         f"{r['ms_mean']:.0f} {ci_text(r['ms_ci95'], '.0f')}", hw,
                         f"{r['ms_best_rep']:.0f} / {r['ms_median_rep']:.0f} / {r['ms_spread_rep']:.0f}", sp,
                         f"{by['dp']:.2f}", f"{by['pp_fwd'] + by['pp_bwd']:.2f}", f"{by['emb']:.2f}", qv, tl])
        lines += table(["variant", "ms/iter mean [95 % CI]", "± %", "reps: best / median / spread",
                        "speedup [95 % CI]", "dp MB/it", "pp MB/it", "emb MB/it", "val loss vs baseline (worst seed)",
                        "train loss (last 8) vs baseline"], rows)
        f = b["fastest_within_budget"]
        lines.append("")
        if f:
            lines.append(f"Fastest (mean) within {BUDGET} % of the baseline's loss (worst seed): "
                         f"**{b['variants'][f]['label']}** ({b['variants'][f]['ms_mean']:.0f} ms/iter). Round by round "
                         f"against the others within the budget (time ratio, 95 % t-interval):")
            lines += [f"- {pair_text(b, p)}" for p in b["fastest_vs_others"]] or ["- (none)"]
        else:
            lines.append(f"No variant is within {BUDGET} % of the baseline's loss.")
        if b["pairs"]:
            lines += ["", "Other pairs, round by round:"] + [f"- {pair_text(b, p)}" for p in b["pairs"]]
    return lines


def write(out, doc):
    with open(out + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    publish(doc, out)


def publish(doc, out):
    text = "\n".join(render(doc)) + "\n"
    with open(out + ".md", "w") as f:
        f.write(text)
    print(text, end="")
