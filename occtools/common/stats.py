"""Statistics of the benchmarks: Student-t intervals of a mean, percentile intervals from
bootstrap resamples, the hierarchical bootstrap of a median over repetitions, and ratios paired
by round (variants run interleaved, so round k of one is compared with round k of another)."""

import math
import random
import statistics

# Two-sided 95 % Student t quantiles by degrees of freedom (beyond 10: the normal's 1.96).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def t_interval(xs):
    """(mean, [low, high]) with the 95 % t-interval; (mean, None) from fewer than 2 samples."""
    xs = list(xs)
    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, None
    h = T975.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, [m - h, m + h]


def ci95(samples):
    """The 2.5 % and 97.5 % points of bootstrap samples (statistics.quantiles, inclusive)."""
    q = statistics.quantiles(samples, n=40, method="inclusive")  # cut points every 2.5 %
    return [q[0], q[-1]]


def boot_medians(reps, n, seed):
    """N bootstrap medians of repetitions of samples, resampled hierarchically: the repetitions
    with replacement, then the samples within each; the median of the pooled resample. SEED
    (any hashable text) makes the draws repeatable."""
    rng = random.Random(seed)
    meds = []
    for _ in range(n):
        pooled = []
        for rep in rng.choices(reps, k=len(reps)):
            pooled += rng.choices(rep, k=len(rep))
        meds.append(statistics.median(pooled))
    return meds


def boot_median_ci(values, n, seed):
    """The 95 % percentile interval of the median of VALUES, resampled N times."""
    rng = random.Random(seed)
    return ci95([statistics.median(rng.choices(values, k=len(values))) for _ in range(n)])


def paired(a, b):
    """[b[k] / a[k]] over the rounds k both have ({round: value} each), in a's order."""
    return [b[k] / a[k] for k in a if k in b]


def separated(ci_a, ci_b):
    """-1 when interval a lies wholly below b, 1 when above, 0 when they overlap."""
    if ci_a[1] < ci_b[0]:
        return -1
    if ci_b[1] < ci_a[0]:
        return 1
    return 0
