"""The shared modules every command stands on: proc (a timeout ends the command's whole process
group, a grandchild included, within timeout + grace), metrics (a run still writing), sweep (a
finished run is not run again; the load line of each run) and the argument types."""

import argparse
import json
import os
import stat
import tempfile
import time
import unittest

from occtools.common import metrics, proc, sweep
from occtools.common.errors import positive_int, words
from occtools.common.tables import table

# A stand-in for `optimus-cc train ... --metrics FILE`: two rows, the last one the final evaluation.
FAKE_TRAIN = """#!/bin/sh
m=""
while [ $# -gt 0 ]; do [ "$1" = --metrics ] && m=$2; shift; done
echo "iter 1" >> "$m.calls"
printf '{"iter": 1, "loss": 5.0}\\n{"iter": 2, "loss": 4.0, "val_loss": 4.5}\\n' > "$m"
echo "validation loss at iter 2: 4.5"
"""


class Proc(unittest.TestCase):
    def test_timeout_ends_the_whole_group(self):
        with tempfile.TemporaryDirectory() as d:
            pidfile, log = os.path.join(d, "pid"), os.path.join(d, "log")
            t0 = time.monotonic()
            # The grandchild ignores SIGTERM: only the group's SIGKILL after the grace ends it.
            f = proc.run(["sh", "-c", f"(trap '' TERM; sleep 30) & echo $! > {pidfile}; wait"], 0.5, log=log, grace=0.5)
            self.assertTrue(f.timed_out)
            self.assertLess(time.monotonic() - t0, 5)
            self.assertIn("timed out after", f.why())
            pid = int(open(pidfile).read())
            for _ in range(50):  # reaped by init once killed
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                self.fail("the grandchild outlived the timeout")
            self.assertIn("[stopped after its timeout of 0 s]", open(log).read())

    def test_status_capture_and_missing_command(self):
        f = proc.run(["sh", "-c", "echo hello; exit 3"], 10, capture=True)
        self.assertEqual((f.rc, f.output), (3, "hello\n"))
        self.assertEqual(f.why(), "exit status 3")
        self.assertEqual(proc.run(["/nonexistent/command"], 10).rc, proc.NOT_STARTED)
        self.assertEqual(proc.run(["sh", "-c", "kill -9 $$"], 10).rc, 137)  # not a timeout: someone else's SIGKILL
        self.assertIn("killed by signal 9", proc.run(["sh", "-c", "kill -9 $$"], 10).why())
        self.assertEqual(proc.run(["sh", "-c", "kill -SEGV $$"], 10).why(), "killed by signal 11")


class Metrics(unittest.TestCase):
    def test_a_run_still_writing(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "run.jsonl")
            self.assertIsNone(metrics.read_run(path))
            with open(path, "w") as f:
                f.write('{"iter": 1, "loss": 5}\n{"iter": 2, "val_loss": 4.5}\n{"iter": 3, "lo')  # cut mid-row
            rows = metrics.read_run(path)
            self.assertEqual([r["iter"] for r in rows], [1, 2])
            self.assertTrue(metrics.finished(rows, 2))
            self.assertFalse(metrics.finished(rows, 3))
            self.assertFalse(metrics.finished([], 2))


class Sweep(unittest.TestCase):
    def test_finished_runs_are_not_run_again_and_each_run_logs_its_load(self):
        with tempfile.TemporaryDirectory() as d:
            exe = os.path.join(d, "fake-train")
            with open(exe, "w") as f:
                f.write(FAKE_TRAIN)
            os.chmod(exe, os.stat(exe).st_mode | stat.S_IEXEC)
            runs = [sweep.Run("base_s1", ["--seed", "1"]), sweep.Run("int8_s1", ["--seed", "1", "--x"])]
            load = os.path.join(d, "load.txt")
            for _ in range(2):
                self.assertEqual(sweep.run_all(runs, ["--model"], d, 2, exe, np=1, load_file=load), [])
            for r in runs:  # one call each: the second sweep found them finished
                self.assertEqual(open(os.path.join(d, r.name + ".jsonl.calls")).read(), "iter 1\n")
            lines = [line.split() for line in open(load)]
            self.assertEqual([x[:2] for x in lines], [["base", "1"], ["int8", "1"]])
            self.assertTrue(all(len(x) == 6 and int(x[4]) >= int(x[2]) for x in lines))


class Types(unittest.TestCase):
    def test_words_and_positive_ints(self):
        self.assertEqual(words("1234 4321"), ["1234", "4321"])
        self.assertEqual(words("a,b  c"), ["a", "b", "c"])
        self.assertEqual(positive_int("7"), 7)
        for bad in ("0", "-1", "x"):
            with self.assertRaises(argparse.ArgumentTypeError):
                positive_int(bad)
        self.assertEqual(table(["a", "b"], [[1, None]], "lr"), ["| a | b |", "|---|---:|", "| 1 | None |"])


if __name__ == "__main__":
    unittest.main()
