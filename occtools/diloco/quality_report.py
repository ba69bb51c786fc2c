"""diloco-quality's report from the runs in OUT: OUT/diloco-quality.{json,md,png}.

OUT/variants.json lists the variants (each with its layouts and the setting of every link class);
the runs are OUT/NAME_LAYOUT_sSEED.jsonl. Every run is compared with the baseline of the same seed
and layout; a variant counts only when every seed's run reached the final evaluation. Bytes per
iteration are means over all training iterations of the first seed's run (DiLoCo sends only in
the iterations where a sync lands, so only whole rounds compare), summed over ranks; the
pipeline's also leave out the evaluation iterations. The json's "variants" (the DiLoCo variants at
P2 D2) and "link_costs" (DiLoCo alone on the dp link, P2 D2) are what `optimus-cc plan --auto
--max-loss-increase --diloco-json` reads: the schema of the compressor sweep's compressors.json.
"results" holds every variant at every layout; the .md and .png are rendered from the json alone.
"""

import json
import os
import statistics

from occtools.common import metrics, plots
from occtools.common.tables import table

PLANNER_LAYOUT = "p2d2"
LAYOUT_NAMES = {"p2d2": "P2 D2", "p1d4": "P1 D4"}


def bytes_per_iter(rows):
    if not rows:
        return None
    train = [r for r in rows if "val_loss" not in r] or rows
    b = {k: statistics.mean(r.get("bytes", {}).get(k, 0) for r in rows) for k in ("dp", "emb")}
    b.update({k: statistics.mean(r.get("bytes", {}).get(k, 0) for r in train) for k in ("pp_fwd", "pp_bwd")})
    return b


def train_loss(rows):
    return {r["iter"]: r["loss"] for r in rows or [] if "loss" in r}  # an evaluation row has the step's loss too


def train_gap(seed_runs, base_runs, iters):
    """The training loss against the same-seed baseline's on the same tokens, in %, averaged over each
    quarter of the run and the seeds: where in training a variant falls behind."""
    quarters = [[] for _ in range(4)]
    for s, rows in seed_runs.items():
        mine, ref = train_loss(rows), train_loss(base_runs.get(s))
        if not metrics.finished(rows, iters) or len(ref) < iters:
            continue
        for i in range(1, iters + 1):
            quarters[min(3, (i - 1) * 4 // iters)].append(metrics.pct_vs(mine[i], ref[i]))
    return [statistics.mean(q) for q in quarters] if all(quarters) else None


def result(v, layout, seed_runs, base, base_runs, iters):
    done = {s: r for s, r in seed_runs.items() if metrics.finished(r, iters)}
    complete = bool(seed_runs) and len(done) == len(seed_runs)
    val = {s: r[-1]["val_loss"] for s, r in done.items()}
    rel = {s: metrics.pct_vs(x, base[s]) for s, x in val.items() if s in base}
    agg = complete and len(rel) == len(seed_runs)
    curves = {}
    for r in seed_runs.values():
        for row in r or []:
            if "val_loss" in row:
                curves.setdefault(row["iter"], []).append(row["val_loss"])
    ms = [row["ms"] for r in seed_runs.values() if r for row in r[2:] if "ms" in row and "val_loss" not in row]
    return {"name": v["name"], "label": v["label"], "kind": v["kind"], "layout": layout, "flags": v["flags"],
            "links": v["links"], "complete": complete,
            "runs": {str(s): "complete" if s in done else "missing" if r is None else
                     f"at iter {r[-1]['iter'] if r else 0}" for s, r in seed_runs.items()},
            "final_val_loss": {str(s): x for s, x in val.items()},
            "vs_baseline_pct": {str(s): p for s, p in rel.items()},
            "mean_pct": statistics.mean(rel.values()) if agg else None,
            "max_pct": max(rel.values()) if agg else None,
            "min_pct": min(rel.values()) if agg else None,
            "bytes_per_iter": bytes_per_iter(next((r for r in seed_runs.values() if r), None)),
            "val_curve": {str(i): statistics.mean(x) for i, x in sorted(curves.items()) if len(x) == len(seed_runs)},
            "train_gap_pct_by_quarter": train_gap(seed_runs, base_runs, iters),
            "ms_per_iter_mean_here": statistics.mean(ms) if ms else None}


def summarize(out):
    with open(os.path.join(out, "variants.json")) as f:
        exp = json.load(f)
    iters, seeds, layouts = exp["iters"], exp["seeds"], exp["layouts"]

    def runs_of(v, layout):
        got = {s: metrics.read_run(os.path.join(out, f"{v['name']}_{layout}_s{s}.jsonl")) for s in seeds}
        # Diagnostics run on the seeds named when they ran: theirs are the seeds whose run is there.
        return {s: r for s, r in got.items() if r is not None} if v["kind"] == "diagnostic" else got
    runs = {(v["name"], lay): runs_of(v, lay) for v in exp["variants"] for lay in v["layouts"]}
    base_runs = {lay: runs.get(("baseline", lay), {}) for lay in layouts}
    base = {lay: {s: r[-1]["val_loss"] for s, r in base_runs[lay].items() if metrics.finished(r, iters)}
            for lay in layouts}
    results = [result(v, lay, runs[(v["name"], lay)], base[lay], base_runs[lay], iters)
               for v in exp["variants"] for lay in v["layouts"]]
    planner = [r for r in results if r["layout"] == PLANNER_LAYOUT and r["kind"] in ("single", "combo")]
    link_costs = {"pp_fwd": [], "pp_bwd": [], "dp": []}
    for r in planner:
        if r["kind"] == "single" and r["complete"] and r["mean_pct"] is not None:
            link_costs["dp"].append({"setting": r["links"]["dp"], "variant": r["name"], "mean_pct": r["mean_pct"],
                                     "max_pct": r["max_pct"], "min_pct": r["min_pct"],
                                     "seeds": len(r["final_val_loss"]),
                                     "bytes_per_iter": r["bytes_per_iter"]["dp"] if r["bytes_per_iter"] else None})
    return {"description": exp["description"], "command": exp["command"], "iters": iters, "seeds": seeds,
            "layouts": layouts, "planner_layout": PLANNER_LAYOUT,
            "baseline": {lay: {"final_val_loss": {str(s): x for s, x in base[lay].items()}} for lay in layouts},
            "variants": planner, "link_costs": link_costs, "results": results}


def pct(x):
    return "—" if x is None else f"{x:+.2f} %"


def render(summary):
    iters, layouts, results = summary["iters"], summary["layouts"], summary["results"]

    def mb(x):
        return "—" if x is None else f"{x / 1e6:.2f}"
    lines = [f"{summary['description']}; seeds {', '.join(map(str, summary['seeds']))}; each run against the baseline "
             f"of the same seed and layout; final validation loss at iteration {iters}; bytes per iteration summed "
             f"over ranks, in MB (DP: the mean over all {iters} iterations, i.e. whole rounds of every H). Made by "
             f"`{summary['command']}`.", ""]
    for lay in layouts:
        name = LAYOUT_NAMES.get(lay, lay)
        rows = []
        for r in (r for r in results if r["layout"] == lay and r["kind"] != "diagnostic"):
            b = r["bytes_per_iter"] or {}
            if r["complete"]:
                per = ", ".join(f"s{s}: {x:.4f}" + (f" ({r['vs_baseline_pct'][s]:+.2f} %)" if s in r["vs_baseline_pct"]
                                                    else "") for s, x in r["final_val_loss"].items())
            else:
                per = "incomplete: " + ", ".join(f"s{s} {st}" for s, st in r["runs"].items())
            rows.append([r["label"], f"`{r['flags']}`" if r["flags"] else "—", mb(b.get("dp")),
                         mb(None if not b else b["pp_fwd"] + b["pp_bwd"]), per, pct(r["mean_pct"]), pct(r["max_pct"])])
        within = [r for r in results if r["layout"] == lay and r["kind"] not in ("baseline", "diagnostic")
                  and r["max_pct"] is not None and r["max_pct"] <= 0.5]
        lines += [f"### {name}", ""] + table(
            ["variant", "flags", "dp MB/it", "pp MB/it", "final val loss per seed (vs same-seed baseline)", "mean",
             "worst"], rows)
        lines += ["", f"Within 0.5 % of the baseline on every seed at {name}: "
                  + (", ".join(f"{r['label']} ({r['max_pct']:+.2f} %)" for r in within) or "none"), ""]
    # Where in training each DiLoCo setting falls behind, and the diagnostics beside the defaults.
    for lay in layouts:
        rows = [r for r in results if r["layout"] == lay and r["train_gap_pct_by_quarter"]
                and (r["kind"] == "diagnostic" or (r["links"]["dp"] or {}).get("method") == "diloco")]
        if not rows:
            continue
        q = iters // 4
        lines += [f"### {LAYOUT_NAMES.get(lay, lay)}: DiLoCo's outer step, defaults against plain averaging", "",
                  "Diagnostics (`kind: diagnostic`, not candidates for the planner) average the replicas' parameters "
                  "every H steps (outer lr 1, momentum 0), beside the defaults (outer lr 0.7, Nesterov momentum 0.9). "
                  "Training loss against the same-seed baseline's on the same tokens, mean over each quarter of the "
                  "run and the seeds run; final validation loss as above.", ""]
        lines += table(["variant", "seeds", *(f"train loss, iters {i * q + 1}-{(i + 1) * q}" for i in range(4)),
                        "final val loss vs baseline (mean)"],
                       [[r["label"], ", ".join(r["final_val_loss"]), *(f"{x:+.2f} %" for x in r["train_gap_pct_by_quarter"]),
                         pct(r["mean_pct"])] for r in rows])
        lines.append("")
    return lines


def plot(summary, path):
    plt = plots.pyplot()
    if plt is None:
        return False
    layouts = summary["layouts"]
    fig, axes = plt.subplots(1, len(layouts), figsize=(7 * len(layouts), 5), squeeze=False)
    for ax, lay in zip(axes[0], layouts):
        for r in (r for r in summary["results"] if r["layout"] == lay and r["val_curve"]):
            ax.plot([int(i) for i in r["val_curve"]], list(r["val_curve"].values()), marker="o", markersize=3,
                    label=r["label"])
        ax.set_title(f"{LAYOUT_NAMES.get(lay, lay)}: validation loss (mean of {len(summary['seeds'])} seeds)")
        ax.set_xlabel("iteration")
        ax.set_ylabel("validation loss")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    plots.save(fig, path, dpi=110)
    return True


def publish(summary, out):
    """OUT/diloco-quality.md and .png from a summary (the json's content)."""
    text = "\n".join(render(summary)) + "\n"
    with open(os.path.join(out, "diloco-quality.md"), "w") as f:
        f.write(text)
    print(text)
    drew = plot(summary, os.path.join(out, "diloco-quality.png"))
    print(f"wrote {out}/diloco-quality.md" + (", diloco-quality.png" if drew else ""))


def write(out):
    summary = summarize(out)
    with open(os.path.join(out, "diloco-quality.json"), "w") as f:
        json.dump(summary, f, indent=1)
    publish(summary, out)
