"""Ledgers (occtools/common/ledger.py, occtools/regime/ledger.py): merging is idempotent and
append-only, a differing record is refused, the file is rewritten atomically one record per line,
and a regime ledger that is not one (or is inconsistent) is refused with a one-line error."""

import copy
import json
import os
import tempfile
import unittest

from occtools.common import ledger as records
from occtools.regime import ledger as L


def run(i, **kw):
    r = {"id": f"r{i}", "variant": "baseline", "seed": 1, "flags": "", "target_iters": 6, "iters_done": 6,
         "finished": True, "final_val_loss": 5.0 + i, "val_curve": [[0, 6.0], [6, 5.0 + i]], "numerics": 3,
         "shape": {"layers": 2}, "shape_key": "k", "date": f"2026-01-0{i}", "device": "cpu", "commit": "abc"}
    r.update(kw)
    return r


def ledger(runs, calls=()):
    d = L.new_ledger("smoke")
    d["runs"] = list(runs)
    d["calls"] = [{"id": c, "runs": []} for c in calls]
    return d


class Merge(unittest.TestCase):
    def test_merge_twice_adds_once(self):
        src = ledger([run(1), run(2)], ["c1"])
        dst = ledger([run(1)])
        self.assertEqual(L.merge(src, dst), (1, 1))
        once = copy.deepcopy(dst)
        self.assertEqual(L.merge(src, dst), (0, 0))
        self.assertEqual(dst, once)
        self.assertEqual([r["id"] for r in dst["runs"]], ["r1", "r2"])  # appended, order kept

    def test_merge_into_itself_adds_nothing(self):
        d = ledger([run(1)], ["c1"])
        self.assertEqual(L.merge(copy.deepcopy(d), d), (0, 0))

    def test_a_changed_record_is_refused(self):
        dst = ledger([run(1)])
        with self.assertRaisesRegex(L.LedgerError, "run r1 differs between the two ledgers"):
            L.merge(ledger([run(1, final_val_loss=9.0)]), dst)
        self.assertEqual(dst["runs"], [run(1)])

    def test_regimes_never_mix(self):
        paper = L.new_ledger("paper")
        with self.assertRaisesRegex(L.LedgerError, "cannot merge a 'smoke' ledger into a 'paper' one"):
            L.merge(ledger([run(1)]), paper)

    def test_generic_merge_by_id(self):
        dst = {"items": [{"id": "a", "x": 1}]}
        self.assertEqual(records.merge({"items": [{"id": "a", "x": 1}, {"id": "b"}]}, dst, ("items",)), (1,))
        with self.assertRaises(records.Conflict):
            records.merge({"items": [{"id": "a", "x": 2}]}, dst, ("items",))


class SaveAndLoad(unittest.TestCase):
    def test_one_record_per_line_and_round_trip(self):
        d = ledger([run(1), run(2)], ["c1"])
        with tempfile.TemporaryDirectory() as tmp:
            p = os.path.join(tmp, "regime.json")
            L.save(d, p)
            text = open(p).read()
            self.assertEqual(sum(1 for line in text.splitlines() if line.startswith('  {"id": "r')), 2)
            self.assertEqual(L.load(p), d)
            self.assertEqual(os.listdir(tmp), ["regime.json"])  # no temporary file left behind
            # Saving what was loaded rewrites the same bytes: a merge that adds nothing changes nothing.
            L.save(L.load(p), p)
            self.assertEqual(open(p).read(), text)

    def test_the_committed_ledger_loads_and_rewrites_identically(self):
        p = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "results", "regime.json")
        d = L.load(p)
        self.assertEqual(L.dumps(d), open(p).read())

    def test_bad_ledgers(self):
        cases = [("[", "not valid JSON"), (json.dumps({"ledger": "x"}), "not a regime ledger"),
                 (json.dumps(dict(ledger([]), format=9)), "ledger format 9"),
                 (json.dumps(ledger([run(1), run(1)])), "run id r1 appears twice"),
                 (json.dumps(ledger([run(1, final_val_loss=None)])), "marked finished but has 6 of 6"),
                 (json.dumps(ledger([run(1, variant="x")])), "unknown variant 'x'"),
                 (json.dumps(ledger([run(1, seed="1")])), "lacks 'seed' of type int")]
        with tempfile.TemporaryDirectory() as tmp:
            for text, want in cases:
                p = os.path.join(tmp, "bad.json")
                with open(p, "w") as f:
                    f.write(text)
                with self.assertRaises(L.LedgerError) as e:
                    L.load(p)
                self.assertIn(want, str(e.exception))
                self.assertNotIn("\n", str(e.exception))
            with self.assertRaisesRegex(L.LedgerError, "no such ledger"):
                L.load(os.path.join(tmp, "absent.json"))


class Pending(unittest.TestCase):
    def test_priority_order_and_cohorts(self):
        d = ledger([run(1), run(2, variant="cb")])
        todo = L.pending(d, 3, "k", 6)
        self.assertEqual(todo[:3], [("cb_lep", 1), ("baseline", 2), ("cb", 2)])
        self.assertEqual(L.pending(d, 4, "k", 6)[0], ("baseline", 1))  # another numerics version starts over
        self.assertEqual(L.pending(d, 3, "k", 300)[0], ("baseline", 1))  # another target: another cohort


if __name__ == "__main__":
    unittest.main()
