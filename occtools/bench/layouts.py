"""python3 -m occtools bench-layouts: iteration time and per-phase breakdown of one model on 4
ranks in four layouts (T1P1D4, T1P2D2, T2P2D1, T1P4D1), plus the CPU time the ranks used
against their wall time (how much of the waiting yields the core). The model: 4 layers, hidden
128, 4 heads, seq 128, micro-batch 4, global batch 32 (tests/unit/plan_model_cost_test.cpp
checks the planner's model of it). Writes OUT/layouts.md and the runs' metrics
OUT/layout_TxPy.jsonl.
"""

import argparse
import os
import statistics

from occtools.common import engine
from occtools.common.metrics import read_run
from occtools.common.errors import Failure, positive_int
from occtools.common.tables import table

LAYOUTS = ((1, 1), (1, 2), (2, 2), (1, 4))
PHASES = ["forward", "backward", "pp_wait", "tp_allreduce", "tp_allgather", "dp_allreduce", "emb_allreduce", "optimizer"]


def add_parser(sub):
    p = sub.add_parser("bench-layouts", help="one model's iteration in four 4-rank layouts, per phase",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=positive_int, default=12, help="iterations per layout (default 12; 2 are warm-up)")
    p.add_argument("--out", default="bench-results", help="default bench-results")
    p.add_argument("--bin", help="optimus-cc (default: build/optimus-cc, built first by scripts/setup.sh)")
    p.set_defaults(func=main)


def render(out):
    rows = []
    for t, p in LAYOUTS:
        its = read_run(f"{out}/layout_T{t}P{p}.jsonl")[2:]  # skip warm-up

        def mean(k):
            return statistics.mean(statistics.mean(r["timers"][k] for r in j["ranks"]) for j in its)
        cpu = statistics.mean(sum(r["timers"]["cpu"] for r in j["ranks"]) / sum(r["timers"]["iteration"]
                                                                                for r in j["ranks"]) for j in its)
        ms = [j["ms"] for j in its]
        rows.append([f"T{t}P{p}D{4 // (t * p)}", f"{statistics.median(ms):.1f}", f"{min(ms):.1f}",
                     *(f"{mean(k):.1f}" for k in PHASES), f"{cpu:.2f}"])
    return table(["layout", "ms/iter median", "best", *PHASES, "CPU/wall"], rows)


def main(a):
    if a.iters < 3:
        raise Failure("--iters: at least 3 (the first 2 are warm-up)")
    exe = engine.binary(a.bin, build=not a.bin)
    os.makedirs(a.out, exist_ok=True)
    env = engine.rank_env()
    data = engine.preprocess(exe, os.path.join(a.out, "data", "kjv"), 4096, env=env)
    model = ["--data-path", data, "--tokenizer-model", data + ".model", "--num-layers", 4, "--hidden-size", 128,
             "--num-attention-heads", 4, "--seq-length", 128, "--max-position-embeddings", 128, "--micro-batch-size", 4,
             "--global-batch-size", 32, "--train-iters", a.iters, "--eval-iters", 0, "--log-interval", 1000,
             "--hidden-dropout", 0, "--attention-dropout", 0]
    for t, p in LAYOUTS:
        path = f"{a.out}/layout_T{t}P{p}.jsonl"
        if os.path.exists(path):
            os.remove(path)
        f = engine.train(exe, model + ["--tensor-model-parallel-size", t, "--pipeline-model-parallel-size", p], path,
                         np=4, env=env)
        if not f.ok:
            raise Failure(f"T{t}P{p} failed ({f.why()})", 1)
    text = "\n".join(render(a.out))
    print(text)
    with open(f"{a.out}/layouts.md", "w") as f:
        f.write(text + "\n\nPhase columns: mean milliseconds per rank per iteration. CPU/wall: CPU time used by all "
                       "ranks / their wall time (4 ranks on the machine's cores).\n")
    return 0
