"""python3 -m occtools speedup: the end-to-end speedup of Optimus-CC on an emulated cluster (the
paper's Table 2 and Fig. 10, measured): real MPI ranks on N network namespaces joined by shaped
links (scripts/cluster.sh), the same model, data and seed for every variant:
  baseline | dp_powersgd (DP-only PowerSGD) | cb_lep_ec | fe (+FE) | full (+SC: Optimus-CC)
  | auto (the quality-aware plan: `plan --auto --max-loss-increase 0.5` calibrated on this run's
    own first baseline repetition, with the loss costs the compressor sweep measured,
    docs/results/compressors.json; computed between the baseline's and its own first run)
  | nocomm (baseline on unshaped links: T_nocomm, the bound compression approaches)
Repetitions are interleaved (every variant once per round, the order rotated) so slow phases of
the shared machine hit all variants alike. --variants picks others of occtools/speedup/variants.py
(the DiLoCo ones: diloco-speedup; the distributed optimizer's: dp_powersgd_distopt,
dp_powersgd_overlap).

The model: 8 layers of hidden 256, seq 64, a 1024-token vocabulary (the word embedding 4 % of the
parameters, as in GPT-2.5B), micro-batch 4, on 4 pipeline stages x 2 data-parallel replicas, one
rank per node (8 nodes, the paper's P4 with SC k = 3): every pipeline and data-parallel transfer
crosses a shaped link; 8 micro-batches per iteration. --small: the same model on 4 nodes (P2 D2,
global batch 32: 4 micro-batches per DP rank), so a 2-core machine runs 2 ranks per core rather
than 4: less contention between the ranks, tighter intervals.

Writes OUT/speedup.{json,md} (each variant's median ms/iter with a 95 % bootstrap interval,
ranking only where intervals do not overlap, the targets), OUT/breakdown.png (stacked per-phase
time per stage and variant), OUT/traces/VARIANT.json (Perfetto), the metrics of every run
(OUT/runs/VARIANT.rK.jsonl, all of a variant's in OUT/runs/VARIANT.jsonl) and each variant's train
flags (OUT/runs/VARIANT.flags: validate-planner OUT/runs predicts them).
"""

import argparse
import os
import re
import shutil
import subprocess
import time

from occtools.common import engine, proc
from occtools.common.errors import Failure, positive_int, words
from occtools.speedup import report, variants

CLUSTER = os.path.join(engine.ROOT, "scripts", "cluster.sh")


def add_parser(sub):
    p = sub.add_parser("speedup", help="Optimus-CC's speedup on the emulated cluster (docs/results/speedup*.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(p)
    p.set_defaults(func=main)


def add_options(p, out="bench-results/speedup", iters=30, reps=2, name="occbench"):
    p.add_argument("--quick", action="store_true", help="8 iterations, 1 repetition")
    p.add_argument("--iters", type=positive_int, default=iters, help=f"iterations per run, >= 6 (default {iters})")
    p.add_argument("--reps", type=positive_int, default=reps, help=f"interleaved repetitions (default {reps})")
    p.add_argument("--bandwidth", default="300mbit", help="tc rate of every link (default 300mbit)")
    p.add_argument("--latency", default="0", help="added one-way latency between nodes, tc time (default 0; netem "
                                                  "where the kernel has it, else the MPI transport: scripts/cluster.sh)")
    p.add_argument("--out", default=out, help=f"default {out}")
    p.add_argument("--small", action="store_true", help="4 nodes, P2 D2, global batch 32")
    p.add_argument("--variants", type=words, help="these variants instead of the default list (a subset, or others of "
                                                  "occtools/speedup/variants.py)")
    p.add_argument("--max-loss", default="0.5", help="the auto plan's loss budget in %% (default 0.5)")
    p.add_argument("--compressors-json", default="docs/results/compressors.json",
                   help="the sweep's measured loss costs for the auto plan (default docs/results/compressors.json; the "
                        "plan also reads DiLoCo's, docs/results/diloco-quality.json, where it exists)")
    p.add_argument("--cluster-name", default=name, help=f"the emulated cluster's name (default {name}; another "
                                                         "lets two benchmarks share a machine)")
    p.add_argument("--train-flags", type=str.split, default=[], help="extra train flags for every variant")
    p.add_argument("--bin", help="optimus-cc (default: build/optimus-cc, built first by scripts/setup.sh)")


def cluster(*args, env=None, log=None):
    return proc.run(["bash", CLUSTER, *args], None, log=log, env=env, capture=log is None)


def plan_auto(exe, model, runs, a):
    """The auto variant's flags: the plan calibrated on the baseline's first repetition."""
    r = subprocess.run([exe, "plan", "--ignore-unknown-flags", *model, "--devices-per-node", "1", "--calibrate",
                        f"{runs}/baseline.r1.jsonl", "--auto", "--max-loss-increase", a.max_loss, "--compressors-json",
                        a.compressors_json], capture_output=True, text=True)
    with open(f"{runs}/auto.plan.txt", "w") as f:
        f.write(r.stdout + r.stderr)
    if r.returncode != 0:
        raise Failure(f"plan --auto failed (see {runs}/auto.plan.txt): {(r.stdout + r.stderr).strip()[-300:]}", 1)
    m = re.search(r"^train flags: (.*)$", r.stdout, re.M)
    flags = "" if not m or m.group(1).strip() == "(none)" else m.group(1).strip()
    print("auto plan (calibrated on baseline.r1): " + " ".join(
        line for line in r.stdout.splitlines() if line.startswith(("chosen", "expected loss cost"))), flush=True)
    return flags


def bench(a):
    """Runs the benchmark into a.out (its runs/ and traces/ afresh)."""
    if a.quick:
        a.iters, a.reps = 8, 1
    if a.iters < 6:
        raise Failure("--iters must be at least 6 (the first iterations are warm-up)")
    check = cluster("check")
    if not check.ok:
        raise Failure(f"the emulated cluster cannot run here: {proc.oneline(check.output)}", 3)
    exe = engine.binary(a.bin, build=not a.bin)
    runs, traces = os.path.join(a.out, "runs"), os.path.join(a.out, "traces")
    for d in (runs, traces):  # no stale repetitions from an earlier run
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    env = engine.rank_env()
    nodes, layout, pipeline, gb = (4, "T1P2D2", 2, 32) if a.small else (8, "T1P4D2", 4, 64)
    data = engine.preprocess(exe, os.path.join(a.out, "data-v1024", "kjv"), 1024, env=env)
    model = ["--data-path", data, "--tokenizer-model", data + ".model", "--num-layers", "8", "--hidden-size", "256",
             "--num-attention-heads", "8", "--seq-length", "64", "--max-position-embeddings", "64",
             "--micro-batch-size", "4", "--global-batch-size", str(gb), "--train-iters", str(a.iters), "--lr", "6e-4",
             "--min-lr", "6e-5", "--lr-warmup-fraction", "0.2", "--eval-iters", "0", "--log-interval", "1000",
             "--pipeline-model-parallel-size", str(pipeline), "--seed", "1234", "--comm-timeout", "300", *a.train_flags]
    flags = variants.flags(pipeline)
    names = list(variants.DEFAULT)
    if os.path.isfile(a.compressors_json):
        names.insert(names.index("nocomm"), "auto")
    else:
        print(f"note: no {a.compressors_json} (python3 -m occtools compressors): the auto variant is left out")
    names = a.variants or names
    unknown = [v for v in names if v not in flags and v != "auto"]
    if unknown:
        raise Failure(f"--variants: no variant {', '.join(unknown)} (have {', '.join(flags)}, auto)")
    cluster("down", "--name", a.cluster_name)
    try:
        up = cluster("up", "--name", a.cluster_name, "--nodes", str(nodes), "--bandwidth", a.bandwidth,
                     "--latency", a.latency)
        if not up.ok:
            raise Failure(f"cluster up failed: {proc.oneline(up.output)}", 1)
        print(up.output.strip(), flush=True)
        with open(f"{runs}/settings", "w") as f:
            f.write(f"{a.bandwidth} {a.latency} {nodes} {a.iters} {a.reps} {layout}\n")
        for v in names:
            if v != "auto":
                with open(f"{runs}/{v}.flags", "w") as f:
                    f.write(" ".join(model + [flags[v]]) + "\n")
        run_rounds(a, exe, model, flags, names, nodes, runs, traces, env)
    finally:
        cluster("down", "--name", a.cluster_name)
    for v in names:  # all repetitions of a variant in one file, with its flags: validate-planner's input
        with open(f"{runs}/{v}.jsonl", "w") as out:
            for r in range(1, a.reps + 1):
                out.write(open(f"{runs}/{v}.r{r}.jsonl").read())


def run_rounds(a, exe, model, flags, names, nodes, runs, traces, env):
    start = time.monotonic()
    for rep in range(1, a.reps + 1):
        for i in range(len(names)):  # rotated each round: no variant always runs first (cold caches) or last
            v = names[(i + rep - 1) % len(names)]
            if v == "auto" and "auto" not in flags:
                if not os.path.exists(f"{runs}/baseline.r1.jsonl"):  # round 1 starts with the baseline
                    raise Failure("the auto variant needs the baseline's first run")
                flags["auto"] = plan_auto(exe, model, runs, a)
                with open(f"{runs}/auto.flags", "w") as f:
                    f.write(" ".join(model + [flags["auto"]]) + "\n")
            bw, lat = ("0", "0") if v == "nocomm" else (a.bandwidth, a.latency)
            metrics, log = f"{runs}/{v}.r{rep}.jsonl", f"{runs}/{v}.r{rep}.log"
            for stale in (metrics, log):
                if os.path.exists(stale):
                    os.remove(stale)
            trace = ["--trace", f"{traces}/{v}.json"] if rep == 1 else []
            print(f"[{time.monotonic() - start:4.0f}s] round {rep}/{a.reps}  {v:12s} ", end="", flush=True)
            f = cluster("run", "--name", a.cluster_name, "--nodes", str(nodes), "--ranks-per-node", "1", "--bandwidth",
                        bw, "--latency", lat, "--", exe, "train", *model, *flags[v].split(), "--metrics", metrics,
                        *trace, env=dict(env, OCC_CLUSTER_STATS=f"{runs}/{v}.r{rep}.links"), log=log)
            if not f.ok:
                raise Failure(f"{v} round {rep} failed ({f.why()}; see {log}): {proc.tail(log, 5)}", 1)
            ms = re.findall(r"[0-9.]+ ms/it", open(log, errors="replace").read())
            print(ms[-1] if ms else "", flush=True)


def main(a):
    bench(a)
    report.write(a.out)
    return 0
