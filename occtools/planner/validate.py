"""python3 -m occtools validate-planner DIR [--generate] [-- PLAN FLAGS]: `optimus-cc plan`
against measured runs. Calibrates on DIR/baseline.jsonl and predicts every other
DIR/VARIANT.jsonl from its DIR/VARIANT.flags (one line of the train flags that run used), then
prints predicted vs measured ms per iteration. A variant named nocomm is predicted with
--no-comm (communication free). Measured = the median ms of the rows after warm-up (the first
iteration of every run, and any DP-compression warm-up iterations), as the calibration does.

--generate first writes DIR/{baseline,dp_powersgd,cb_lep_ec,fe,full}.{jsonl,flags} from small
local runs (mpirun -np 4 on this machine, T1 P2 D2, 4 layers, hidden 128): --rounds R rounds of
--iters N iterations per variant, variants interleaved, so that the load of a shared machine
drifts over all of them alike (the rounds' rows are appended). `speedup` leaves such a DIR
(OUT/runs) from the emulated cluster.
"""

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import tempfile

from occtools.common import engine
from occtools.common.errors import Failure, positive_int
from occtools.common.tables import table
from occtools.speedup import variants

LOCAL = ["baseline", "dp_powersgd", "cb_lep_ec", "fe", "full"]  # nocomm needs shaped links to differ from baseline


def add_parser(sub):
    p = sub.add_parser("validate-planner", help="`optimus-cc plan` against measured runs (docs/planner.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", help="runs: VARIANT.jsonl + VARIANT.flags, baseline among them")
    p.add_argument("--generate", action="store_true", help="make DIR's runs first, on this machine")
    p.add_argument("--iters", type=positive_int, default=6, help="with --generate: iterations per run (default 6)")
    p.add_argument("--rounds", type=positive_int, default=3, help="with --generate: rounds (default 3)")
    p.add_argument("--bin", help="optimus-cc (default build/optimus-cc)")
    p.set_defaults(func=main, rest=[])  # after --: extra flags for every plan (e.g. -- --nodes 4)


def generate(exe, d, iters, rounds):
    os.makedirs(d, exist_ok=True)
    env = engine.rank_env()
    data = engine.preprocess(exe, os.path.join(engine.ROOT, "bench-results", "data", "kjv"), 4096, env=env)
    base = (f"--data-path {data} --tokenizer-model {data}.model --num-layers 4 --hidden-size 128 --num-attention-heads 4 "
            f"--seq-length 128 --max-position-embeddings 128 --micro-batch-size 4 --global-batch-size 32 --train-iters "
            f"{iters} --eval-iters 0 --eval-interval 100000 --log-interval 1000 --hidden-dropout 0 --attention-dropout 0 "
            "--pipeline-model-parallel-size 2")
    flags = variants.flags(2)
    for v in LOCAL:
        with open(f"{d}/{v}.flags", "w") as f:
            f.write(f"{base} {flags[v]}\n")
        if os.path.exists(f"{d}/{v}.jsonl"):
            os.remove(f"{d}/{v}.jsonl")
    for r in range(1, rounds + 1):
        for v in LOCAL:
            log = f"{d}/{v}.log"
            if os.path.exists(log):
                os.remove(log)
            fin = engine.train(exe, f"{base} {flags[v]}".split(), f"{d}/{v}.jsonl", log, np=4, env=env)
            if not fin.ok:
                raise Failure(f"{v} failed ({fin.why()}): see {log}", 1)
        print(f"round {r} done", flush=True)


def measured(flags, rows):
    """The median ms of the rows past the warm-up (the first iteration, DP compression's warm-up)."""
    warm = re.search(r"--grad-comp-warm-up\s+([0-9.eE+-]+)", flags)
    total = re.search(r"--train-iters\s+(\d+)", flags)
    first = 0
    if warm and "--grad-comp" in flags.split():
        first = float(warm.group(1)) * (int(total.group(1)) if total else rows[-1]["iter"])
    ms = [r["ms"] for r in rows if r["iter"] > max(1, first)] or [r["ms"] for r in rows]
    return statistics.median(ms), len(ms)


def main(a):
    exe = engine.binary(a.bin)
    d = a.dir
    if a.generate:
        generate(exe, d, a.iters, a.rounds)
    if not (os.path.isfile(f"{d}/baseline.jsonl") and os.path.isfile(f"{d}/baseline.flags")):
        raise Failure(f"{d}/baseline.jsonl and baseline.flags are needed")
    base_flags = open(f"{d}/baseline.flags").read().strip()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(d)):
            if not name.endswith(".jsonl"):
                continue
            v = name[:-6]
            if not os.path.isfile(f"{d}/{v}.flags"):
                print(f"skip {v}: no {v}.flags")
                continue
            flags = open(f"{d}/{v}.flags").read()
            argv = [exe, "plan", "--ignore-unknown-flags", "--calibrate", f"{d}/baseline.jsonl",
                    "--calibrated-run-flags", base_flags, *flags.split(), *(["--no-comm"] if v == "nocomm" else []),
                    *a.rest, "--json", f"{tmp}/{v}.json"]
            r = subprocess.run(argv, capture_output=True, text=True)
            if r.returncode != 0:
                raise Failure(f"plan for {v} failed: {(r.stderr or r.stdout).strip()[-400:]} ({shlex.join(argv)})", 1)
            if v == "baseline":
                print("== calibration (baseline)")
                print("\n".join(line for line in r.stdout.splitlines() if re.match(
                    r"^(calibrated|  stage|  achieved|  inter|  main|  intra)", line)))
            pred = json.load(open(f"{tmp}/{v}.json"))
            runs = [json.loads(line) for line in open(f"{d}/{v}.jsonl") if line.strip()]
            meas, n = measured(flags, runs)
            rows.append((v, pred["iteration_ms"], meas, pred["compression"], n))
    rows.sort(key=lambda r: (r[0] != "baseline", r[0]))
    worst = max((abs((p - m) / m * 100) for v, p, m, _, _ in rows if v != "baseline"), default=0)
    print("\n".join(table(["variant", "compression", "predicted ms", "measured ms (median)", "error", "rows"],
                          [[v, c, f"{p:.1f}", f"{m:.1f}", f"{(p - m) / m * 100:+.1f} %", n] for v, p, m, c, n in rows])))
    print(f"largest error over the predicted variants: {worst:.1f} %")
    return 0
