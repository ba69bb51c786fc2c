"""python3 -m occtools plan-scale-features: the paper's GPT-2.5B and GPT-8.3B settings (16 nodes x
8 A100, T8 P4 D4, micro-batch 8, global batch 512, 2-byte values, recomputation) projected with
Megatron's scale features: the interleaved 1F1B schedule (--num-layers-per-virtual-pipeline-stage)
and the distributed optimizer (--use-distributed-optimizer), without and with full Optimus-CC
(CB + LEP + EC, FE, SC K = 3 with DP PowerSGD rank 128), at 25 and 6.25 GB/s per node. Prints
the markdown table of docs/planner.md. Every number is the planner's prediction (a model), not a
measurement.
"""

import argparse
import json
import os
import subprocess
import tempfile

from occtools.common import engine
from occtools.common.errors import Failure
from occtools.common.tables import table

COMMON = ["--seq-length", "1024", "--max-position-embeddings", "1024", "--vocab-size", "50257", "--micro-batch-size", "8",
          "--global-batch-size", "512", "--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "4",
          "--nodes", "16", "--devices-per-node", "8", "--device-tflops", "312", "--efficiency", "0.45",
          "--bytes-per-value", "2", "--checkpoint-activations"]
OCC = ["--inter-grad-comp", "--inter-grad-comp-rank", "16", "--use-error-feedback", "--inter-grad-comp-epilogue-only",
       "--emb-comm-opt", "--grad-comp", "--grad-comp-rank", "128", "--selective-grad-comp-way", "3"]
# model: (shape flags, layers per stage, [(schedule name, layers per virtual stage or None)])
MODELS = {
    "2.5B": (["--num-layers", "52", "--hidden-size", "1920", "--num-attention-heads", "24"], 13,
             [("1F1B", None), ("interleaved V=13 (N=1)", 1)]),
    "8.3B": (["--num-layers", "72", "--hidden-size", "3072", "--num-attention-heads", "24"], 18,
             [("1F1B", None), ("interleaved V=2 (N=9)", 9), ("interleaved V=6 (N=3)", 3)]),
}


def add_parser(sub):
    p = sub.add_parser("plan-scale-features", help="the paper's settings with the interleaved schedule and the "
                                                   "distributed optimizer, projected (docs/planner.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", help="optimus-cc (default build/optimus-cc)")
    p.set_defaults(func=main)


def plan(exe, flags, tmp):
    out = os.path.join(tmp, "p.json")
    r = subprocess.run([exe, "plan", *COMMON, *flags, "--json", out], capture_output=True, text=True)
    if r.returncode != 0:
        raise Failure(f"plan failed: {(r.stdout + r.stderr).strip()[-400:]}", 1)
    return json.load(open(out))


def main(a):
    exe = engine.binary(a.bin)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model, (shape, stage_layers, schedules) in MODELS.items():
            for bw in ("25", "6.25"):
                for name, n in schedules:
                    vp = ["--num-layers-per-virtual-pipeline-stage", str(n)] if n else []
                    for opt in ("replicated", "distributed"):
                        flags = shape + ["--inter-node-bandwidth", bw] + vp + (
                            ["--use-distributed-optimizer"] if opt == "distributed" else [])
                        base, occ = plan(exe, flags, tmp), plan(exe, flags + OCC, tmp)
                        held = max(base["micro_batches_in_flight"]) * (n or stage_layers)
                        b, o = int(f"{base['iteration_ms']:.0f}"), int(f"{occ['iteration_ms']:.0f}")
                        rows.append([f"GPT-{model}", f"{bw} GB/s", name, opt, f"{base['iteration_ms']:.0f}",
                                     f"{max(base['model_state_gib']):.2f}", held, f"{occ['iteration_ms']:.0f}",
                                     f"{b / o:.3f}x"])
    print("\n".join(table(["model", "inter-node", "schedule", "optimizer", "baseline ms", "weights+grads+Adam GiB/rank",
                           "activations held (micro-batch x layers)", "Optimus-CC ms", "speedup"], rows)))
    return 0
