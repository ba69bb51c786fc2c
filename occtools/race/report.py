"""The race's outputs, OUT/STEM.* with STEM time-to-target (time-to-target-quick for --quick, so
that a quick result never sits where `plan --auto` looks for measured costs): STEM.json (schema
occ-time-to-target/1), STEM-curves.json (what the plots draw: each variant's mean validation
curve, the notes), STEM.md and STEM-REGIME.png (validation loss against emulated wall seconds,
every variant, the target as a horizontal line). The .md and the plots are made from the two
json files alone (`race --report-only` remakes them)."""

import json
import os

from occtools.common import plots
from occtools.common.tables import num, table

SCHEMA = "occ-time-to-target/1"


def write_json(doc, path):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def interval(x, fmt):
    if x is None:
        return "not reached"
    lo, hi = x["ci95"]
    return f"{fmt.format(x['median'])} [{num(lo, fmt, '?')}, {num(hi, fmt, 'not reached')}]"


def mb(b):
    return "—" if b is None else f"{b / 1e6:.3f}"


def shares_rows(entry):
    real, em = entry["matched_shares"]["real"], entry["matched_shares"]["emulated"]
    if not real and not em:
        return []
    keys = list((real or em).keys())
    rows = [[k, num((real or {}).get(k), "{:.3f}"), num((em or {}).get(k), "{:.3f}")] for k in keys]
    return ["", "Matched shares of the baseline's iteration (the real setting's projection beside the emulated job's):",
            ""] + table(["share", "real", "emulated"], rows, "lrr")


def race_rows(entry):
    n = entry["target"]["baseline_iteration"]
    rows = []
    for v in entry["variants"]:
        b = v["bytes_per_iteration"] or {}
        its = ", ".join("—" if x is None else f"{x:.1f}" for x in v["iterations_to_target"])
        at2n = ", ".join(num(x, "{:.4f}") for x in v["loss_at_2N"])
        rows.append([v["name"], mb(b.get("pipeline")), mb(b.get("dp")), mb(b.get("embedding")), mb(b.get("tp")),
                     interval(v["ms_per_iteration"], "{:.1f}") if v["ms_per_iteration"] else "not timed",
                     its, at2n, interval(v["time_to_target_s"], "{:.2f}") if v["ms_per_iteration"] else "—",
                     interval(v["speedup"], "{:.2f}") if v["speedup"] else "—"])
    return table(["variant", "pipeline MB/it", "DP MB/it", "embedding MB/it", "TP MB/it", "ms/iteration [95 %]",
                  f"iterations to target, per seed (— not reached by {2 * n})", f"loss at 2N = {2 * n}, per seed",
                  "time to target s [95 %]", "speedup [95 %]"], rows, "lrrrrrlllr")


def winner(entry):
    best, ties = fastest(entry)
    if best is None:
        return "No variant has a time to target (none timed, or none reached the target)."
    return (f"Fastest to the target (median): **{best['name']}**, {best['time_to_target_s']['median']:.2f} s"
            + (f"; within its interval: {', '.join(ties)}." if ties else "; no other variant's interval overlaps it.")
            + auto_verdict(entry, best, ties))


def same_plan(entry, auto):
    """The raced variant whose train flags are the auto plan's, or None: then a win or a tie between
    the two is the same plan timed twice (their iterations are the same numbers)."""
    if "train_flags" not in auto:
        return None
    return next((v["name"] for v in entry["variants"] if v is not auto and v["name"] != "auto"
                 and sorted(v.get("train_flags", [])) == sorted(auto["train_flags"])), None)


def auto_verdict(entry, best, ties):
    """Whether the auto plan won, tied (its interval overlaps the fastest's) or lost, and by how much."""
    auto = next((v for v in entry["variants"] if v["name"] == "auto"), None)
    if auto is None:
        return " No auto plan raced (see the notes)."
    same = same_plan(entry, auto)
    return verdict_text(auto, best, ties) + (f" (The auto plan is {same}'s flags: the two differ only by their "
                                              f"timing runs.)" if same else "")


def verdict_text(auto, best, ties):
    if not auto["time_to_target_s"]:
        return " The auto plan did not reach the target (or was not timed): it lost."
    if auto is best:
        return " The auto plan is the fastest."
    if auto["name"] in ties:
        return f" The auto plan ties: within the fastest's interval ({auto['time_to_target_s']['median']:.2f} s)."
    ratio = auto["time_to_target_s"]["median"] / best["time_to_target_s"]["median"]
    return (f" The auto plan lost: {auto['time_to_target_s']['median']:.2f} s, {ratio:.2f}x the fastest's time "
            f"(why: the notes and docs/benchmarks.md).")


def fastest(entry):
    """(the variant fastest to the target by median, the names whose intervals overlap it) or (None, [])."""
    timed = [v for v in entry["variants"] if v["time_to_target_s"]]
    if not timed:
        return None, []
    best = min(timed, key=lambda v: v["time_to_target_s"]["median"])
    hi = best["time_to_target_s"]["ci95"][1]
    ties = [v["name"] for v in timed if v is not best and hi is not None
            and v["time_to_target_s"]["ci95"][0] is not None and v["time_to_target_s"]["ci95"][0] <= hi]
    return best, ties


def speedup_cell(entry, name):
    v = next((v for v in entry["variants"] if v["name"] == name), None)
    if v is None:
        return "not raced"
    if not v["speedup"]:
        return "not reached" if v["ms_per_iteration"] else "not timed"
    return interval(v["speedup"], "{:.2f}") + "x"


def summary_rows(doc):
    """Which plan wins where: a row per regime, from the json alone."""
    if len(doc["regimes"]) < 2:
        return []
    rows = []
    for entry in doc["regimes"]:
        best, ties = fastest(entry)
        auto = next((v for v in entry["variants"] if v["name"] == "auto"), None)
        if auto is None:
            verdict = "not raced"
        elif not auto["time_to_target_s"]:
            verdict = "lost (no time to target)"
        elif best is auto:
            verdict = "won"
        elif auto["name"] in ties:
            verdict = "tied"
        else:
            verdict = f"lost ({auto['time_to_target_s']['median'] / best['time_to_target_s']['median']:.2f}x the fastest's time)"
        auto_flags = " ".join(auto["train_flags"]) if auto else ""
        same = same_plan(entry, auto) if auto else None
        if same:
            verdict += f", = {same}"
        rows.append([entry["name"],
                     f"{best['name']} {speedup_cell(entry, best['name'])}" if best else "none reached",
                     ", ".join(ties) or "—", speedup_cell(entry, "full"), speedup_cell(entry, "dp_powersgd"),
                     speedup_cell(entry, "pp_mxfp4_lep_rans"), speedup_cell(entry, "dp_mxfp4"),
                     f"{verdict}: `{auto_flags or '(no compression)'}` {speedup_cell(entry, 'auto')}" if auto else verdict])
    return (["## Which plan wins where", "",
             "Speedup in time to the target over each regime's baseline, median [95 %]; the fastest by median, the "
             "variants whose intervals overlap it, and the auto plan's verdict. The regimes' sections below hold "
             "the bytes, times and iterations behind each number.", ""]
            + table(["regime", "fastest to target", "within its interval", "full Optimus-CC", "DP PowerSGD",
                     "MXFP4 + rANS pipeline", "MXFP4 + EF DP", "auto plan"], rows, "llllllll") + [""])


def markdown(doc, side, plots_made):
    out = [f"# Time to a target loss{' (QUICK: the CI-sized check, not a result about any cluster)' if side.get('quick') else ''}",
           "", made_by(side) + " Regenerate the tables and plots from the json files: "
           f"`{side['report_command']}`.", "", side["setup"], ""]
    out += summary_rows(doc)
    for entry in doc["regimes"]:
        ex = side["regimes"].get(entry["name"], {})
        t = entry["target"]
        out += [f"## {entry['name']}", "", f"Stands for: {entry['real_setting']}. Emulated: {ex.get('emulated', '')}"]
        out += shares_rows(entry)
        out += ["", f"Target: the baseline's mean validation loss at iteration N = {t['baseline_iteration']}: "
                f"**{t['loss']:.4f}** (the baseline still improved {100 * ex.get('improvement', 0):.2f} % over the last "
                f"fifth of [0, N]). A variant that has not reached it by 2N = {2 * t['baseline_iteration']} is "
                f"\"not reached\".", ""]
        out += race_rows(entry)
        out += ["", winner(entry), ""]
        if entry["decomposition_check"]:
            out += ["Decomposition check: " + ex.get("decomposition_text", ""), ""]
        for note in ex.get("notes", []):
            out.append(f"- {note}")
        if entry["name"] in plots_made:
            out += ["", f"![{entry['name']}]({os.path.basename(plots_made[entry['name']])})"]
        out.append("")
    return "\n".join(out)


def plot(entry, side_regime, path):
    plt = plots.pyplot()
    if plt is None:
        return None
    ms = {v["name"]: v["ms_per_iteration"]["median"] for v in entry["variants"] if v["ms_per_iteration"]}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    timed = bool(ms)
    for name, pts in side_regime["curves"].items():
        if timed and name not in ms:
            continue
        xs = [i * ms[name] / 1000.0 if timed else i for i, _ in pts]
        ax.plot(xs, [loss for _, loss in pts], label=name, linewidth=1.2)
    ax.axhline(entry["target"]["loss"], color="black", linestyle="--", linewidth=0.8,
               label=f"target {entry['target']['loss']:.3f}")
    ax.set_xlabel("emulated wall seconds (iterations x ms/iteration)" if timed else "iterations (no timing runs)")
    ax.set_ylabel("validation loss (mean over seeds)")
    ax.set_title(f"{entry['name']}: time to the baseline's loss at iteration {entry['target']['baseline_iteration']}")
    lo = min(loss for pts in side_regime["curves"].values() for _, loss in pts)
    ax.set_ylim(lo - 0.05, entry["target"]["loss"] + 1.0)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    plots.save(fig, path)
    return path


def stem(quick):
    return "time-to-target-quick" if quick else "time-to-target"


def write(doc, side, out):
    """Writes the md and plots from DOC and SIDE into OUT; returns the paths written."""
    name = stem(side.get("quick"))
    made = {}
    for entry in doc["regimes"]:
        r = side["regimes"].get(entry["name"])
        if r and r["curves"]:
            p = plot(entry, r, os.path.join(out, f"{name}-{entry['name']}.png"))
            if p:
                made[entry["name"]] = p
    md = os.path.join(out, f"{name}.md")
    with open(md, "w") as f:
        f.write(markdown(doc, side, made))
    return [md] + list(made.values())


def made_by(side):
    """The command(s) that ran the race: one, or one per regime when its regimes were run in
    separate calls (each call adds its regimes to the report)."""
    cmds = side.get("commands") or {}
    if len(set(cmds.values())) <= 1:
        return f"Made by `{side['command']}` ({side['date']})."
    return "Made regime by regime (a race adds its regimes to the report): " + "; ".join(
        f"{name}: `{cmd}`" for name, cmd in cmds.items()) + f" (the latest on {side['date']})."


def load(out, quick):
    with open(os.path.join(out, f"{stem(quick)}.json")) as f:
        doc = json.load(f)
    with open(os.path.join(out, f"{stem(quick)}-curves.json")) as f:
        side = json.load(f)
    return doc, side
