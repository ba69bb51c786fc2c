"""Summarises a compressor sweep in OUT: OUT/compressors.json, OUT/compressors.md and
OUT/pareto.png.

   /usr/bin/python3 scripts/compressors_report.py OUT

OUT/variants.json (written by the sweep) lists the variants, each with the setting of every
link class (pp_fwd, pp_bwd, dp; null = uncompressed); their runs are OUT/NAME_sSEED.jsonl.
Every run is compared with the baseline of the same seed; a variant counts only when every
seed's run has reached the final evaluation, so a sweep still running can be reported at
any time (variants with no run at all are left out and named once). Bytes are means over
the training iterations (not the evaluation ones, whose rows also count the evaluation's
forward traffic) of the last 80 % of the first seed's run (they do not depend on the seed).

Each class's cut and bits per value are against the run's own uncompressed wire: the
baseline's bytes of the class are its values times the wire's bytes per value (the metrics'
"wire" names the format per class: bf16 / fp16 = 2 bytes, fp32 = 4; runs from before it
sent fp32), so bits per value = 8 x bytes sent / values, scales and padding included.
The target (issue 40): both pipeline links cut >= 4x (moonshot 6x) against that wire
within 0.5 % of the same-seed baseline's final validation loss on every seed.
OUT/load.txt (the sweep's: name, seed, start, load, end, load) gives the machine's load.

compressors.json's "link_costs" is read by `optimus-cc plan --auto --max-loss-increase`:
keep its schema.
"""
import json
import os
import statistics
import sys

out = sys.argv[1]
CLASSES = ("pp_fwd", "pp_bwd", "dp", "emb")
LINKS = ("pp_fwd", "pp_bwd", "dp")
sweep = json.load(open(os.path.join(out, "variants.json")))
iters, seeds = sweep["iters"], sweep["seeds"]


def read_run(path):
    """The rows of one metrics file, or None if it does not exist. A run still being
    written may end in a partial line: skip lines that do not parse."""
    if not os.path.exists(path):
        return None
    rows = []
    for line in open(path):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def ratio(num, den):
    return num / den if num is not None and den else None


runs = {}  # name -> seed -> rows (None: missing)
for v in sweep["variants"]:
    runs[v["name"]] = {s: read_run(os.path.join(out, f"{v['name']}_s{s}.jsonl")) for s in seeds}
not_run = [v["name"] for v in sweep["variants"] if all(r is None for r in runs[v["name"]].values())]
sweep["variants"] = [v for v in sweep["variants"] if v["name"] not in not_run]


def done(rows):
    # Finished = the last row is the final evaluation (the iteration count of the sweep).
    return bool(rows) and "val_loss" in rows[-1] and rows[-1].get("iter") == iters


def bytes_per_iter(name):
    """Mean bytes per iteration over the last 80 % of the first seed's run that has rows
    (a running variant still gets its bytes); None if no run has started."""
    rows = next((r for r in (runs[name][s] for s in seeds) if r), None)
    if not rows:
        return None
    tail = [r for r in rows[len(rows) // 5:] if "val_loss" not in r] or rows[len(rows) // 5:]
    return {k: statistics.mean(r.get("bytes", {}).get(k, 0) for r in tail) for k in CLASSES}


base_var = next((v for v in sweep["variants"] if v.get("kind") == "baseline"), None)
base_name = base_var["name"] if base_var else "baseline"
base_val = {s: rows[-1]["val_loss"] for s, rows in runs.get(base_name, {}).items() if done(rows)}
base_bytes = bytes_per_iter(base_name) if base_name in runs and base_var else None
base_pipe = base_bytes["pp_fwd"] + base_bytes["pp_bwd"] if base_bytes else None


def wire_formats(name):
    """The uncompressed wire's format per class, from the run's metrics ("wire"; fp32 before it existed)."""
    rows = next((r for r in (runs[name][s] for s in seeds) if r), None) or [{}]
    wire = next((r["wire"] for r in rows if "wire" in r), {})
    return {k: wire.get(k, "fp32").split(",")[0].split()[0] for k in CLASSES}


WIDTH = {"bf16": 2, "fp16": 2, "fp32": 4}
base_wire = wire_formats(base_name) if base_bytes else {k: "fp32" for k in CLASSES}
# Values per iteration of each class: the baseline's bytes over its wire's bytes per value.
values = {k: base_bytes[k] / WIDTH.get(base_wire[k], 4) for k in CLASSES} if base_bytes else None


def bits_per_value(b, k):
    return 8 * b[k] / values[k] if b and values and values[k] else None

variants = []
for v in sweep["variants"]:
    name = v["name"]
    seed_runs = runs[name]
    status = {str(s): ({"state": "complete"} if done(rows) else {"state": "missing"} if rows is None
                       else {"state": "running", "last_iter": rows[-1].get("iter") if rows else None})
              for s, rows in seed_runs.items()}
    complete = all(done(rows) for rows in seed_runs.values())
    val = {s: rows[-1]["val_loss"] for s, rows in seed_runs.items() if done(rows)}
    rel = {s: 100 * (x - base_val[s]) / base_val[s] for s, x in val.items() if s in base_val}
    # Aggregates only when every seed has its same-seed comparison: a mean over a subset
    # of seeds would not be comparable with the other variants'.
    agg = complete and len(rel) == len(seeds)
    b = bytes_per_iter(name)
    pipe = b["pp_fwd"] + b["pp_bwd"] if b else None
    ms = [r["ms"] for rows in seed_runs.values() if rows for r in rows[2:] if "ms" in r]  # first 2: warm-up
    variants.append({
        "name": name, "label": v.get("label", name), "kind": v.get("kind"), "paper": bool(v.get("paper")),
        "flags": v.get("flags", ""), "links": v.get("links", {}), "complete": complete, "runs": status,
        "final_val_loss": {str(s): x for s, x in val.items()},
        "vs_baseline_pct": {str(s): p for s, p in rel.items()},
        "mean_pct": statistics.mean(rel.values()) if agg else None,
        "max_pct": max(rel.values()) if agg else None,
        "min_pct": min(rel.values()) if agg else None,
        "spread_pct": max(rel.values()) - min(rel.values()) if agg else None,
        "bytes_per_iter": b, "pipeline_bytes_per_iter": pipe,
        "pipeline_reduction": ratio(base_pipe, pipe),
        "dp_reduction": ratio(base_bytes and base_bytes["dp"], b and b["dp"]),
        # Against the run's own uncompressed wire (the baseline's bytes of the class).
        "cut": {k: ratio(base_bytes and base_bytes[k], b and b[k]) for k in LINKS},
        "bits_per_value": {k: bits_per_value(b, k) for k in LINKS},
        "pipeline_bits_per_value": (8 * pipe / (values["pp_fwd"] + values["pp_bwd"])
                                    if pipe is not None and values and values["pp_fwd"] + values["pp_bwd"] else None),
        "ms_per_iter_median": statistics.median(ms) if ms else None,
    })

# The lossless stage must not change training: each rANS variant (NAME_rans) against its twin
# without it (NAME), every training loss and validation loss of every seed compared exactly.
lossless_twins = []
names = {r["name"] for r in variants}
for r in variants:
    twin = r["name"].removesuffix("_rans")
    if twin == r["name"] or twin not in names:
        continue
    compared, differ = 0, []
    for s in seeds:
        a, b = runs[r["name"]][s], runs[twin][s]
        if not (done(a) and done(b)):
            continue
        key = lambda rows: [(x.get("iter"), "val_loss" in x, x.get("val_loss", x.get("loss"))) for x in rows
                            if "loss" in x or "val_loss" in x]
        ka, kb = key(a), key(b)
        compared += 1
        if ka != kb:
            differ.append(str(s))
    twin_row = next(v for v in variants if v["name"] == twin)
    lossless_twins.append({"variant": r["name"], "twin": twin, "seeds_compared": compared,
                           "identical": compared > 0 and not differ, "differing_seeds": differ,
                           "pipeline_bytes_ratio": ratio(twin_row["pipeline_bytes_per_iter"],
                                                         r["pipeline_bytes_per_iter"])})

# The planner's input: what compressing one link class alone costs in quality, from the
# variants that change exactly that class.
link_costs = {k: [] for k in LINKS}
for r in variants:
    if r["kind"] != "single" or not r["complete"] or r["mean_pct"] is None:
        continue
    changed = [k for k in LINKS if r["links"].get(k)]
    if len(changed) != 1:
        print(f"warning: single variant {r['name']} compresses {changed or 'no link'}, not one link class; "
              f"left out of link_costs", file=sys.stderr)
        continue
    k = changed[0]
    link_costs[k].append({"setting": r["links"][k], "variant": r["name"], "mean_pct": r["mean_pct"],
                          "max_pct": r["max_pct"], "min_pct": r["min_pct"], "seeds": len(r["final_val_loss"]),
                          "bytes_per_iter": r["bytes_per_iter"][k],
                          "reduction": ratio(base_bytes and base_bytes[k], r["bytes_per_iter"][k])})

# The machine's load during the sweep (OUT/load.txt: name seed start load end load).
loads = []
if os.path.exists(os.path.join(out, "load.txt")):
    for line in open(os.path.join(out, "load.txt")):
        f = line.split()
        if len(f) == 6:
            loads += [float(f[3]), float(f[5])]
load = ({"min": min(loads), "median": statistics.median(loads), "max": max(loads), "samples": len(loads)}
        if loads else None)


def meets(r, cut):
    c = r["cut"]
    return (r["complete"] and r["max_pct"] is not None and c["pp_fwd"] is not None and c["pp_bwd"] is not None
            and c["pp_fwd"] >= cut and c["pp_bwd"] >= cut and r["max_pct"] <= 0.5)


summary = {"description": sweep.get("description", ""), "command": sweep.get("command", ""), "iters": iters,
           "precision": sweep.get("precision", "fp32"), "seeds": seeds,
           "baseline": {"final_val_loss": {str(s): x for s, x in base_val.items()}, "bytes_per_iter": base_bytes,
                        "wire": base_wire, "values_per_iter": values},
           "target": {"pp_cut": 4, "moonshot_pp_cut": 6, "max_loss_pct": 0.5,
                      "met_by": [r["name"] for r in variants if meets(r, 4)],
                      "moonshot_met_by": [r["name"] for r in variants if meets(r, 6)]},
           "load": load, "not_run": not_run, "lossless_twins": lossless_twins, "variants": variants, "link_costs": link_costs}
json.dump(summary, open(os.path.join(out, "compressors.json"), "w"), indent=1)

num = lambda x: "—" if x is None else f"{x:.0f}"


def link_cell(r, k):
    b, bits, cut = (r["bytes_per_iter"] or {}).get(k), r["bits_per_value"][k], r["cut"][k]
    if b is None:
        return "—"
    return f"{num(b)}" + ("" if bits is None else f" ({bits:.2f} b/v, {cut:.2f}x)")


wire_note = ", ".join(f"{k} {base_wire[k]}" for k in LINKS)
lines = [f"{summary['description']}; seeds {', '.join(map(str, seeds))}; each run against the "
         f"baseline of the same seed; bytes per iteration summed over ranks (mean over the training iterations of the "
         f"last 80 %, evaluation iterations left out), with bits per value (b/v: scales and padding included) and "
         f"the cut against the run's own uncompressed wire ({wire_note}). "
         f"Made by `{summary['command']}`." + (
             f" Machine load (1-minute average, 2 vCPUs shared with other jobs) over the runs: median "
             f"{load['median']:.1f}, range {load['min']:.1f}-{load['max']:.1f}; the losses do not depend on it, the "
             f"ms/iteration in compressors.json do." if load else ""), "",
         "| variant | kind | flags | pp_fwd B/iter | pp_bwd B/iter | dp B/iter | pipeline b/v (cut) | "
         "final val loss per seed (vs same-seed baseline) | mean vs baseline | worst seed | spread (pp) |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in variants:
    label = r["label"] + (" (paper)" if r["paper"] else "")
    flags = f"`{r['flags']}`" if r["flags"] else "—"
    pb = r["pipeline_bits_per_value"]
    red = "—" if r["pipeline_reduction"] is None else (
        f"{pb:.2f} ({r['pipeline_reduction']:.2f}x)" if pb is not None else f"{r['pipeline_reduction']:.2f}x")
    if r["complete"]:
        per = ", ".join(f"s{s}: {x:.4f}" + (f" ({r['vs_baseline_pct'][s]:+.2f}%)" if s in r["vs_baseline_pct"] else "")
                        for s, x in r["final_val_loss"].items())
    else:
        per = "running/missing: " + ", ".join(
            f"s{s} " + (st["state"] if st["state"] != "running" else f"at iter {st['last_iter']}/{iters}")
            for s, st in r["runs"].items())
    mean = "—" if r["mean_pct"] is None else f"{r['mean_pct']:+.2f}%"
    worst = "—" if r["max_pct"] is None else f"{r['max_pct']:+.2f}%"
    spread = "—" if r["spread_pct"] is None else f"{r['spread_pct']:.2f}"
    lines.append(f"| {label} | {r['kind']} | {flags} | {link_cell(r, 'pp_fwd')} | {link_cell(r, 'pp_bwd')} | "
                 f"{link_cell(r, 'dp')} | {red} | {per} | {mean} | {worst} | {spread} |")


def met_lines(cut):
    return [f"- {r['label']}{' (paper)' if r['paper'] else ''}: pp_fwd {r['cut']['pp_fwd']:.2f}x, pp_bwd "
            f"{r['cut']['pp_bwd']:.2f}x, worst seed {r['max_pct']:+.2f}%, mean {r['mean_pct']:+.2f}%"
            for r in variants if meets(r, cut)] or ["none"]


lines += ["", "Target: both pipeline links cut >= 4x against the run's own wire within 0.5 % on every seed:", ""]
lines += met_lines(4)
lines += ["", "Moonshot: both pipeline links cut >= 6x within 0.5 % on every seed:", ""]
lines += met_lines(6)
if lossless_twins:
    lines += ["", "The lossless stage (rANS) against the same variant without it: training losses and validation "
              "losses of every iteration compared exactly, and what it saves on the pipeline links:", ""]
    lines += [f"- {t['variant']} vs {t['twin']}: " + (
        "no pair of complete runs yet" if not t["seeds_compared"] else
        ("identical on " if t["identical"] else f"DIFFERENT on seeds {', '.join(t['differing_seeds'])} of ")
        + f"{t['seeds_compared']} seed(s)") + (
        f"; {t['pipeline_bytes_ratio']:.3f}x fewer pipeline bytes" if t["pipeline_bytes_ratio"] else "")
        for t in lossless_twins]
if not_run:
    lines += ["", f"Not run in this sweep (time: a run takes about 5 minutes on the shared 2-vCPU machine, two "
              f"seeds each; the sweep runs the variants that decide the target first): {', '.join(not_run)}."]
text = "\n".join(lines) + "\n"
open(os.path.join(out, "compressors.md"), "w").write(text)
print(text)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402,F401

# Pipeline bits per value (against the run's own wire: 16 = bf16 uncompressed) on a log axis.
X = "pipeline_bits_per_value"
# (Variants that leave both pipeline links alone, DP-only ones, would all sit at the wire's width: left out.)
pts = [r for r in variants if r["mean_pct"] is not None and r[X]
       and (r["kind"] == "baseline" or r["links"].get("pp_fwd") or r["links"].get("pp_bwd"))]
fig, ax = plt.subplots(figsize=(10, 6))
for paper, style in ((False, dict(fmt="o", color="tab:blue", label="other configurations")),
                     (True, dict(fmt="*", color="tab:red", markersize=11, label="paper's configurations"))):
    sel = [r for r in pts if r["paper"] == paper]
    if not sel:
        continue
    ax.errorbar([r[X] for r in sel], [r["mean_pct"] for r in sel],
                yerr=[[r["mean_pct"] - r["min_pct"] for r in sel], [r["max_pct"] - r["mean_pct"] for r in sel]],
                capsize=3, linestyle="none", **style)
for r in pts:
    ax.annotate(r["label"], (r[X], r["mean_pct"]), xytext=(4, 4),
                textcoords="offset points", fontsize=7)
# Pareto front: the variants no other one beats in both pipeline bytes and mean loss
# increase. Sorted by bytes, each front point must improve on the loss of all cheaper ones.
front = []
for r in sorted(pts, key=lambda r: (r[X], r["mean_pct"])):
    if not front or r["mean_pct"] < front[-1]["mean_pct"]:
        front.append(r)
if front:
    ax.step([r[X] for r in front], [r["mean_pct"] for r in front], where="post",
            color="tab:green", alpha=0.7, label="Pareto front")
ax.axhline(0, color="black", linestyle="--", linewidth=0.8, label="baseline")
ax.axhline(0.5, color="gray", linestyle=":", linewidth=1, label="+0.5 %")
own = WIDTH.get(base_wire["pp_fwd"], 4) * 8
for cut, style in ((4, "--"), (6, ":")):
    ax.axvline(own / cut, color="tab:purple", linestyle=style, linewidth=1,
               label=f"{cut}x fewer pipeline bytes than the {base_wire['pp_fwd']} wire")
ax.set_xscale("log")
ax.set_xticks([2, 3, 4, 6, 8, 16, 32])
ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
ax.set_xlabel(f"pipeline bits per value sent (pp_fwd + pp_bwd, scales and padding included; uncompressed: {own})")
ax.set_ylabel("final validation loss vs baseline (%, mean; bars: min-max over seeds)")
ax.set_title(f"Compressors: pipeline traffic vs quality ({summary['precision']}, {iters} iterations, "
             f"{len(seeds)} seeds)")
if not pts:
    ax.text(0.5, 0.5, "no complete variant yet", transform=ax.transAxes, ha="center")
ax.grid(alpha=0.3, which="both")
ax.legend(fontsize=8)
fig.savefig(os.path.join(out, "pareto.png"), dpi=120, bbox_inches="tight")
print(f"wrote {out}/compressors.json, compressors.md, pareto.png")
