"""occtools/common/stats.py and metrics.py against hand-worked cases."""

import random
import statistics
import unittest

from occtools.common import metrics, stats


class TInterval(unittest.TestCase):
    def test_three_samples(self):
        # mean 2, sample sd 1, t(0.975, 2) = 4.303: half-width 4.303 / sqrt(3) = 2.48434...
        m, ci = stats.t_interval([1.0, 2.0, 3.0])
        self.assertEqual(m, 2.0)
        self.assertAlmostEqual(ci[0], 2 - 4.303 / 3 ** 0.5, places=12)
        self.assertAlmostEqual(ci[1], 2 + 4.303 / 3 ** 0.5, places=12)

    def test_two_samples(self):
        # mean 15, sd sqrt(50) = 7.0711, t(1) = 12.706: half-width 12.706 * 7.0711 / sqrt(2) = 63.53
        m, ci = stats.t_interval([10, 20])
        self.assertEqual(m, 15)
        self.assertAlmostEqual(ci[1] - m, 63.53, places=9)

    def test_one_sample_has_no_interval(self):
        self.assertEqual(stats.t_interval([5.0]), (5.0, None))

    def test_many_samples_use_the_normal_quantile(self):
        xs = [0.0, 2.0] * 10  # 20 samples: 19 degrees of freedom, beyond the table: 1.96
        m, ci = stats.t_interval(xs)
        self.assertAlmostEqual(ci[1] - m, 1.96 * statistics.stdev(xs) / 20 ** 0.5, places=12)


class Bootstrap(unittest.TestCase):
    def test_percentile_interval_of_0_to_40(self):
        # 41 values 0..40: the inclusive quantiles every 2.5 % fall on the values 1 and 39.
        self.assertEqual(stats.ci95(list(range(41))), [1.0, 39.0])

    def test_constant_samples_give_a_point(self):
        meds = stats.boot_medians([[5.0, 5.0], [5.0]], 50, "x")
        self.assertEqual(set(meds), {5.0})
        self.assertEqual(stats.boot_median_ci([3.0] * 7, 100, "y"), [3.0, 3.0])

    def test_seeded_and_hierarchical(self):
        reps = [[1.0, 2.0, 3.0], [10.0, 11.0]]
        a, b = stats.boot_medians(reps, 200, "s"), stats.boot_medians(reps, 200, "s")
        self.assertEqual(a, b)  # the same seed: the same draws
        self.assertNotEqual(a, stats.boot_medians(reps, 200, "t"))
        # One repetition drawn twice gives medians of one level only: both levels must appear.
        self.assertTrue(min(a) <= 3.0 and max(a) >= 10.0, (min(a), max(a)))
        # The draw is random.Random(seed): first choose repetitions, then samples within each.
        rng = random.Random("s")
        first = []
        for rep in rng.choices(reps, k=2):
            first += rng.choices(rep, k=len(rep))
        self.assertEqual(a[0], statistics.median(first))


class Paired(unittest.TestCase):
    def test_ratios_by_round(self):
        a = {1: 100.0, 2: 200.0, 3: 50.0}
        b = {2: 100.0, 1: 50.0, 4: 1.0}
        self.assertEqual(stats.paired(a, b), [0.5, 0.5])  # rounds 1 and 2, in a's order

    def test_separated(self):
        self.assertEqual(stats.separated([1, 2], [3, 4]), -1)
        self.assertEqual(stats.separated([3, 4], [1, 2]), 1)
        self.assertEqual(stats.separated([1, 3], [2, 4]), 0)
        self.assertEqual(stats.separated([1, 2], [2, 3]), 0)  # touching intervals overlap


class Metrics(unittest.TestCase):
    def test_pct_and_bytes(self):
        self.assertAlmostEqual(metrics.pct_vs(5.05, 5.0), 1.0, places=12)
        rows = [{"bytes": {"dp": 10, "pp_fwd": 4}}, {"bytes": {"dp": 20}}, {}]
        self.assertEqual(metrics.mean_bytes(rows, ("dp", "pp_fwd")), {"dp": 10, "pp_fwd": 4 / 3})
        self.assertEqual(metrics.last_80_percent(list(range(10))), list(range(2, 10)))

    def test_a_run_still_writing(self):
        import os
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "m.jsonl")
            self.assertIsNone(metrics.read_run(p))
            with open(p, "w") as f:
                f.write('{"iter": 1, "loss": 5.0}\n{"iter": 2, "loss": 4.9, "val_loss": 5.1}\n{"iter": 3, "lo')
            rows = metrics.read_run(p)
            self.assertEqual([r["iter"] for r in rows], [1, 2])  # the partial line skipped
            self.assertTrue(metrics.finished(rows, 2))
            self.assertFalse(metrics.finished(rows, 3))
            self.assertFalse(metrics.finished(rows[:1], 1))  # no final evaluation
            self.assertEqual(metrics.val_curve(rows), [(2, 5.1)])


if __name__ == "__main__":
    unittest.main()
