"""The time-to-target arithmetic of the race, pure (no files, no runs): the target from the
baseline's curves, each seed's iterations to it by linear interpolation of the crossing, time
per iteration from interleaved timing repetitions, time to target and the speedup over the
baseline with 95 % intervals from a seeded bootstrap, and the decomposition check.

A curve is [(iteration, validation loss)] in increasing iteration. "Not reached" is None in
every list of iterations; inside the bootstrap it counts as infinitely many iterations, so an
interval whose upper end is not reached has None (JSON null) there."""

import math
import random
import statistics

from occtools.common import stats

MIN_IMPROVEMENT = 0.01  # the baseline still improves >= 1 % over the last fifth of [0, N]
BOOT_N, BOOT_SEED = 2000, 1234  # resamples; fixed seed: the same inputs give the same intervals
TOLERANCE = 0.10  # the decomposition check: measured wall within 10 % of iterations x ms/iteration


def loss_at(curve, it):
    """The curve's loss at iteration IT, linearly interpolated between evaluations; None outside
    the curve's first and last evaluation."""
    if not curve or it < curve[0][0] or it > curve[-1][0]:
        return None
    for (i0, l0), (i1, l1) in zip(curve, curve[1:]):
        if i0 <= it <= i1:
            return l0 if i1 == i0 else l0 + (l1 - l0) * (it - i0) / (i1 - i0)
    return curve[-1][1]  # a one-point curve at IT


def mean_curve(curves):
    """The mean over CURVES (one per seed) at the evaluation iterations all of them have."""
    common = set.intersection(*(set(i for i, _ in c) for c in curves))
    by = [dict(c) for c in curves]
    return [(i, statistics.mean(d[i] for d in by)) for i in sorted(common)]


def choose_target(curves, iters, min_improvement=MIN_IMPROVEMENT):
    """The target from the baseline's CURVES (one per seed, runs of ITERS iterations): N is the
    latest evaluation iteration with 2N <= ITERS at which the seeds' mean curve still improved by
    >= MIN_IMPROVEMENT over the last fifth of [0, N] ((L(0.8 N) - L(N)) / L(0.8 N)); the target
    loss is that mean at N. Returns {baseline_iteration, loss, improvement}; ValueError when no
    evaluation qualifies (the runs are too short or too coarse, or the baseline stopped improving)."""
    mean = mean_curve(curves)
    for n, loss in reversed(mean):
        if 2 * n > iters:
            continue
        before = loss_at(mean, 0.8 * n)
        if before is None:
            continue
        improvement = (before - loss) / before
        if improvement >= min_improvement:
            return {"baseline_iteration": n, "loss": loss, "improvement": improvement}
    raise ValueError(f"the baseline's mean validation curve never improves by >= {100 * min_improvement:g} % over "
                     f"the last fifth of [0, N] for an evaluation N <= {iters // 2}: train longer or evaluate more often")


def iterations_to_target(curve, target, limit):
    """The first iteration at which CURVE reaches TARGET (loss <= target), linearly interpolated
    between the last evaluation above the target and the first at or below it; None when no
    evaluation up to LIMIT (2N) reaches it. A curve whose first evaluation is already at or below
    the target gives that evaluation's iteration (there is no earlier point to interpolate from)."""
    prev = None
    for i, loss in curve:
        if i > limit:
            break
        if loss <= target:
            if prev is None:
                return float(i)
            i0, l0 = prev
            return i0 + (l0 - target) / (l0 - loss) * (i - i0)
        prev = (i, loss)
    return None


def median_iterations(values):
    """The median over seeds with "not reached" (None) as infinitely many iterations."""
    return statistics.median(math.inf if v is None else v for v in values)


def percentile_interval(samples):
    """The 2.5 % and 97.5 % points of SAMPLES as stats.ci95 takes them (statistics.quantiles,
    inclusive), where samples may be infinite: an end that falls on infinity is None."""
    if all(math.isfinite(x) for x in samples):
        return stats.ci95(samples)
    xs = sorted(samples)
    ends = []
    for j in (1, 39):
        pos = j * (len(xs) - 1) / 40
        k, frac = int(pos), pos - int(pos)
        lo = xs[k]
        hi = xs[min(k + 1, len(xs) - 1)]
        v = lo if frac == 0 else (math.inf if math.isinf(lo) or math.isinf(hi) else lo + (hi - lo) * frac)
        ends.append(None if math.isinf(v) else v)
    return ends


def ms_per_iteration(reps, n=BOOT_N, seed=BOOT_SEED):
    """REPS: the steady-state ms of each timing repetition ([[ms, ...], ...]). Returns
    ({median, ci95}, the N bootstrap medians): the median of the pooled iterations and the
    hierarchical bootstrap over repetitions, then iterations within them (stats.boot_medians)."""
    reps = [list(r) for r in reps if r]
    if not reps:
        raise ValueError("no timing repetition has a steady-state iteration")
    boot = stats.boot_medians(reps, n, f"{seed}:ms")
    return {"median": statistics.median(x for r in reps for x in r), "ci95": stats.ci95(boot)}, boot


def seed_draws(n_seeds, n=BOOT_N, seed=BOOT_SEED):
    """N resamples (with replacement) of the seed indices 0..N_SEEDS-1, the same for every variant
    of a regime: the same seed means the same data order, so variants are compared seed for seed."""
    rng = random.Random(f"{seed}:seeds:{n_seeds}")
    return [[rng.randrange(n_seeds) for _ in range(n_seeds)] for _ in range(n)]


def time_samples(iterations, ms_boot, draws):
    """Bootstrap samples of the time to target in seconds: per draw, the median iterations over
    the drawn seeds times that draw's median ms per iteration (infinite when not reached)."""
    return [median_iterations([iterations[i] for i in d]) * ms / 1000.0 for d, ms in zip(draws, ms_boot)]


def time_to_target(iterations, ms, samples):
    """{median, ci95} in seconds: median iterations over seeds x median ms per iteration, and the
    percentile interval of SAMPLES (time_samples); None when the median seed has not reached it."""
    it = median_iterations(iterations)
    if math.isinf(it):
        return None
    return {"median": it * ms["median"] / 1000.0, "ci95": percentile_interval(samples)}


def speedup(base, variant, base_samples, variant_samples):
    """{median, ci95} of the baseline's time to target over the variant's (> 1: the variant
    reaches the target sooner), None when either has none. The interval takes the ratio draw by
    draw (the seed draws are shared); a draw where the variant did not reach the target counts 0,
    one where the baseline did not counts infinity, one where neither did is left out."""
    if base is None or variant is None:
        return None
    ratios = []
    for b, v in zip(base_samples, variant_samples):
        if math.isinf(b) and math.isinf(v):
            continue
        ratios.append(math.inf if math.isinf(b) else 0.0 if math.isinf(v) else b / v)
    return {"median": base["median"] / variant["median"], "ci95": percentile_interval(ratios)}


def decomposition_check(variant, measured_s, predicted_s, tolerance=TOLERANCE):
    """The wall time measured end to end on the emulated cluster against the product the race
    predicts; returns (record for time-to-target.json, within tolerance?, relative difference)."""
    diff = (measured_s - predicted_s) / predicted_s
    return {"variant": variant, "measured_s": measured_s, "predicted_s": predicted_s}, abs(diff) <= tolerance, diff


def bytes_per_iteration(rows):
    """{pipeline, dp, tp, embedding}: the mean bytes of the training rows (evaluation rows also
    count the evaluation's forward traffic and are left out) over the last 80 % of the run."""
    train = [r for r in rows if "val_loss" not in r and "bytes" in r]
    train = train[len(train) // 5:] or train
    if not train:
        return None

    def mean(*keys):
        return statistics.mean(sum(r["bytes"].get(k, 0) for k in keys) for r in train)
    return {"pipeline": mean("pp_fwd", "pp_bwd"), "dp": mean("dp"), "tp": mean("tp"), "embedding": mean("emb")}
