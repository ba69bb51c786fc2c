"""From a regime's runs to its entry of time-to-target.json (schema occ-time-to-target/1, read by
the planner: keep its keys exactly) and, beside it, what the report and plot draw (the curves).

Time per iteration: each timing repetition's iterations after the warm-up (the first
max(3, 10 % + 1), as `speedup` skips: DP PowerSGD runs uncompressed for its first 10 %) cut into
windows of WINDOW iterations; a window's mean is one step-time sample, so a cost that comes every
few iterations (DiLoCo's outer sync every 8) is counted at its share. ms_per_iteration.median is
the median of the windows' means; its interval the hierarchical bootstrap (repetitions, then
windows within them)."""

import math
import statistics

from occtools.race import arithmetic as A

WINDOW = 8


def warmup(iters):
    return max(3, math.ceil(0.1 * iters) + 1)


def window_means(rows, iters, window=WINDOW):
    """The means of consecutive WINDOW-iteration windows after the warm-up (a partial last window
    is left out)."""
    ms = [r["ms"] for r in rows if "ms" in r and r["iter"] > warmup(iters)]
    return [statistics.mean(ms[k:k + window]) for k in range(0, len(ms) - window + 1, window)]


def curve(rows):
    return [(r["iter"], r["val_loss"]) for r in rows if "val_loss" in r]


def regime_entry(regime, seeds, iters, timing_iters, variants):
    """VARIANTS: [{name, flags, loss: {seed: rows}, timing: [rows per repetition] or None}], the
    baseline first. Returns (entry for the json, extras: curves, N's improvement, per-variant
    bootstrap samples and the timing's windows)."""
    base = variants[0]
    if base["name"] != "baseline" or any(s not in base["loss"] for s in seeds):
        raise ValueError(f"{regime['name']}: the baseline's loss runs are missing")
    target = A.choose_target([curve(base["loss"][s]) for s in seeds], iters)
    n, loss = target["baseline_iteration"], target["loss"]
    draws = A.seed_draws(len(seeds))
    em, real = regime["emulated"], regime.get("real") or {}
    entry = {"name": regime["name"], "real_setting": regime["real_setting"],
             "matched_shares": {"real": real.get("shares"), "emulated": em.get("shares")},
             "target": {"baseline_iteration": n, "loss": loss}, "variants": [], "decomposition_check": None}
    extras = {"improvement": target["improvement"], "curves": {}, "samples": {}, "windows": {}}
    for v in variants:
        if any(s not in v["loss"] for s in seeds):
            continue
        curves = [curve(v["loss"][s]) for s in seeds]
        its = [A.iterations_to_target(c, loss, 2 * n) for c in curves]
        rec = {"name": v["name"], "train_flags": list(v["flags"]),
               # From the first timing repetition (no evaluations) where there is one; else the loss
               # run's iterations without an evaluation (None when it evaluated on every one).
               "bytes_per_iteration": A.bytes_per_iteration((v.get("timing") or [v["loss"][seeds[0]]])[0]),
               "iterations_to_target": its, "loss_at_2N": [A.loss_at(c, 2 * n) for c in curves],
               "ms_per_iteration": None, "time_to_target_s": None, "speedup": None}
        windows = [window_means(rows, timing_iters) for rows in v.get("timing") or []]
        if any(windows):
            ms, boot = A.ms_per_iteration(windows)
            rec["ms_per_iteration"] = ms
            samples = A.time_samples(its, boot, draws)
            rec["time_to_target_s"] = A.time_to_target(its, ms, samples)
            extras["samples"][v["name"]] = samples
            extras["windows"][v["name"]] = windows
        extras["curves"][v["name"]] = A.mean_curve(curves)
        entry["variants"].append(rec)
    by = {r["name"]: r for r in entry["variants"]}
    b = by["baseline"]
    for r in entry["variants"]:
        if r["name"] in extras["samples"] and "baseline" in extras["samples"]:
            r["speedup"] = A.speedup(b["time_to_target_s"], r["time_to_target_s"], extras["samples"]["baseline"],
                                     extras["samples"][r["name"]])
    return entry, extras


def decomposition(entry, variant, seed_index, rows, loss_rows):
    """The check's record from the end-to-end run's ROWS on the emulated cluster: measured = the
    sum of its iterations' wall times (start-up left out), predicted = that seed's iterations to
    target x ms per iteration. Returns (record, text for the report)."""
    rec = next(r for r in entry["variants"] if r["name"] == variant)
    it = rec["iterations_to_target"][seed_index]
    measured = sum(r["ms"] for r in rows if "ms" in r) / 1000.0
    predicted = it * rec["ms_per_iteration"]["median"] / 1000.0
    record, ok, diff = A.decomposition_check(variant, measured, predicted)
    same = {r["iter"]: r["loss"] for r in loss_rows if "loss" in r}
    ran = [(r["iter"], r["loss"]) for r in rows if "loss" in r]
    identical = bool(ran) and all(same.get(i) == x for i, x in ran)
    text = (f"{variant}: trained end to end on the emulated cluster for {len(ran)} iterations (the target is met "
            f"at {it:.1f}): measured {measured:.2f} s of iterations against the predicted {it:.1f} x "
            f"{rec['ms_per_iteration']['median']:.1f} ms = {predicted:.2f} s, {100 * diff:+.1f} %: "
            + ("within" if ok else "NOT within") + f" {100 * A.TOLERANCE:.0f} %. Its training losses "
            + ("equal the loss run's bit for bit" if identical else "DIFFER from the loss run's")
            + " (the link speed does not change the math).")
    return record, text
