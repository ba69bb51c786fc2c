"""A compressor sweep's runs summarised: OUT/variants.json (the manifest) and OUT/NAME_sSEED.jsonl
-> the summary compressors.json holds (and the report renders from alone).

Every run is compared with the baseline of the same seed; a variant counts only when every seed's
run has reached the final evaluation, so a sweep still running can be reported at any time
(variants with no run at all are left out and named once). Bytes are means over the training
iterations (not the evaluation ones, whose rows also count the evaluation's forward traffic) of
the last 80 % of the first seed's run (they do not depend on the seed).

Each class's cut and bits per value are against the run's own uncompressed wire: the baseline's
bytes of the class are its values times the wire's bytes per value (the metrics' "wire" names
the format per class: bf16 / fp16 = 2 bytes, fp32 = 4; runs from before it sent fp32), so bits
per value = 8 x bytes sent / values, scales and padding included. The target (issue 40): both
pipeline links cut >= 4x (moonshot 6x) against that wire within 0.5 % of the same-seed
baseline's final validation loss on every seed. OUT/load.txt (name, seed, start, load, end,
load) gives the machine's load.

"link_costs" is read by `optimus-cc plan --auto --max-loss-increase`: keep its schema."""

import json
import os
import statistics
import sys

from occtools.common import metrics
from occtools.common.errors import Failure

CLASSES = ("pp_fwd", "pp_bwd", "dp", "emb")
LINKS = ("pp_fwd", "pp_bwd", "dp")
WIDTH = {"bf16": 2, "fp16": 2, "fp32": 4}
TARGET_LOSS_PCT = 0.5


def ratio(num, den):
    return num / den if num is not None and den else None


def first_rows(seed_runs, seeds):
    return next((r for r in (seed_runs[s] for s in seeds) if r), None)


def bytes_per_iter(seed_runs, seeds):
    """Mean bytes per iteration over the last 80 % of the first seed's run that has rows (a running
    variant still gets its bytes); None if no run has started."""
    rows = first_rows(seed_runs, seeds)
    if not rows:
        return None
    tail = [r for r in rows[len(rows) // 5:] if "val_loss" not in r] or rows[len(rows) // 5:]
    return {k: statistics.mean(r.get("bytes", {}).get(k, 0) for r in tail) for k in CLASSES}


def wire_formats(seed_runs, seeds):
    """The uncompressed wire's format per class, from the run's metrics ("wire"; fp32 before it existed)."""
    rows = first_rows(seed_runs, seeds) or [{}]
    wire = next((r["wire"] for r in rows if "wire" in r), {})
    return {k: wire.get(k, "fp32").split(",")[0].split()[0] for k in CLASSES}


def meets(r, cut):
    c = r["cut"]
    return (r["complete"] and r["max_pct"] is not None and c["pp_fwd"] is not None and c["pp_bwd"] is not None
            and c["pp_fwd"] >= cut and c["pp_bwd"] >= cut and r["max_pct"] <= TARGET_LOSS_PCT)


def load_stats(out):
    """The machine's load during the sweep (OUT/load.txt), or None."""
    loads = []
    path = os.path.join(out, "load.txt")
    if os.path.exists(path):
        for line in open(path):
            f = line.split()
            if len(f) == 6:
                loads += [float(f[3]), float(f[5])]
    return ({"min": min(loads), "median": statistics.median(loads), "max": max(loads), "samples": len(loads)}
            if loads else None)


def summarise(out):
    path = os.path.join(out, "variants.json")
    if not os.path.exists(path):
        raise Failure(f"{path} is missing: not a compressor sweep's folder (run `python3 -m occtools compressors "
                      f"--out {out}` first)")
    sweep = json.load(open(path))
    iters, seeds = sweep["iters"], sweep["seeds"]
    runs = {v["name"]: {s: metrics.read_run(os.path.join(out, f"{v['name']}_s{s}.jsonl")) for s in seeds}
            for v in sweep["variants"]}
    not_run = [v["name"] for v in sweep["variants"] if all(r is None for r in runs[v["name"]].values())]
    listed = [v for v in sweep["variants"] if v["name"] not in not_run]

    base_var = next((v for v in listed if v.get("kind") == "baseline"), None)
    base_name = base_var["name"] if base_var else "baseline"
    base_val = {s: rows[-1]["val_loss"] for s, rows in runs.get(base_name, {}).items() if metrics.finished(rows, iters)}
    base_bytes = bytes_per_iter(runs[base_name], seeds) if base_name in runs and base_var else None
    base_pipe = base_bytes["pp_fwd"] + base_bytes["pp_bwd"] if base_bytes else None
    base_wire = wire_formats(runs[base_name], seeds) if base_bytes else {k: "fp32" for k in CLASSES}
    # Values per iteration of each class: the baseline's bytes over its wire's bytes per value.
    values = {k: base_bytes[k] / WIDTH.get(base_wire[k], 4) for k in CLASSES} if base_bytes else None

    def bits_per_value(b, k):
        return 8 * b[k] / values[k] if b and values and values[k] else None

    variants = []
    for v in listed:
        seed_runs = runs[v["name"]]
        status = {str(s): ({"state": "complete"} if metrics.finished(rows, iters) else {"state": "missing"} if rows is None
                           else {"state": "running", "last_iter": rows[-1].get("iter") if rows else None})
                  for s, rows in seed_runs.items()}
        complete = all(metrics.finished(rows, iters) for rows in seed_runs.values())
        val = {s: rows[-1]["val_loss"] for s, rows in seed_runs.items() if metrics.finished(rows, iters)}
        rel = {s: 100 * (x - base_val[s]) / base_val[s] for s, x in val.items() if s in base_val}
        # Aggregates only when every seed has its same-seed comparison: a mean over a subset of
        # seeds would not be comparable with the other variants'.
        agg = complete and len(rel) == len(seeds)
        b = bytes_per_iter(seed_runs, seeds)
        pipe = b["pp_fwd"] + b["pp_bwd"] if b else None
        ms = [r["ms"] for rows in seed_runs.values() if rows for r in rows[2:] if "ms" in r]  # first 2: warm-up
        variants.append({
            "name": v["name"], "label": v.get("label", v["name"]), "kind": v.get("kind"), "paper": bool(v.get("paper")),
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
                                        if pipe is not None and values and values["pp_fwd"] + values["pp_bwd"]
                                        else None),
            "ms_per_iter_median": statistics.median(ms) if ms else None,
        })

    return {"description": sweep.get("description", ""), "command": sweep.get("command", ""), "iters": iters,
            "precision": sweep.get("precision", "fp32"), "seeds": seeds,
            "baseline": {"final_val_loss": {str(s): x for s, x in base_val.items()}, "bytes_per_iter": base_bytes,
                         "wire": base_wire, "values_per_iter": values},
            "target": {"pp_cut": 4, "moonshot_pp_cut": 6, "max_loss_pct": TARGET_LOSS_PCT,
                       "met_by": [r["name"] for r in variants if meets(r, 4)],
                       "moonshot_met_by": [r["name"] for r in variants if meets(r, 6)]},
            "load": load_stats(out), "not_run": not_run, "lossless_twins": lossless_twins(variants, runs, seeds, iters),
            "variants": variants, "link_costs": link_costs(variants, base_bytes)}


def lossless_twins(variants, runs, seeds, iters):
    """The lossless stage must not change training: each rANS variant (NAME_rans) against its twin
    without it (NAME), every training loss and validation loss of every seed compared exactly."""
    out = []
    names = {r["name"] for r in variants}
    key = lambda rows: [(x.get("iter"), "val_loss" in x, x.get("val_loss", x.get("loss"))) for x in rows
                        if "loss" in x or "val_loss" in x]
    for r in variants:
        twin = r["name"].removesuffix("_rans")
        if twin == r["name"] or twin not in names:
            continue
        compared, differ = 0, []
        for s in seeds:
            a, b = runs[r["name"]][s], runs[twin][s]
            if not (metrics.finished(a, iters) and metrics.finished(b, iters)):
                continue
            compared += 1
            if key(a) != key(b):
                differ.append(str(s))
        twin_row = next(v for v in variants if v["name"] == twin)
        out.append({"variant": r["name"], "twin": twin, "seeds_compared": compared,
                    "identical": compared > 0 and not differ, "differing_seeds": differ,
                    "pipeline_bytes_ratio": ratio(twin_row["pipeline_bytes_per_iter"], r["pipeline_bytes_per_iter"])})
    return out


def link_costs(variants, base_bytes):
    """The planner's input: what compressing one link class alone costs in quality, from the
    variants that change exactly that class."""
    costs = {k: [] for k in LINKS}
    for r in variants:
        if r["kind"] != "single" or not r["complete"] or r["mean_pct"] is None:
            continue
        changed = [k for k in LINKS if r["links"].get(k)]
        if len(changed) != 1:
            print(f"warning: single variant {r['name']} compresses {changed or 'no link'}, not one link class; "
                  f"left out of link_costs", file=sys.stderr)
            continue
        k = changed[0]
        costs[k].append({"setting": r["links"][k], "variant": r["name"], "mean_pct": r["mean_pct"],
                         "max_pct": r["max_pct"], "min_pct": r["min_pct"], "seeds": len(r["final_val_loss"]),
                         "bytes_per_iter": r["bytes_per_iter"][k],
                         "reduction": ratio(base_bytes and base_bytes[k], r["bytes_per_iter"][k])})
    return costs
