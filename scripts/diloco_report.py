"""Summarises scripts/experiment-diloco.sh's runs in OUT: OUT/diloco-quality.json,
OUT/diloco-quality.md and OUT/diloco-quality.png (validation curves).

   /usr/bin/python3 scripts/diloco_report.py OUT

OUT/variants.json lists the variants (each with its layouts and the setting of every link
class); the runs are OUT/NAME_LAYOUT_sSEED.jsonl. Every run is compared with the baseline of
the same seed and layout; a variant counts only when every seed's run reached the final
evaluation. Bytes per iteration are means over all training iterations of the first seed's
run (DiLoCo sends only in the iterations where a sync lands, so only whole rounds compare),
summed over ranks; the pipeline's also leave out the evaluation iterations.

The json's "variants" (the DiLoCo variants at P2 D2) and "link_costs" (DiLoCo alone on the dp
link, P2 D2) are what `optimus-cc plan --auto --max-loss-increase --diloco-json` reads: the
schema of scripts/compressors_report.py's compressors.json. "results" holds every variant at
every layout.
"""
import json
import os
import statistics
import sys

out = sys.argv[1]
exp = json.load(open(os.path.join(out, "variants.json")))
iters, seeds, layouts = exp["iters"], exp["seeds"], exp["layouts"]
PLANNER_LAYOUT = "p2d2"
LAYOUT_NAMES = {"p2d2": "P2 D2", "p1d4": "P1 D4"}


def read_run(path):
    if not os.path.exists(path):
        return None
    rows = []
    for line in open(path):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a run still being written
    return rows


def done(rows):
    return bool(rows) and "val_loss" in rows[-1] and rows[-1].get("iter") == iters


def bytes_per_iter(rows):
    if not rows:
        return None
    train = [r for r in rows if "val_loss" not in r] or rows
    b = {"dp": statistics.mean(r.get("bytes", {}).get("dp", 0) for r in rows),
         "emb": statistics.mean(r.get("bytes", {}).get("emb", 0) for r in rows)}
    for k in ("pp_fwd", "pp_bwd"):
        b[k] = statistics.mean(r.get("bytes", {}).get(k, 0) for r in train)
    return b


runs = {(v["name"], l): {s: read_run(os.path.join(out, f"{v['name']}_{l}_s{s}.jsonl")) for s in seeds}
        for v in exp["variants"] for l in v["layouts"]}
# Diagnostics run on the seeds named when they ran: theirs are the seeds whose run is there.
for v in exp["variants"]:
    if v["kind"] == "diagnostic":
        for l in v["layouts"]:
            runs[(v["name"], l)] = {s: r for s in seeds
                                    if (r := read_run(os.path.join(out, f"{v['name']}_{l}_s{s}.jsonl"))) is not None}
base = {l: {s: rows[-1]["val_loss"] for s, rows in runs.get(("baseline", l), {}).items() if done(rows)}
        for l in layouts}

def train_loss(rows):
    return {r["iter"]: r["loss"] for r in rows or [] if "loss" in r}  # an evaluation row has the step's loss too


def train_gap(seed_runs, layout):
    """The training loss against the same-seed baseline's on the same tokens, in %, averaged over
    each quarter of the run and the seeds: where in training a variant falls behind."""
    quarters = [[] for _ in range(4)]
    for s, rows in seed_runs.items():
        mine, ref = train_loss(rows), train_loss(runs.get(("baseline", layout), {}).get(s))
        if not done(rows) or len(ref) < iters:
            continue
        for i in range(1, iters + 1):
            quarters[min(3, (i - 1) * 4 // iters)].append(100 * (mine[i] - ref[i]) / ref[i])
    return [statistics.mean(q) for q in quarters] if all(quarters) else None


results = []
for v in exp["variants"]:
    for l in v["layouts"]:
        seed_runs = runs[(v["name"], l)]
        complete = bool(seed_runs) and all(done(r) for r in seed_runs.values())
        val = {s: r[-1]["val_loss"] for s, r in seed_runs.items() if done(r)}
        rel = {s: 100 * (x - base[l][s]) / base[l][s] for s, x in val.items() if s in base[l]}
        agg = complete and len(rel) == len(seed_runs)
        first = next((r for r in seed_runs.values() if r), None)
        curves = {}
        for s, r in seed_runs.items():
            for row in r or []:
                if "val_loss" in row:
                    curves.setdefault(row["iter"], []).append(row["val_loss"])
        ms = [row["ms"] for r in seed_runs.values() if r for row in r[2:] if "ms" in row and "val_loss" not in row]
        results.append({
            "name": v["name"], "label": v["label"], "kind": v["kind"], "layout": l, "flags": v["flags"],
            "links": v["links"], "complete": complete,
            "runs": {str(s): "complete" if done(r) else "missing" if r is None else f"at iter {r[-1]['iter'] if r else 0}"
                     for s, r in seed_runs.items()},
            "final_val_loss": {str(s): x for s, x in val.items()},
            "vs_baseline_pct": {str(s): p for s, p in rel.items()},
            "mean_pct": statistics.mean(rel.values()) if agg else None,
            "max_pct": max(rel.values()) if agg else None,
            "min_pct": min(rel.values()) if agg else None,
            "bytes_per_iter": bytes_per_iter(first),
            "val_curve": {str(i): statistics.mean(x) for i, x in sorted(curves.items()) if len(x) == len(seed_runs)},
            "train_gap_pct_by_quarter": train_gap(seed_runs, l),
            "ms_per_iter_mean_here": statistics.mean(ms) if ms else None,
        })

planner = [r for r in results if r["layout"] == PLANNER_LAYOUT and r["kind"] in ("single", "combo")]
link_costs = {"pp_fwd": [], "pp_bwd": [], "dp": []}
for r in planner:
    if r["kind"] == "single" and r["complete"] and r["mean_pct"] is not None:
        link_costs["dp"].append({"setting": r["links"]["dp"], "variant": r["name"], "mean_pct": r["mean_pct"],
                                 "max_pct": r["max_pct"], "min_pct": r["min_pct"], "seeds": len(r["final_val_loss"]),
                                 "bytes_per_iter": r["bytes_per_iter"]["dp"] if r["bytes_per_iter"] else None})
summary = {"description": exp["description"], "command": exp["command"], "iters": iters, "seeds": seeds,
           "layouts": layouts, "planner_layout": PLANNER_LAYOUT,
           "baseline": {l: {"final_val_loss": {str(s): x for s, x in base[l].items()}} for l in layouts},
           "variants": planner, "link_costs": link_costs, "results": results}
json.dump(summary, open(os.path.join(out, "diloco-quality.json"), "w"), indent=1)

num = lambda x: "—" if x is None else f"{x / 1e6:.2f}"  # noqa: E731
lines = [f"{exp['description']}; seeds {', '.join(map(str, seeds))}; each run against the baseline of the same seed "
         f"and layout; final validation loss at iteration {iters}; bytes per iteration summed over ranks, in MB "
         f"(DP: the mean over all {iters} iterations, i.e. whole rounds of every H). Made by `{exp['command']}`.", ""]
for l in layouts:
    lines += [f"### {LAYOUT_NAMES.get(l, l)}", "",
              "| variant | flags | dp MB/it | pp MB/it | final val loss per seed (vs same-seed baseline) | mean | worst |",
              "|---|---|---|---|---|---|---|"]
    for r in (r for r in results if r["layout"] == l and r["kind"] != "diagnostic"):
        b = r["bytes_per_iter"] or {}
        pp = None if not b else b["pp_fwd"] + b["pp_bwd"]
        if r["complete"]:
            per = ", ".join(f"s{s}: {x:.4f}" + (f" ({r['vs_baseline_pct'][s]:+.2f} %)" if s in r["vs_baseline_pct"] else "")
                            for s, x in r["final_val_loss"].items())
        else:
            per = "incomplete: " + ", ".join(f"s{s} {st}" for s, st in r["runs"].items())
        mean = "—" if r["mean_pct"] is None else f"{r['mean_pct']:+.2f} %"
        worst = "—" if r["max_pct"] is None else f"{r['max_pct']:+.2f} %"
        flags = f"`{r['flags']}`" if r["flags"] else "—"
        lines.append(f"| {r['label']} | {flags} | {num(b.get('dp'))} | {num(pp)} | {per} | {mean} | {worst} |")
    within = [r for r in results if r["layout"] == l and r["kind"] not in ("baseline", "diagnostic")
              and r["max_pct"] is not None and r["max_pct"] <= 0.5]
    lines += ["", f"Within 0.5 % of the baseline on every seed at {LAYOUT_NAMES.get(l, l)}: "
              + (", ".join(f"{r['label']} ({r['max_pct']:+.2f} %)" for r in within) or "none"), ""]
# Where in training each DiLoCo setting falls behind, and the diagnostics beside the defaults.
for l in layouts:
    rows = [r for r in results if r["layout"] == l and r["train_gap_pct_by_quarter"]
            and (r["kind"] == "diagnostic" or (r["links"]["dp"] or {}).get("method") == "diloco")]
    if not rows:
        continue
    q = iters // 4
    lines += [f"### {LAYOUT_NAMES.get(l, l)}: DiLoCo's outer step, defaults against plain averaging", "",
              "Diagnostics (`kind: diagnostic`, not candidates for the planner) average the replicas' parameters "
              "every H steps (outer lr 1, momentum 0), beside the defaults (outer lr 0.7, Nesterov momentum 0.9). "
              "Training loss against the same-seed baseline's on the same tokens, mean over each quarter of the "
              "run and the seeds run; final validation loss as above.", "",
              "| variant | seeds | " + " | ".join(f"train loss, iters {i * q + 1}-{(i + 1) * q}" for i in range(4))
              + " | final val loss vs baseline (mean) |", "|---|---|" + "---|" * 4 + "---|"]
    for r in rows:
        mean = "—" if r["mean_pct"] is None else f"{r['mean_pct']:+.2f} %"
        lines.append(f"| {r['label']} | {', '.join(r['final_val_loss'])} | "
                     + " | ".join(f"{x:+.2f} %" for x in r["train_gap_pct_by_quarter"]) + f" | {mean} |")
    lines.append("")
text = "\n".join(lines) + "\n"
open(os.path.join(out, "diloco-quality.md"), "w").write(text)
print(text)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, axes = plt.subplots(1, len(layouts), figsize=(7 * len(layouts), 5), squeeze=False)
for ax, l in zip(axes[0], layouts):
    for r in (r for r in results if r["layout"] == l and r["val_curve"]):
        xs = [int(i) for i in r["val_curve"]]
        ax.plot(xs, list(r["val_curve"].values()), marker="o", markersize=3, label=r["label"])
    ax.set_title(f"{LAYOUT_NAMES.get(l, l)}: validation loss (mean of {len(seeds)} seeds)")
    ax.set_xlabel("iteration")
    ax.set_ylabel("validation loss")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
fig.savefig(os.path.join(out, "diloco-quality.png"), dpi=110, bbox_inches="tight")
print(f"wrote {out}/diloco-quality.json, diloco-quality.md, diloco-quality.png")
