"""The paper-regime quality report (issue 30), rebuilt from every run in a ledger
(ledger.py): OUT/quality-regime.md and OUT/quality-regime.png.

Runs are compared only inside a cohort (numerics version, shape, target iterations), each
against the baseline of the same seed and cohort; a run that did not finish is listed as
such and never compared. The verdict uses the newest numerics version's runs only and is
written only when baseline, CB and CB + LEP have finished on both seeds with at least the
regime's iterations; until then the report lists what is missing.
"""
import json
import os
import re
import statistics

from occtools.common import plots
from occtools.common.engine import ROOT as HERE
from occtools.regime import ledger as L

REPRO = ("on a lent GPU, `cd dist/gpu-bundle && python3 -m occtools gpu-check --out $OUT --only quality_regime` "
         "(a bundle built with `python3 -m occtools gpu-bundle --gcide`: it carries this ledger and continues it); then "
         "here, with the call's files in FILES, `python3 -m occtools regime merge FILES/regime.json "
         "docs/results/regime.json && python3 -m occtools regime report docs/results/regime.json "
         "--out docs/results/` (docs/gpu.md)")


def pct(x, signed=True):
    return "n/a" if x is None else (f"{x:+.2f} %" if signed else f"{x:.2f} %")


def num(x, fmt="{:.4f}"):
    return "" if x is None else fmt.format(x)


def cpu_figures():
    """LEP's ratios measured on the CPU: the message-shape sweep (lep-shapes.json) and the
    quality ablation (quality.md's CB + LEP rank-16 row)."""
    out = []
    try:
        shapes = json.load(open(f"{HERE}/docs/results/lep-shapes.json"))
        for r in shapes:
            if r["cb_rank"] == 16 and r["seed"] == 1:
                out.append({"what": f"CPU sweep, {r['message']}, 2 layers, 2 micro-batches, {r['iterations']} iterations "
                                    f"(lep-shapes.md)", "error_ratio": r["error_ratio"], "delta_ratio": r["delta_ratio"],
                            "cosine": r["cosine"], "curve": r.get("error_ratio_per_iter"), "message": r["message"]})
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        m = re.search(r"^\| CB \+ LEP \| 16 \|.*\| ([0-9.]+) \| ([0-9.]+) \|\s*$",
                      open(f"{HERE}/docs/results/quality.md").read(), re.M)
        if m:
            out.append({"what": "CPU quality ablation, 512 x 256, 6 layers, 4 micro-batches, 160 iterations (quality.md)",
                        "error_ratio": float(m.group(1)), "delta_ratio": float(m.group(2)), "cosine": None})
    except OSError:
        pass
    return out


def first_per_key(runs):
    """(variant, seed) -> the earliest finished run; repeats counted."""
    best, repeats = {}, 0
    for r in sorted(runs, key=lambda r: r["date"]):
        if not r["finished"]:
            continue
        k = (r["variant"], r["seed"])
        if k in best:
            repeats += 1
        else:
            best[k] = r
    return best, repeats


def rel(r, base):
    b = base.get(("baseline", r["seed"]))
    return None if b is None else 100 * (r["final_val_loss"] - b["final_val_loss"]) / b["final_val_loss"]


def verdict_cohort(ledger):
    """The cohort the verdict reads: newest numerics, enough iterations, most of the needed runs."""
    runs = ledger["runs"]
    if not runs:
        return None, None
    newest = max(r["numerics"] for r in runs)
    need = {(v, s) for v in L.VERDICT_VARIANTS for s in L.VERDICT_SEEDS}
    cands = {L.cohort(r) for r in runs if r["numerics"] == newest
             and r["target_iters"] >= L.VERDICT_MIN_ITERS[ledger["regime"]]}
    if not cands:
        return None, newest

    def score(c):
        best, _ = first_per_key([r for r in runs if L.cohort(r) == c])
        return (len(need & set(best)), max(r["date"] for r in runs if L.cohort(r) == c))
    return max(cands, key=score), newest


def verdict(ledger, cpu):
    """The paragraph, or the list of what is missing (with the latest call's notes)."""
    c, newest = verdict_cohort(ledger)
    min_it = L.VERDICT_MIN_ITERS[ledger["regime"]]
    need = [(v, s) for v, s in L.PRIORITY if v in L.VERDICT_VARIANTS]
    lines = ["## Verdict", ""]
    older = [r for r in ledger["runs"] if r["numerics"] != newest]
    if older:
        lines += [f"From numerics version {newest}'s runs only: the ledger's {len(older)} run(s) of older versions "
                  f"{sorted({r['numerics'] for r in older})} are not used.", ""]
    if c is None:
        have = {}
        missing = need
    else:
        have, _ = first_per_key([r for r in ledger["runs"] if L.cohort(r) == c])
        missing = [k for k in need if k not in have]
    if missing:
        lines.append(f"**Pending.** The verdict needs baseline, CB and CB + LEP finished on seeds 1 and 2 with at least "
                     f"{min_it} iterations each, of one numerics version (the newest: "
                     f"{newest if newest is not None else 'none yet'}). Missing: "
                     + ", ".join(f"{L.LABELS[v]} seed {s}" for v, s in missing) + ".")
        calls = ledger["calls"]
        if calls:
            last = calls[-1]
            lines += ["", f"The latest call ({last['date']}, {last['device_key']}, commit {last['commit']}, numerics "
                          f"{last['numerics']}, budget {last['budget_s']} s) ran {len(last['runs'])} run(s)"
                      + (": " + "; ".join(last["notes"]) if last["notes"] else "") + "."]
        unfinished = [r for r in ledger["runs"] if not r["finished"] and r["iters_done"] and r.get("s_per_iter")]
        if unfinished:
            r = unfinished[-1]
            per = r["s_per_iter"]
            lines += ["", f"Measured speed: {per:.2f} s per iteration (evaluations included) and {r['startup_s']:.0f} s "
                          f"start-up on {r['device_key']} ({L.LABELS[r['variant']]} seed {r['seed']}, numerics "
                          f"{r['numerics']}): a {r['target_iters']}-iteration run needs about "
                          f"{r['startup_s'] + r['target_iters'] * per:.0f} s."]
        return lines
    g = lambda v, s: have[(v, s)]  # noqa: E731
    b = [g("baseline", s)["final_val_loss"] for s in L.VERDICT_SEEDS]
    spread_b = 100 * abs(b[0] - b[1]) / statistics.mean(b)
    cb = [rel(g("cb", s), have) for s in L.VERDICT_SEEDS]
    lep = [rel(g("cb_lep", s), have) for s in L.VERDICT_SEEDS]
    d = [y - x for x, y in zip(cb, lep)]  # > 0: LEP ends further from the baseline than CB alone
    spread = max(abs(cb[0] - cb[1]), abs(lep[0] - lep[1]))
    if all(x < 0 for x in d) and min(abs(x) for x in d) > spread:
        word = "LEP helps CB here"
    elif all(x > 0 for x in d) and min(abs(x) for x in d) > spread:
        word = "LEP does not help CB here: it makes it worse"
    else:
        word = "LEP has no effect on CB here that the two seeds can tell apart"
    ratios = [g("cb_lep", s)["lep"] for s in L.VERDICT_SEEDS if g("cb_lep", s).get("lep")]
    er = statistics.mean(x["error_ratio"] for x in ratios) if ratios else None
    dr = statistics.mean(x["delta_ratio"] for x in ratios) if ratios else None
    shape = g("cb_lep", 1)["shape"]
    message = f"{shape['micro_batch'] * shape['seq']} x {shape['hidden']}"
    same = [x for x in cpu if x.get("message") == message]
    n_it = c[2]
    p = (f"**{word}.** After {n_it} iterations (numerics {c[0]}; {c[1]}), CB alone ends {pct(cb[0])} and {pct(cb[1])} "
         f"from the same-seed baseline (seeds 1, 2), CB + LEP {pct(lep[0])} and {pct(lep[1])}: LEP moves CB's gap by "
         f"{pct(d[0])} and {pct(d[1])}, against a seed-to-seed spread of the gaps of {pct(spread, False)} (the "
         f"baselines themselves differ by {pct(spread_b, False)}).")
    if er is not None:
        p += (f" LEP's residual settles at {er:.2f}x the gradient it joins and consecutive micro-batches' inputs differ "
              f"by {dr:.2f}x their norm")
        p += (f" (the CPU sweep at the same {message} message, 2 micro-batches per iteration and 100 iterations: "
              f"{same[0]['error_ratio']:.2f}x and {same[0]['delta_ratio']:.2f}x)." if same else
              f" (a {message} message; the CPU has no figure at this shape: see the table below).")
    oc = [r for (v, s), r in have.items() if v == "optimus_cc"]
    if oc:
        r = oc[0]
        x = rel(r, have)
        keep = ("keeps the baseline's quality (within the baselines' seed spread)" if x is not None and abs(x) <= spread_b
                else f"{'stays within' if x is not None and x <= 1 else 'does not stay within'} 1 % of the baseline "
                     f"but outside the baselines' seed spread")
        p += f" Full Optimus-CC (seed {r['seed']}) ends {pct(x)} from its baseline: it {keep}."
    else:
        p += " Full Optimus-CC has not finished a run in this cohort yet, so whether it keeps the baseline's quality is pending."
    return lines + [p]


def cohort_table(runs, c):
    base, repeats = first_per_key(runs)
    lines = [f"### numerics {c[0]}, {c[2]} iterations: {c[1]}", ""]
    if not base:
        lines += ["No finished run in this cohort.", ""]
        return lines
    lines += ["| variant | seeds | final val loss per seed (vs same-seed baseline) | mean vs baseline | seed spread | "
              "LEP residual / gradient | input change / input | cosine | pp_bwd B/iter | dp B/iter | emb B/iter | "
              "ms/iter | epochs | device, commit |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for v in L.LABELS:
        rs = [base[k] for k in sorted(base) if k[0] == v]
        if not rs:
            continue
        rels = [rel(r, base) for r in rs]
        known = [x for x in rels if x is not None]
        per = ", ".join(f"s{r['seed']}: {r['final_val_loss']:.4f}" + (f" ({pct(x)})" if x is not None else
                        " (no same-seed baseline in this cohort)") for r, x in zip(rs, rels))
        leps = [r["lep"] for r in rs if r.get("lep")]
        m = lambda k: statistics.mean(x[k] for x in leps) if leps else None  # noqa: E731
        b = rs[0].get("bytes_per_iter", {})
        lines.append(
            f"| {L.LABELS[v]} | {len(rs)} | {per} | {pct(statistics.mean(known)) if known else 'n/a'} | "
            f"{pct(max(known) - min(known), False) if len(known) > 1 else '-'} | {num(m('error_ratio'), '{:.2f}')} | "
            f"{num(m('delta_ratio'), '{:.2f}')} | {num(m('cosine'), '{:.4f}')} | {b.get('pp_bwd', '')} | {b.get('dp', '')} | "
            f"{b.get('emb', '')} | {num(rs[0].get('ms_per_iter'), '{:.0f}')} | {rs[0].get('epochs', '')} | "
            f"{', '.join(sorted({r['device_key'] + ' ' + r['commit'] for r in rs}))} |")
    if repeats:
        lines.append(f"\n{repeats} repeated run(s) of a variant and seed in this cohort; the table shows the earliest.")
    return lines + [""]


def write(ledger, out, quiet=False):
    runs, regime = ledger["runs"], ledger["regime"]
    cpu = cpu_figures()
    std = L.shape_of(regime)
    lines = ["# Optimus-CC quality in the paper's regime" + (" (--smoke ledger: the plumbing only)" if regime == "smoke" else ""),
             "",
             f"Built by `python3 -m occtools regime report` from every run in the ledger ({len(runs)} runs, "
             f"{len(ledger['calls'])} calls). The regime: GPT {std['layers']} layers, hidden {std['hidden']}, "
             f"{std['heads']} heads, seq {std['seq']}, micro-batch {std['micro_batch']}, "
             f"{std['micro_batches_per_pipeline']} micro-batches per pipeline (global batch {std['global_batch']}), "
             f"{std['precision']}, P{std['pipeline_parallel']} x D{std['data_parallel']} "
             + ("on 4 CPU ranks" if regime == "smoke" else "on 4 ranks sharing one GPU (host-staged MPI)")
             + f", {std['corpus']}, CB rank {std['cb_rank']} (so every CB message is "
             f"{std['micro_batch'] * std['seq']} x {std['hidden']}), DP rank {std['dp_rank']}, validation every "
             f"{std['eval_interval']} iterations ({std['eval_iters']} batches), {L.VERDICT_MIN_ITERS[regime]} "
             f"iterations per run. Runs are compared only within a cohort (numerics version, shape, target "
             f"iterations), each against the baseline of the same seed; a run that did not finish is listed below and "
             f"never compared.", "", f"Reproduce: {REPRO}.", ""]
    lines += verdict(ledger, cpu) + [""]
    cohorts = sorted({L.cohort(r) for r in runs}, key=lambda c: (-c[0], c[1], -c[2]))
    newest = cohorts[0][0] if cohorts else None
    older = [r for r in runs if r["numerics"] != newest]
    lines += ["## Finished runs, per cohort", ""]
    if not cohorts:
        lines += ["No runs yet.", ""]
    for c in cohorts:
        lines += cohort_table([r for r in runs if L.cohort(r) == c], c)
    if older:
        lines += [f"{len(older)} run(s) of older numerics version(s) {sorted({r['numerics'] for r in older})} are in "
                  f"the ledger; they are never compared with or pooled into numerics {newest}'s.", ""]
    unf = [r for r in runs if not r["finished"]]
    lines += ["## Runs that did not finish", ""]
    if not unf:
        lines += ["None.", ""]
    else:
        lines += ["| variant | seed | numerics | iterations done / target | last validation loss (iteration) | "
                  "LEP residual / gradient (iterations) | s/iteration | why | device, commit, date |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in unf:
            lv = r["val_curve"][-1] if r["val_curve"] else None
            lp = r.get("lep")
            last = f"{lv[1]:.4f} ({lv[0]})" if lv else "-"
            ratio = f"{lp['error_ratio']:.2f} ({lp['from_iter']}-{lp['to_iter']})" if lp else "-"
            lines.append(f"| {L.LABELS[r['variant']]} | {r['seed']} | {r['numerics']} | {r['iters_done']} / "
                         f"{r['target_iters']} | {last} | {ratio} | "
                         f"{num(r.get('s_per_iter'), '{:.2f}')} | {r['stop']} | {r['device_key']}, {r['commit']}, {r['date']} |")
        lines.append("")
    lines += ["## LEP's premises: this regime next to the CPU", "",
              "error_ratio = \\|LEP residual\\| / \\|gradient it joins\\|; delta_ratio = \\|input change between consecutive "
              "micro-batches\\| / \\|input\\| (1.41 would mean nothing shared); means over the last 80 % of a run's "
              "iterations (`--check-lep`, CB + LEP runs only: the engine measures LEP's residual, which plain CB lacks).", "",
              "| where | error_ratio | delta_ratio | cosine |", "|---|---|---|---|"]
    for r in runs:
        if r.get("lep") and r["variant"] == "cb_lep":
            lp = r["lep"]
            lines.append(f"| this regime: {L.LABELS[r['variant']]} seed {r['seed']}, {r['device_key']}, numerics "
                         f"{r['numerics']}, iterations {lp['from_iter']}-{lp['to_iter']} of {r['target_iters']}"
                         f"{'' if r['finished'] else ' (unfinished)'} | {lp['error_ratio']:.2f} | {lp['delta_ratio']:.2f} | "
                         f"{lp['cosine']:.4f} |")
    if not any(r.get("lep") and r["variant"] == "cb_lep" for r in runs):
        lines.append("| this regime: no CB + LEP run yet | | | |")
    for x in cpu:
        lines.append(f"| {x['what']} | {x['error_ratio']:.2f} | {x['delta_ratio']:.2f} | {num(x['cosine'], '{:.4f}')} |")
    lines += ["", "## Calls (what ran where)", "",
              "| date | device | commit | numerics | budget s | seconds | runs started | finished | notes |",
              "|---|---|---|---|---|---|---|---|---|"]
    byid = {r["id"]: r for r in runs}
    if not ledger["calls"]:
        lines.append("| no call yet | | | | | | | | |")
    for c in ledger["calls"]:
        rs = [byid[i] for i in c.get("runs", []) if i in byid]
        lines.append(f"| {c.get('date')} | {c.get('device_key')} | {c.get('commit')} | {c.get('numerics')} | "
                     f"{c.get('budget_s')} | {c.get('seconds')} | {len(rs)} | {sum(r['finished'] for r in rs)} | "
                     f"{'; '.join(c.get('notes', [])) or ''} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "quality-regime.md"), "w") as f:
        f.write(text)
    png = plot(ledger, out, cpu)
    if not quiet:
        print(text)
    print(f"wrote {os.path.join(out, 'quality-regime.md')}" + (f", {png}" if png else " (no plot: " + (
        "no runs yet)" if not runs else "this python has no matplotlib; Debian's /usr/bin/python3 has)")))


def plot(ledger, out, cpu):
    runs = [r for r in ledger["runs"] if r["val_curve"]]
    if not runs:
        return None
    plt = plots.pyplot()
    if plt is None:
        return None
    c, _ = verdict_cohort(ledger)
    if c is None:
        c = max({L.cohort(r) for r in runs}, key=lambda k: (k[0], k[2]))
    colors = {"baseline": "black", "cb": "tab:orange", "cb_lep": "tab:red", "cb_lep_ec": "tab:purple",
              "dp_powersgd": "tab:green", "optimus_cc": "tab:blue", "auto": "tab:cyan"}
    fig, ax = plt.subplots(1, 2, figsize=(14, 5))
    for r in runs:
        if L.cohort(r) != c:
            continue
        it, v = zip(*r["val_curve"])
        ax[0].plot(it, v, color=colors[r["variant"]], linestyle="-" if r["seed"] == 1 else "--",
                   alpha=1.0 if r["finished"] else 0.4, marker="o", markersize=3,
                   label=f"{L.LABELS[r['variant']]} s{r['seed']}" + ("" if r["finished"] else f" (unfinished, {r['iters_done']})"))
    ax[0].set_title(f"validation loss, numerics {c[0]}, {c[2]} iterations", fontsize=10)
    ax[0].set_xlabel("iteration")
    ax[0].set_ylabel("validation loss")
    for r in ledger["runs"]:
        if r.get("lep_curve") and L.cohort(r) == c:
            it, e = zip(*r["lep_curve"])
            ax[1].plot(it, e, color=colors[r["variant"]], linestyle="-" if r["seed"] == 1 else "--",
                       label=f"this regime: {L.LABELS[r['variant']]} s{r['seed']}")
    for x, color in zip([x for x in cpu if x.get("curve")], ("silver", "gray", "dimgray")):
        ax[1].plot(range(1, len(x["curve"]) + 1), x["curve"], color=color, linestyle=":",
                   label=f"CPU sweep {x['message']}, seed 1")
    cb_rank = next(r["shape"]["cb_rank"] for r in runs if L.cohort(r) == c)
    ax[1].set_title(f"LEP residual / gradient (--check-lep), CB rank {cb_rank} here, "
                    f"16 on the CPU", fontsize=10)
    ax[1].set_xlabel("iteration")
    for a in ax:
        a.grid(alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    path = os.path.join(out, "quality-regime.png")
    plt.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
