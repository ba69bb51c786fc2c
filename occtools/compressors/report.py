"""The compressor sweep's report, rendered from its summary alone (compressors.json), so
`compressors --from-json FILE` rebuilds a committed table without any run: OUT/compressors.md and
OUT/pareto.png (pipeline bits per value vs loss, the paper's configurations marked)."""

import os

from occtools.common import plots
from occtools.compressors.summary import LINKS, WIDTH, meets


def num(x):
    return "—" if x is None else f"{x:.0f}"


def link_cell(r, k):
    b, bits, cut = (r["bytes_per_iter"] or {}).get(k), r["bits_per_value"][k], r["cut"][k]
    if b is None:
        return "—"
    return f"{num(b)}" + ("" if bits is None else f" ({bits:.2f} b/v, {cut:.2f}x)")


def variant_row(r, iters):
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
    return (f"| {label} | {r['kind']} | {flags} | {link_cell(r, 'pp_fwd')} | {link_cell(r, 'pp_bwd')} | "
            f"{link_cell(r, 'dp')} | {red} | {per} | {mean} | {worst} | {spread} |")


def met_lines(variants, cut):
    return [f"- {r['label']}{' (paper)' if r['paper'] else ''}: pp_fwd {r['cut']['pp_fwd']:.2f}x, pp_bwd "
            f"{r['cut']['pp_bwd']:.2f}x, worst seed {r['max_pct']:+.2f}%, mean {r['mean_pct']:+.2f}%"
            for r in variants if meets(r, cut)] or ["none"]


def markdown(summary):
    seeds, load, variants = summary["seeds"], summary["load"], summary["variants"]
    wire_note = ", ".join(f"{k} {summary['baseline']['wire'][k]}" for k in LINKS)
    lines = [f"{summary['description']}; seeds {', '.join(map(str, seeds))}; each run against the "
             f"baseline of the same seed; bytes per iteration summed over ranks (mean over the training iterations of "
             f"the last 80 %, evaluation iterations left out), with bits per value (b/v: scales and padding included) "
             f"and the cut against the run's own uncompressed wire ({wire_note}). "
             f"Made by `{summary['command']}`." + (
                 f" Machine load (1-minute average, 2 vCPUs shared with other jobs) over the runs: median "
                 f"{load['median']:.1f}, range {load['min']:.1f}-{load['max']:.1f}; the losses do not depend on it, the "
                 f"ms/iteration in compressors.json do." if load else ""), "",
             "| variant | kind | flags | pp_fwd B/iter | pp_bwd B/iter | dp B/iter | pipeline b/v (cut) | "
             "final val loss per seed (vs same-seed baseline) | mean vs baseline | worst seed | spread (pp) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [variant_row(r, summary["iters"]) for r in variants]
    lines += ["", "Target: both pipeline links cut >= 4x against the run's own wire within 0.5 % on every seed:", ""]
    lines += met_lines(variants, 4)
    lines += ["", "Moonshot: both pipeline links cut >= 6x within 0.5 % on every seed:", ""]
    lines += met_lines(variants, 6)
    twins = summary.get("lossless_twins") or []
    if twins:
        lines += ["", "The lossless stage (rANS) against the same variant without it: training losses and validation "
                  "losses of every iteration compared exactly, and what it saves on the pipeline links:", ""]
        lines += [f"- {t['variant']} vs {t['twin']}: " + (
            "no pair of complete runs yet" if not t["seeds_compared"] else
            ("identical on " if t["identical"] else f"DIFFERENT on seeds {', '.join(t['differing_seeds'])} of ")
            + f"{t['seeds_compared']} seed(s)") + (
            f"; {t['pipeline_bytes_ratio']:.3f}x fewer pipeline bytes" if t["pipeline_bytes_ratio"] else "")
            for t in twins]
    if summary.get("not_run"):
        lines += ["", f"Not run in this sweep (time: a run takes about 5 minutes on the shared 2-vCPU machine, two "
                  f"seeds each; the sweep runs the variants that decide the target first): "
                  f"{', '.join(summary['not_run'])}."]
    return "\n".join(lines) + "\n"


def pareto(summary, path):
    """Pipeline bits per value (against the run's own wire: 16 = bf16 uncompressed, log axis) vs the
    mean loss increase, min-max over seeds, the Pareto front and the 4x / 6x lines."""
    plt = plots.pyplot()
    if plt is None:
        return False
    import matplotlib.ticker
    x = "pipeline_bits_per_value"
    wire = summary["baseline"]["wire"]["pp_fwd"]
    # Variants that leave both pipeline links alone (DP-only ones) would all sit at the wire's width: left out.
    pts = [r for r in summary["variants"] if r["mean_pct"] is not None and r[x]
           and (r["kind"] == "baseline" or r["links"].get("pp_fwd") or r["links"].get("pp_bwd"))]
    fig, ax = plt.subplots(figsize=(10, 6))
    for paper, style in ((False, dict(fmt="o", color="tab:blue", label="other configurations")),
                         (True, dict(fmt="*", color="tab:red", markersize=11, label="paper's configurations"))):
        sel = [r for r in pts if r["paper"] == paper]
        if sel:
            ax.errorbar([r[x] for r in sel], [r["mean_pct"] for r in sel],
                        yerr=[[r["mean_pct"] - r["min_pct"] for r in sel], [r["max_pct"] - r["mean_pct"] for r in sel]],
                        capsize=3, linestyle="none", **style)
    for r in pts:
        ax.annotate(r["label"], (r[x], r["mean_pct"]), xytext=(4, 4), textcoords="offset points", fontsize=7)
    # Pareto front: sorted by bytes, each front point must improve on the loss of all cheaper ones.
    front = []
    for r in sorted(pts, key=lambda r: (r[x], r["mean_pct"])):
        if not front or r["mean_pct"] < front[-1]["mean_pct"]:
            front.append(r)
    if front:
        ax.step([r[x] for r in front], [r["mean_pct"] for r in front], where="post",
                color="tab:green", alpha=0.7, label="Pareto front")
    ax.axhline(0, color="black", linestyle="--", linewidth=0.8, label="baseline")
    ax.axhline(0.5, color="gray", linestyle=":", linewidth=1, label="+0.5 %")
    own = WIDTH.get(wire, 4) * 8
    for cut, style in ((4, "--"), (6, ":")):
        ax.axvline(own / cut, color="tab:purple", linestyle=style, linewidth=1,
                   label=f"{cut}x fewer pipeline bytes than the {wire} wire")
    ax.set_xscale("log")
    ax.set_xticks([2, 3, 4, 6, 8, 16, 32])
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel(f"pipeline bits per value sent (pp_fwd + pp_bwd, scales and padding included; uncompressed: {own})")
    ax.set_ylabel("final validation loss vs baseline (%, mean; bars: min-max over seeds)")
    ax.set_title(f"Compressors: pipeline traffic vs quality ({summary['precision']}, {summary['iters']} iterations, "
                 f"{len(summary['seeds'])} seeds)")
    if not pts:
        ax.text(0.5, 0.5, "no complete variant yet", transform=ax.transAxes, ha="center")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    plots.save(fig, path)
    return True


def write(summary, out, stem="compressors", plot="pareto"):
    """OUT/STEM.md and OUT/PLOT.png; returns the paths written."""
    os.makedirs(out, exist_ok=True)
    md = os.path.join(out, stem + ".md")
    with open(md, "w") as f:
        f.write(markdown(summary))
    written = [md]
    png = os.path.join(out, plot + ".png")
    if pareto(summary, png):
        written.append(png)
    return written
