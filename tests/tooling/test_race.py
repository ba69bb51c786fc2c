"""occtools/race/arithmetic.py on hand-made curves (exact expected numbers): the target and its
N, the interpolated crossing, "not reached" and the loss at 2N, the bootstrap of time to target
and of the speedup, the decomposition check; and the regimes file's checks. Milliseconds."""

import json
import math
import os
import tempfile
import unittest

from occtools.common import stats
from occtools.common.errors import Failure
from occtools.race import arithmetic as A
from occtools.race import regimes


class Target(unittest.TestCase):
    def test_mean_curve_over_the_common_iterations(self):
        self.assertEqual(A.mean_curve([[(10, 4.0), (20, 2.0)], [(10, 6.0), (20, 4.0), (30, 1.0)]]),
                         [(10, 5.0), (20, 3.0)])

    def test_latest_n_within_half_the_run_that_still_improves(self):
        curve = [(10, 5.0), (20, 4.0), (30, 3.5), (40, 3.2), (50, 3.0), (60, 2.9), (70, 2.85), (80, 2.82),
                 (90, 2.8), (100, 2.79)]
        t = A.choose_target([curve], 100)
        # N = 50 (2N = 100): L(40) = 3.2, L(50) = 3.0, improvement 0.2 / 3.2 = 6.25 %.
        self.assertEqual(t["baseline_iteration"], 50)
        self.assertEqual(t["loss"], 3.0)
        self.assertAlmostEqual(t["improvement"], 0.0625, places=12)

    def test_a_flat_end_moves_n_earlier(self):
        # L(40) = 3.0, L(50) = 2.99: 0.33 % < 1 %. N = 40: L(32) = 3.5 - 0.5 * 0.2 = 3.4, (3.4 - 3.0) / 3.4.
        curve = [(10, 5.0), (20, 4.0), (30, 3.5), (40, 3.0), (50, 2.99), (60, 2.98), (100, 2.9)]
        t = A.choose_target([curve], 100)
        self.assertEqual(t["baseline_iteration"], 40)
        self.assertEqual(t["loss"], 3.0)
        self.assertAlmostEqual(t["improvement"], 0.4 / 3.4, places=12)

    def test_target_is_the_seeds_mean_at_n(self):
        a = [(10, 5.0), (20, 4.0), (30, 3.0), (40, 2.0)]
        b = [(10, 5.2), (20, 4.2), (30, 3.2), (40, 2.2)]
        t = A.choose_target([a, b], 40)
        self.assertEqual(t["baseline_iteration"], 20)
        self.assertAlmostEqual(t["loss"], 4.1, places=12)

    def test_no_improvement_is_refused(self):
        with self.assertRaisesRegex(ValueError, "never improves"):
            A.choose_target([[(10, 3.0), (20, 3.0), (30, 3.0), (40, 3.0)]], 40)


class Crossing(unittest.TestCase):
    curve = [(10, 5.0), (20, 4.0), (30, 3.5)]

    def test_linear_interpolation(self):
        self.assertAlmostEqual(A.iterations_to_target(self.curve, 3.8, 60), 24.0, places=12)

    def test_exactly_on_an_evaluation(self):
        self.assertEqual(A.iterations_to_target(self.curve, 4.0, 60), 20.0)

    def test_first_evaluation_already_below(self):
        self.assertEqual(A.iterations_to_target(self.curve, 5.5, 60), 10.0)

    def test_the_first_crossing_counts(self):
        noisy = [(10, 5.0), (20, 3.9), (30, 4.1), (40, 3.0)]
        self.assertAlmostEqual(A.iterations_to_target(noisy, 4.0, 60), 10 + 10 / 1.1, places=12)

    def test_not_reached_by_2n(self):
        self.assertIsNone(A.iterations_to_target(self.curve, 3.8, 20))  # 2N = 20: the crossing is at 24
        self.assertIsNone(A.iterations_to_target(self.curve, 3.0, 60))  # never
        self.assertEqual(A.loss_at(self.curve, 20), 4.0)  # its loss at 2N
        self.assertEqual(A.loss_at(self.curve, 15), 4.5)
        self.assertIsNone(A.loss_at(self.curve, 35))


class Bootstrap(unittest.TestCase):
    def test_interval_with_not_reached_draws(self):
        self.assertEqual(A.percentile_interval(list(range(41))), stats.ci95(list(range(41))))
        self.assertEqual(A.percentile_interval(list(range(40)) + [math.inf]), [1.0, 39.0])
        self.assertEqual(A.percentile_interval(list(range(39)) + [math.inf, math.inf]), [1.0, None])

    def test_ms_per_iteration(self):
        reps = [[10.0, 20.0, 30.0], [40.0]]
        ms, boot = A.ms_per_iteration(reps, 500, 7)
        self.assertEqual(ms["median"], 25.0)
        self.assertEqual(boot, stats.boot_medians(reps, 500, "7:ms"))
        self.assertEqual(ms["ci95"], stats.ci95(boot))
        self.assertEqual(A.ms_per_iteration([[5.0, 5.0], [5.0]], 100)[0], {"median": 5.0, "ci95": [5.0, 5.0]})

    def test_time_samples_and_point(self):
        its = [100.0, 120.0, None]
        self.assertEqual(A.time_samples(its, [50.0, 40.0], [[0, 0, 1], [2, 2, 2]]), [5.0, math.inf])
        t = A.time_to_target(its, {"median": 50.0}, [5.0, 6.0])
        self.assertEqual(t["median"], 6.0)  # median 120 iterations x 50 ms
        self.assertIsNone(A.time_to_target([None, None, 100.0], {"median": 50.0}, [1.0]))

    def test_time_to_target_interval_over_seeds(self):
        # Constant 50 ms: the interval comes from the seeds alone. A resample of three seeds has
        # median 90 with probability 7/27 and 110 likewise (> 2.5 % each): the interval is exact.
        its = [100.0, 110.0, 90.0]
        ms, boot = A.ms_per_iteration([[50.0] * 5, [50.0] * 5])
        draws = A.seed_draws(3)
        t = A.time_to_target(its, ms, A.time_samples(its, boot, draws))
        self.assertEqual(t, {"median": 5.0, "ci95": [4.5, 5.5]})

    def test_seed_draws_are_deterministic(self):
        self.assertEqual(A.seed_draws(3, 50), A.seed_draws(3, 50))
        self.assertNotEqual(A.seed_draws(3, 50), A.seed_draws(3, 50, seed=99))
        self.assertTrue(all(len(d) == 4 and all(0 <= i < 4 for i in d) for d in A.seed_draws(4, 50)))

    def test_speedup(self):
        s = A.speedup({"median": 10.0}, {"median": 5.0}, [10, 10, math.inf, math.inf], [5, math.inf, 5, math.inf])
        # ratios 2, 0 (variant not reached), inf (baseline not reached); the draw neither reached is left out.
        self.assertEqual(s["median"], 2.0)
        self.assertEqual(s["ci95"], [0.1, None])
        self.assertIsNone(A.speedup({"median": 10.0}, None, [], []))


class Decomposition(unittest.TestCase):
    def test_within_ten_percent(self):
        rec, ok, diff = A.decomposition_check("pp_mxfp4", 105.0, 100.0)
        self.assertEqual(rec, {"variant": "pp_mxfp4", "measured_s": 105.0, "predicted_s": 100.0})
        self.assertTrue(ok)
        self.assertAlmostEqual(diff, 0.05, places=12)
        self.assertFalse(A.decomposition_check("x", 111.0, 100.0)[1])


class Bytes(unittest.TestCase):
    def test_training_rows_of_the_last_80_percent(self):
        rows = [{"iter": i, "bytes": {"pp_fwd": i, "pp_bwd": 1, "dp": 2 * i, "emb": 3, "tp": 0}} for i in range(1, 6)]
        rows.append({"iter": 5, "val_loss": 3.0, "bytes": {"pp_fwd": 1000}})
        self.assertEqual(A.bytes_per_iteration(rows), {"pipeline": 4.5, "dp": 7.0, "tp": 0.0, "embedding": 3.0})


class Regimes(unittest.TestCase):
    def write(self, doc):
        fd, path = tempfile.mkstemp(suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        self.addCleanup(os.unlink, path)
        return path

    def regime(self, **emulated):
        shares = {"compute": 0.5, "pipeline": 0.2, "dp": 0.2, "embedding": 0.05, "tp": 0.05}
        em = {"train_flags": ["--pipeline-model-parallel-size", "2"], "nodes": 2, "ranks_per_node": 2,
              "bandwidth": "200mbit", "latency": "50ms", "shares": shares, "pp_to_dp_bytes": 0.1}
        em.update(emulated)
        return {"name": "r", "real_setting": "s", "real": {"shares": shares, "pp_to_dp_bytes": 0.1}, "emulated": em}

    def test_reads_and_finds_dp_across_nodes(self):
        r = regimes.load(self.write({"regimes": [self.regime()]}))[0]
        self.assertEqual((r["pipeline"], r["dp"], r["tensor"]), (2, 2, 1))
        # ranks 0,1 on node 0 are stage 0's two replicas: DP stays inside a node.
        self.assertFalse(regimes.dp_crosses_nodes(r))
        r = regimes.load(self.write({"regimes": [self.regime(ranks_per_node=1, nodes=4)]}))[0]
        self.assertTrue(regimes.dp_crosses_nodes(r))

    def test_bad_files(self):
        with self.assertRaisesRegex(Failure, "not JSON"):
            regimes.load(self.write("{"))
        with self.assertRaisesRegex(Failure, "emulated.nodes"):
            regimes.load(self.write({"regimes": [self.regime(nodes="x")]}))
        with self.assertRaisesRegex(Failure, "does not divide"):
            regimes.load(self.write({"regimes": [self.regime(train_flags=["--pipeline-model-parallel-size", "3"])]}))
        with self.assertRaisesRegex(Failure, "compression flag"):
            regimes.load(self.write({"regimes": [self.regime(train_flags=["--grad-comp"])]}))


if __name__ == "__main__":
    unittest.main()


class RegimeByRegime(unittest.TestCase):
    """A race of some regimes (--only) adds them to OUT's report: the others, from an earlier call,
    are kept, in the regimes file's order, each with the command that raced it."""

    def test_an_earlier_regime_is_kept_and_a_raced_one_replaced(self):
        from types import SimpleNamespace
        from occtools.race import cli, report
        with tempfile.TemporaryDirectory() as out:
            earlier = {"schema": report.SCHEMA, "regimes": [{"name": "paper", "v": 1}, {"name": "cross", "v": 1}]}
            report.write_json(earlier, os.path.join(out, "time-to-target.json"))
            report.write_json({"command": "race --only paper cross", "date": "d0",
                               "regimes": {"paper": {"n": 1}, "cross": {"n": 1}}},
                              os.path.join(out, "time-to-target-curves.json"))
            a = SimpleNamespace(out=out, quick=False)
            kept = cli.earlier_regimes(a, ["cross"])
            self.assertEqual(list(kept), ["paper"])
            doc = {"schema": report.SCHEMA, "regimes": [{"name": "cross", "v": 2}]}
            side = {"command": "race --only cross", "date": "d1", "regimes": {"cross": {"n": 2}}}
            cli.merge_earlier(doc, side, kept, ["paper", "datacenter", "cross"])
            self.assertEqual(doc["regimes"], [{"name": "paper", "v": 1}, {"name": "cross", "v": 2}])
            self.assertEqual(side["regimes"], {"cross": {"n": 2}, "paper": {"n": 1}})
            self.assertEqual(side["commands"], {"cross": "race --only cross", "paper": "race --only paper cross"})
            self.assertIn("paper: `race --only paper cross`", report.made_by(side))

    def test_no_earlier_report(self):
        from types import SimpleNamespace
        from occtools.race import cli
        with tempfile.TemporaryDirectory() as out:
            self.assertEqual(cli.earlier_regimes(SimpleNamespace(out=out, quick=False), ["paper"]), {})


class AutoVerdict(unittest.TestCase):
    """The report says whether the auto plan won, tied or lost (issue 49: the auto plan wins or ties
    in each regime, or the report says why)."""

    @staticmethod
    def entry(auto_median, auto_lo):
        def v(name, median, lo, hi):
            return {"name": name, "time_to_target_s": {"median": median, "ci95": [lo, hi]}}
        return {"variants": [v("baseline", 10.0, 9.0, 11.0), v("fast", 5.0, 4.5, 5.5), v("auto", auto_median, auto_lo, 7.0)]}

    def test_tie_and_loss(self):
        from occtools.race import report
        self.assertIn("The auto plan ties", report.winner(self.entry(5.8, 5.2)))
        text = report.winner(self.entry(6.0, 5.8))
        self.assertIn("The auto plan lost: 6.00 s, 1.20x the fastest's time", text)
        self.assertIn("The auto plan is the fastest", report.winner(self.entry(4.0, 3.5)))


class WinsWhere(unittest.TestCase):
    """The report's cross-regime summary: per regime the fastest, its ties, the paper's techniques'
    speedups and the auto plan's verdict, from the json alone."""

    @staticmethod
    def regime(name, auto_median, auto_lo, full_speedup=None):
        def v(vname, median, lo, hi, speedup=None, flags=()):
            return {"name": vname, "train_flags": list(flags),
                    "time_to_target_s": {"median": median, "ci95": [lo, hi]} if median else None,
                    "ms_per_iteration": {"median": 1.0, "ci95": [1.0, 1.0]},
                    "speedup": {"median": speedup, "ci95": [speedup, speedup]} if speedup else None}
        return {"name": name, "variants": [
            v("baseline", 10.0, 9.0, 11.0, 1.0), v("full", 12.0 if full_speedup else None, 11.0, 13.0, full_speedup),
            v("fast", 5.0, 4.5, 5.5, 2.0), v("auto", auto_median, auto_lo, 7.0, 10.0 / auto_median, ["--x", "1"])]}

    def test_a_row_per_regime(self):
        from occtools.race import report
        doc = {"regimes": [self.regime("a", 5.8, 5.2, 0.83), self.regime("b", 6.0, 5.8)]}
        text = "\n".join(report.summary_rows(doc))
        self.assertIn("| a | fast 2.00 [2.00, 2.00]x | auto | 0.83 [0.83, 0.83]x | not raced |", text)
        self.assertIn("tied: `--x 1` 1.72 [1.72, 1.72]x", text)
        self.assertIn("| b | fast 2.00 [2.00, 2.00]x | — | not reached |", text)
        self.assertIn("lost (1.20x the fastest's time): `--x 1`", text)

    def test_an_auto_plan_that_is_a_raced_variant_says_so(self):
        from occtools.race import report
        entry = self.regime("a", 5.8, 5.2)
        entry["variants"][2]["train_flags"] = ["--x", "1"]  # "fast" has the auto plan's flags
        self.assertIn("tied, = fast: `--x 1`", "\n".join(report.summary_rows({"regimes": [entry, entry]})))
        self.assertIn("(The auto plan is fast's flags: the two differ only by their timing runs.)",
                      report.winner(entry))

    def test_one_regime_has_no_summary(self):
        from occtools.race import report
        self.assertEqual(report.summary_rows({"regimes": [self.regime("a", 5.8, 5.2)]}), [])
