"""The report generators: each rebuilds today's committed docs/results tables from their committed
inputs identically (the json the report wrote beside them, or the ledger), and reads the engine's
metrics as a run leaves them (a hand-worked quality ablation)."""

import json
import os
import tempfile
import unittest

from occtools.common.tables import table
from occtools.diloco import quality_report as diloco_quality
from occtools.diloco import speedup_report as diloco_speedup
from occtools.regime import ledger as regime_ledger
from occtools.regime import report as regime_report
from occtools import lep_shapes
from occtools.bench import data_scale
from occtools.quality import report as quality_report

RESULTS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "results")


def committed(name):
    with open(os.path.join(RESULTS, name)) as f:
        return f.read()


def committed_json(name):
    return json.loads(committed(name))


class CommittedResults(unittest.TestCase):
    def test_diloco_quality(self):
        text = "\n".join(diloco_quality.render(committed_json("diloco-quality.json"))) + "\n"
        self.assertEqual(text, committed("diloco-quality.md"))

    def test_diloco_speedup(self):
        for bw in ("300mbit", "30mbit"):
            text = "\n".join(diloco_speedup.render(committed_json(f"diloco-speedup-{bw}.json"))) + "\n"
            self.assertEqual(text, committed(f"diloco-speedup-{bw}.md"), bw)

    def test_lep_shapes(self):
        # The committed file opens with a hand-written line naming the commands it ran; the rest is the report.
        text = "\n".join(lep_shapes.render(committed_json("lep-shapes.json"))) + "\n"
        self.assertTrue(committed("lep-shapes.md").endswith("\n\n" + text))

    def test_data_scale(self):
        self.assertEqual(data_scale.report(committed_json("data-scale.json")), committed("data-scale.md"))

    def test_quality_regime(self):
        ledger = regime_ledger.load(os.path.join(RESULTS, "regime.json"))
        with tempfile.TemporaryDirectory() as tmp:
            regime_report.write(ledger, tmp, quiet=True)
            with open(os.path.join(tmp, "quality-regime.md")) as f:
                self.assertEqual(f.read(), committed("quality-regime.md"))


def write_run(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def rows(val, pp_bwd, lep=None):
    """Five iterations (the last evaluated) as `train --metrics` writes them."""
    out = []
    for i in range(1, 6):
        r = {"iter": i, "loss": 6.0 - 0.1 * i, "ms": 100.0 + i, "bytes": {"pp_fwd": 8, "pp_bwd": pp_bwd, "dp": 64,
                                                                           "emb": 16}}
        if lep:
            r["lep_check"] = {"error_ratio": lep, "delta_ratio": 0.5, "cosine": 0.0}
        if i == 5:
            r["val_loss"] = val
        out.append(r)
    return out


class QualityAblation(unittest.TestCase):
    def test_each_run_against_its_same_seed_baseline(self):
        with tempfile.TemporaryDirectory() as d:
            write_run(f"{d}/1_baseline_s1.jsonl", rows(5.0, 400))
            write_run(f"{d}/1_baseline_s2.jsonl", rows(4.0, 400))
            write_run(f"{d}/4_cb_lep_r16_s1.jsonl", rows(5.05, 40, lep=0.25))  # +1.00 % of 5.0
            write_run(f"{d}/4_cb_lep_r16_s2.jsonl", rows(3.98, 40, lep=0.75))  # -0.50 % of 4.0
            write_run(f"{d}/3_cb_r16_s3.jsonl", rows(5.2, 40))  # no baseline of seed 3
            with open(f"{d}/3_cb_r16_s4.jsonl", "w") as f:
                f.write('{"iter": 1, "lo')  # a run that has not written a row yet
            res = quality_report.summarize(d)
            self.assertEqual(sorted(res), ["1_baseline", "3_cb_r16", "4_cb_lep_r16"])
            lep = res["4_cb_lep_r16"]
            self.assertEqual((lep["variant"], lep["cb_rank"], lep["seeds"]), ("4_cb_lep", 16, [1, 2]))
            self.assertAlmostEqual(lep["per_seed"]["1"]["vs_baseline_pct"], 1.0, places=9)
            self.assertAlmostEqual(lep["per_seed"]["2"]["vs_baseline_pct"], -0.5, places=9)
            self.assertAlmostEqual(lep["mean_vs_baseline_pct"], 0.25, places=9)
            self.assertEqual(lep["per_seed"]["1"]["bytes_per_iter"]["pp_bwd"], 40)  # the last 80 %: rows 2-5
            self.assertEqual(lep["per_seed"]["1"]["lep_check_mean"]["error_ratio"], 0.25)
            self.assertEqual(lep["per_seed"]["1"]["ms_per_iter_median"], 104.0)  # rows 3-5: 103, 104, 105
            self.assertIsNone(res["3_cb_r16"]["mean_vs_baseline_pct"])
            lines = quality_report.render(res)
            self.assertIn("5 iterations", lines[0])
            self.assertIn("| CB + LEP | 16 | s1: 5.0500 (+1.00%), s2: 3.9800 (-0.50%) | +0.25% | 40 | 64 | 16 | 104 | "
                          "0.25 | 0.50 |", lines)
            self.assertIn("| CB (no LEP) | 16 | s3: 5.2000 | n/a | 40 | 64 | 16 | 104 |  |  |", lines)


class Tables(unittest.TestCase):
    def test_table(self):
        self.assertEqual(table(["a", "b"], [[1, "x"], ["", 2.5]], "lr"),
                         ["| a | b |", "|---|---:|", "| 1 | x |", "|  | 2.5 |"])


if __name__ == "__main__":
    unittest.main()
