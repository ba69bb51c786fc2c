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
from occtools.bench import core_report as bench_core_report
from occtools.bench import data_scale
from occtools.quality import report as quality_report
from occtools.compressors import entropy as entropy_report
from occtools.compressors import report as compressors_report
from occtools.compressors import summary as compressors_summary
from occtools.compressors import variants as compressors_variants
from occtools.compressors import lowbit_report

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

    def test_bench_core(self):
        for name in ("bench-core-gpt2", "bench-core-gpt2-t256"):
            self.assertEqual(bench_core_report.from_json(committed_json(name + ".json")), committed(name + ".md"))

    def test_data_scale(self):
        self.assertEqual(data_scale.report(committed_json("data-scale.json")), committed("data-scale.md"))

    def test_quality_regime(self):
        ledger = regime_ledger.load(os.path.join(RESULTS, "regime.json"))
        with tempfile.TemporaryDirectory() as tmp:
            regime_report.write(ledger, tmp, quiet=True)
            with open(os.path.join(tmp, "quality-regime.md")) as f:
                self.assertEqual(f.read(), committed("quality-regime.md"))


    def test_compressors_bf16(self):
        # The committed file opens with hand-written lines (title, what to rerun); the rest is the report.
        text = compressors_report.markdown(committed_json("compressors-bf16.json"))
        self.assertTrue(committed("compressors-bf16.md").endswith("\n\n" + text))

    def test_entropy(self):
        self.assertEqual(entropy_report.markdown(committed_json("entropy.json"), "docs/results/entropy"),
                         committed("entropy.md"))


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


def compressor_rows(val, fwd, bwd, losses=(6.0, 5.9, 5.8, 5.7, 5.6)):
    """Five iterations of a bf16 run (the last evaluated), as `train --metrics` writes them."""
    out = []
    for i, loss in enumerate(losses, 1):
        r = {"iter": i, "loss": loss, "ms": 100.0, "bytes": {"pp_fwd": fwd, "pp_bwd": bwd, "dp": 400, "emb": 0}}
        if i == 1:
            r["wire"] = {"pp_fwd": "bf16", "pp_bwd": "bf16", "dp": "fp32", "emb": "fp32"}
        if i == 5:
            r["val_loss"] = val
        out.append(r)
    return out


class CompressorSweep(unittest.TestCase):
    def test_settings_parse_as_the_planner_reads_them(self):
        v = {x["name"]: x for x in compressors_variants.all_variants()}
        self.assertEqual(len(v), len(compressors_variants.TABLE))
        self.assertEqual(v["baseline"]["links"], {"pp_fwd": None, "pp_bwd": None, "dp": None})
        self.assertEqual(v["pp_mxfp4_int3_lep_rans"]["links"]["pp_bwd"],
                         {"method": "int3", "lep": True, "lossless": "rans"})
        self.assertEqual(v["paper_full"]["links"]["dp"],
                         {"method": "powersgd", "rank": 16, "error_feedback": True, "sc": 1, "warmup": 0.1})
        self.assertEqual(v["dp_topk1"]["links"]["dp"]["fraction"], 0.01)
        self.assertTrue(v["paper_cb_lep"]["paper"])

    def test_cuts_against_the_runs_own_wire_twins_and_link_costs(self):
        with tempfile.TemporaryDirectory() as d:
            manifest = compressors_variants.manifest(5, ["1", "2"], "bf16", "python3 -m occtools compressors")
            keep = {"baseline", "pp_mxfp4_lep", "pp_mxfp4_lep_rans", "fwd_int8", "bwd_int3"}
            manifest["variants"] = [x for x in manifest["variants"] if x["name"] in keep]
            with open(f"{d}/variants.json", "w") as f:
                json.dump(manifest, f)
            # bf16 wire: 1024 B = 512 values per link and iteration.
            write_run(f"{d}/baseline_s1.jsonl", compressor_rows(5.0, 1024, 1024))
            write_run(f"{d}/baseline_s2.jsonl", compressor_rows(4.0, 1024, 1024))
            write_run(f"{d}/pp_mxfp4_lep_s1.jsonl", compressor_rows(5.01, 272, 272))  # 4.25 b/v, +0.20 %
            write_run(f"{d}/pp_mxfp4_lep_s2.jsonl", compressor_rows(4.02, 272, 272))  # +0.50 %
            write_run(f"{d}/pp_mxfp4_lep_rans_s1.jsonl", compressor_rows(5.01, 256, 240))
            write_run(f"{d}/pp_mxfp4_lep_rans_s2.jsonl", compressor_rows(4.02, 256, 240, (6.0, 5.9, 5.8, 5.65, 5.6)))
            write_run(f"{d}/fwd_int8_s1.jsonl", compressor_rows(5.005, 520, 1024))
            write_run(f"{d}/fwd_int8_s2.jsonl", compressor_rows(4.0, 520, 1024))
            write_run(f"{d}/bwd_int3_s1.jsonl", compressor_rows(5.0, 1024, 224)[:3])  # still running
            doc = compressors_summary.summarise(d)
            r = {x["name"]: x for x in doc["variants"]}
            self.assertEqual(doc["baseline"]["values_per_iter"]["pp_fwd"], 512)
            mx = r["pp_mxfp4_lep"]
            self.assertAlmostEqual(mx["bits_per_value"]["pp_fwd"], 4.25)
            self.assertAlmostEqual(mx["cut"]["pp_bwd"], 1024 / 272)
            self.assertAlmostEqual(mx["max_pct"], 0.5)
            self.assertEqual(doc["target"]["met_by"], ["pp_mxfp4_lep_rans"])  # 4x on both links, +0.50 % worst
            twin = doc["lossless_twins"][0]
            self.assertEqual((twin["variant"], twin["twin"], twin["seeds_compared"]), ("pp_mxfp4_lep_rans", "pp_mxfp4_lep", 2))
            self.assertEqual(twin["differing_seeds"], ["2"])  # one training loss differs: not lossless
            self.assertFalse(twin["identical"])
            self.assertEqual([c["variant"] for c in doc["link_costs"]["pp_fwd"]], ["fwd_int8"])
            self.assertAlmostEqual(doc["link_costs"]["pp_fwd"][0]["mean_pct"], 0.05)
            self.assertEqual(doc["link_costs"]["pp_bwd"], [])  # bwd_int3 has not finished
            self.assertEqual(r["bwd_int3"]["runs"]["2"], {"state": "missing"})
            text = compressors_report.markdown(doc)
            self.assertIn("DIFFERENT on seeds 2 of 2 seed(s)", text)
            self.assertIn("running/missing: s1 at iter 3/5, s2 missing", text)


class LowBit(unittest.TestCase):
    """Issue 50's report: two corpora's sweeps merged, each variant costed over every (corpus,
    seed) comparison, its bits the larger corpus's, the targets judged, the planner's schema kept."""

    def sweep(self, d, corpus, runs):
        os.makedirs(f"{d}/{corpus}")
        manifest = compressors_variants.manifest(5, ["1", "2"], "bf16", "x", corpus)
        keep = {"baseline", "pp_lm2_rot_rans", "dp_powersgd4"}
        manifest["variants"] = [x for x in manifest["variants"] if x["name"] in keep]
        with open(f"{d}/{corpus}/variants.json", "w") as f:
            json.dump(manifest, f)
        for name, r in runs.items():
            write_run(f"{d}/{corpus}/{name}.jsonl", r)

    def test_merge_targets_and_schema(self):
        def dp_rows(val, dp):
            r = compressor_rows(val, 1024, 1024)
            for x in r:
                x["bytes"]["dp"] = dp
            return r
        with tempfile.TemporaryDirectory() as d:
            # bf16 pipeline wire 1024 B per link (512 values); fp32 DP wire 400 B (100 values).
            self.sweep(d, "kjv", {"baseline_s1": compressor_rows(5.0, 1024, 1024),
                                  "baseline_s2": compressor_rows(4.0, 1024, 1024),
                                  "pp_lm2_rot_rans_s1": compressor_rows(5.01, 128, 128),   # 2.00 b/v, +0.20 %
                                  "pp_lm2_rot_rans_s2": compressor_rows(4.02, 128, 128),   # +0.50 %
                                  "dp_powersgd4_s1": dp_rows(5.05, 10),                     # 0.80 b/v, 40x, +1 %
                                  "dp_powersgd4_s2": dp_rows(4.0, 10)})
            self.sweep(d, "gcide", {"baseline_s1": compressor_rows(6.0, 1024, 1024),
                                    "baseline_s2": compressor_rows(6.0, 1024, 1024),
                                    "pp_lm2_rot_rans_s1": compressor_rows(6.0, 120, 136),  # 2.00 b/v together
                                    "pp_lm2_rot_rans_s2": compressor_rows(6.06, 120, 136),  # +1.00 %
                                    "dp_powersgd4_s1": dp_rows(6.0, 10)})                   # s2 not run
            doc = lowbit_report.merge(d, ["kjv", "gcide"])
            r = {x["name"]: x for x in doc["variants"]}
            lm2 = r["pp_lm2_rot_rans"]
            self.assertEqual(sorted(lm2["vs_baseline_pct"]), ["gcide:1", "gcide:2", "kjv:1", "kjv:2"])
            self.assertAlmostEqual(lm2["mean_pct"], (0.2 + 0.5 + 0.0 + 1.0) / 4)
            self.assertAlmostEqual(lm2["max_pct"], 1.0)
            self.assertAlmostEqual(lm2["bits_per_value"]["pp_bwd"], 16 * 136 / 1024)  # the larger corpus's
            self.assertAlmostEqual(lm2["pipeline_bits_per_value"], 2.0)
            t = doc["targets"]
            self.assertEqual(t["pipeline"]["met_by"], ["pp_lm2_rot_rans"])  # 8x, mean 0.425 %, worst 1.0 %
            self.assertEqual(t["pipeline"]["moonshot_met_by"], [])
            self.assertFalse(r["dp_powersgd4"]["complete"])  # gcide seed 2 missing: no aggregate
            self.assertIsNone(r["dp_powersgd4"]["mean_pct"])
            self.assertEqual(t["dp"]["met_by"], [])
            self.assertEqual(doc["link_costs"]["dp"], [])
            self.assertEqual(r["dp_powersgd4"]["cut"]["dp"], 40)
            text = lowbit_report.markdown(doc)
            self.assertIn("**Met** by pp_lm2_rot_rans.", text)
            self.assertIn("s2 not finished", text)

    def test_committed_report_rebuilds(self):
        path = os.path.join(RESULTS, "lowbit.json")
        if not os.path.exists(path):
            self.skipTest("docs/results/lowbit.json is not committed yet")
        self.assertEqual(lowbit_report.markdown(committed_json("lowbit.json")), committed("lowbit.md"))


class Tables(unittest.TestCase):
    def test_table(self):
        self.assertEqual(table(["a", "b"], [[1, "x"], ["", 2.5]], "lr"),
                         ["| a | b |", "|---|---:|", "| 1 | x |", "|  | 2.5 |"])


if __name__ == "__main__":
    unittest.main()
