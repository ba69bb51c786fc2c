"""What a gpu-check step works with: the bundle and the folders, the budget, the
machine's facts (machine.py), the results so far, and the ways to run things (the
engine from the bundle, mpirun, a PyTorch-python verdict, an in-process verdict).
"""

import contextlib
import os
import re
import time
import traceback
from dataclasses import dataclass, field
from typing import Optional

from occtools.common import proc
from occtools.gpu_check.budget import BudgetSpent
from occtools.gpu_check.verdicts import FAIL, UNREADABLE, Verdict

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class Result:
    name: str
    status: str  # PASS, FAIL, SKIP
    seconds: float
    summary: str
    numbers: Optional[dict] = None
    log: Optional[str] = None  # whose tail the report shows for a FAIL


@dataclass
class Context:
    bundle: str
    out: str
    work: str
    python: str  # the machine's PyTorch python
    gdev: str  # the engine's device for the "GPU" side: cuda, or cpu standing in
    quick: bool
    budget: object
    bf16_iters: int = 300
    machine: object = None  # machine.Machine: help texts, probe, GPU count, what is missing
    results: list = field(default_factory=list)
    env: dict = field(default_factory=dict)

    # ---- folders and flags ----------------------------------------------------------------
    @property
    def logs(self):
        return os.path.join(self.work, "logs")

    def w(self, *parts):
        return os.path.join(self.work, *parts)

    def log(self, name):
        return os.path.join(self.logs, name + ".log")

    def data_flags(self):
        data = os.path.join(self.bundle, "data", "kjv")
        return ["--data-path", data, "--tokenizer-model", data + ".model"]

    def small(self):
        """The small model: 4 layers, hidden 64, 4 heads, seq 64, micro-batch 4, global batch 8, dropout 0.1."""
        return self.data_flags() + ["--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4",
                                    "--seq-length", "64", "--max-position-embeddings", "64", "--micro-batch-size", "4",
                                    "--global-batch-size", "8", "--hidden-dropout", "0.1", "--attention-dropout",
                                    "0.1", "--seed", "1234", "--eval-iters", "2", "--log-interval", "5"]

    def has_flag(self, command, flag):
        return self.machine.has_flag(command, flag)

    def devflags(self, command, device):
        """The words that put `command` on `device`, or None when this binary cannot."""
        if self.has_flag(command, "--device"):
            return ["--device", device]
        return [] if device == "cpu" else None

    # ---- results ------------------------------------------------------------------------
    def record(self, name, status, t0, summary, numbers=None, log=None):
        r = Result(name, status, time.monotonic() - t0, proc.oneline(summary), numbers, log)
        self.results.append(r)
        print(f"{status} {name}: {r.summary}", flush=True)
        return r

    def record_verdict(self, name, t0, v: Verdict, prefix="", log=None):
        return self.record(name, v.status, t0, prefix + v.summary, v.numbers, log if not v.ok else None)

    def statuses(self):
        """{name: (status, summary)} of the results so far (the last of a name wins)."""
        return {r.name: (r.status, r.summary) for r in self.results}

    # ---- running things --------------------------------------------------------------------
    def run(self, argv, cap, log, env=None, what=None):
        """A command with the budget's timeout for it (BudgetSpent when too little is left)."""
        timeout = self.budget.timeout(cap, what or os.path.basename(str(argv[0])))
        return proc.run(argv, timeout, log=log, env=dict(self.env, **(env or {})))

    def eng(self, log, cap, *args, env=None):
        """optimus-cc ARGS from the bundle (run.sh scopes its libraries to the command)."""
        return self.run([os.path.join(self.bundle, "run.sh"), "optimus-cc", *args], cap, log, env, "optimus-cc")

    def mpirun(self, log, cap, np, *args, program=("optimus-cc", "train")):
        """mpirun -np NP optimus-cc train ARGS from the bundle; each rank its share of the cores for
        OpenMP unless OMP_NUM_THREADS is set (16 cores, 4 ranks: 4 threads each, not 16 spinning)."""
        threads = self.env.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or np) // np))
        argv = [os.path.join(self.bundle, "run.sh"), "mpirun", "-np", str(np), "--oversubscribe", *program, *args]
        return self.run(argv, cap, log, {"OMP_NUM_THREADS": threads}, "mpirun")

    def py(self, log, cap, *args, env=None):
        """A script under the machine's PyTorch python."""
        return self.run([self.python, *args], cap, log, env, "python")

    def occtools(self, log, cap, command, *args):
        """`python3 -m occtools COMMAND ARGS` (this package, from the bundle) under the PyTorch python."""
        return self.run([self.python, "-m", "occtools", command, *args], cap, log,
                        {"PYTHONPATH": PACKAGE_ROOT + os.pathsep + self.env.get("PYTHONPATH", "")}, command)

    def torch_verdict(self, log, cap, kind, *args):
        """A verdict that needs torch (hf, hf-llama, tensorboard) in the PyTorch python."""
        f = self.occtools(log, cap, "gpu-verdict", kind, *args)
        from occtools.gpu_check.verdict_cli import parse_output
        with open(log, errors="replace") as fh:
            summary, numbers = parse_output(fh.read())
        if f.timed_out or f.rc not in (0, 1, 2, 3):
            return Verdict(FAIL, f"gpu-verdict {kind}: {f.why()}: {proc.tail(log)}", numbers)
        return Verdict(f.rc, summary or f"gpu-verdict {kind}: {f.why()}: {proc.tail(log)}", numbers)

    def judge(self, tag, fn, *args, **kwargs):
        """An in-process verdict; its detail lines go to LOGS/TAG.verdict.log (the report's tail
        for a FAIL). Unreadable inputs are a FAIL that says so."""
        path = os.path.join(self.logs, tag + ".verdict.log")
        with open(path, "a") as out, contextlib.redirect_stdout(out):
            try:
                v = fn(*args, **kwargs)
            except (OSError, ValueError, KeyError, ImportError) as e:
                v = Verdict(UNREADABLE, f"cannot read the inputs: {type(e).__name__}: {e}", {})
            except Exception as e:  # noqa: BLE001 - a bug in a verdict is a FAIL of its check, with the trace
                traceback.print_exc(file=out)
                v = Verdict(FAIL, f"the verdict failed: {type(e).__name__}: {e} (a bug of gpu-check)", {})
            print("SUMMARY " + v.summary)
        return v

    def tail(self, path, lines=3):
        """A log's last lines, on one line (for a FAIL summary)."""
        return proc.tail(path, lines)

    def grep(self, path, pattern, first=True):
        """The first (or last) line of a log matching a regular expression, or ''."""
        try:
            with open(path, errors="replace") as f:
                lines = [l.rstrip("\n") for l in f if re.search(pattern, l)]
        except OSError:
            return ""
        return (lines[0] if first else lines[-1]) if lines else ""


def copy_checkpoint(src_dir, iteration, dst_dir):
    """A folder holding only iteration `iteration` of a checkpoint folder, as the latest (a resume from it)."""
    import shutil
    name = f"iter_{iteration:07d}"
    os.makedirs(dst_dir, exist_ok=True)
    shutil.copytree(os.path.join(src_dir, name), os.path.join(dst_dir, name), dirs_exist_ok=True)
    with open(os.path.join(dst_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(f"{iteration}\n")


__all__ = ["Context", "Result", "BudgetSpent", "copy_checkpoint"]
