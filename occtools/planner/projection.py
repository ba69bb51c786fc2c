"""python3 -m occtools plan-projection: the planner's projection of the paper's setting, in the
precision it ran and in bf16 (docs/planner.md).

GPT-2.5B (52 x 1920, 24 heads) and GPT-8.3B (72 x 3072, 24 heads); seq 1024, micro-batch 8,
global batch 512, full activation recomputation (the prototype's
--activations-checkpoint-method uniform); 16 nodes of 8 A100, T8 P4 D4, one 200 Gb/s HCA
per node (25 GB/s shared by the node's 8 ranks). Each row is one precision, with or without
sequence parallelism, and one optimizer (replicated; distributed with the blocking parameter
all-gather; distributed with --overlap-param-gather); the columns are the baseline, DP-only
PowerSGD (rank 128, error feedback, every stage), full Optimus-CC (CB rank 16 + LEP + EC, FE,
DP PowerSGD rank 128 + SC K = 3) and the plan `plan --auto` chooses. Every number is the
planner's prediction (a model), not a measurement.

Precisions (assumptions; docs/planner.md says why):
  fp32  the prototype's scripts (no --fp16) on its container (NGC PyTorch 20.12, PyTorch 1.8):
        FP32 tensors, matmuls on TF32 tensor cores (PyTorch 1.7-1.11 allowed TF32 for matmuls
        by default): 156 TFLOP/s peak x 0.45; 4-byte values everywhere.
  bf16  Megatron's --bf16: 312 TFLOP/s x 0.45; 2-byte activations, TP and pipeline messages
        and parameters (the all-gather), 4-byte gradients on the DP wire (Megatron
        accumulates and all-reduces bf16 runs' gradients in fp32).
  fp32-noTF32 (sensitivity, baseline and full Optimus-CC only): 19.5 TFLOP/s x 0.45.

    python3 -m occtools plan-projection [--bin build/optimus-cc] [--out FILE.md]
"""
import argparse
import json
import os
import subprocess
import tempfile

from occtools.common import engine
from occtools.common.errors import Failure

MODELS = {
    "2.5B": ["--num-layers", "52", "--hidden-size", "1920", "--num-attention-heads", "24"],
    "8.3B": ["--num-layers", "72", "--hidden-size", "3072", "--num-attention-heads", "24"],
}
COMMON = ["--seq-length", "1024", "--max-position-embeddings", "1024", "--vocab-size", "50257",
          "--micro-batch-size", "8", "--global-batch-size", "512", "--tensor-model-parallel-size", "8",
          "--pipeline-model-parallel-size", "4", "--nodes", "16", "--devices-per-node", "8",
          "--inter-node-bandwidth", "25", "--efficiency", "0.45", "--checkpoint-activations"]
PRECISIONS = {
    "fp32": ["--device-tflops", "156", "--bytes-per-value", "4"],
    "bf16": ["--device-tflops", "312", "--bytes-per-value", "2", "--grad-bytes-per-value", "4"],
    "fp32-noTF32": ["--device-tflops", "19.5", "--bytes-per-value", "4"],
}
PRECISION_NAMES = {"fp32": "FP32 (TF32 GEMMs)", "bf16": "bf16", "fp32-noTF32": "FP32 without TF32"}
OPTIMIZERS = {
    "replicated": [],
    "distributed": ["--use-distributed-optimizer"],
    "distributed + overlap": ["--use-distributed-optimizer", "--overlap-param-gather"],
}
DP_ONLY = ["--grad-comp", "--grad-comp-rank", "128", "--grad-comp-error-feedback"]
FULL = ["--inter-grad-comp", "--inter-grad-comp-rank", "16", "--use-error-feedback",
        "--inter-grad-comp-epilogue-only", "--emb-comm-opt", "--grad-comp", "--grad-comp-rank", "128",
        "--selective-grad-comp-way", "3"]


def plan(binary, flags, tmp):
    out = os.path.join(tmp, "p.json")
    r = subprocess.run([binary, "plan", *flags, "--json", out], capture_output=True, text=True)
    if r.returncode != 0:
        raise Failure(f"plan failed ({' '.join(flags)}): {(r.stdout + r.stderr).strip()[-400:]}", 1)
    with open(out) as f:
        return json.load(f)


def cell(ms, base):
    return f"{ms:.0f} ({base / ms:.3f}x)"


def add_parser(sub):
    ap = sub.add_parser("plan-projection", help="the planner's projection of the paper's GPT-2.5B/8.3B settings "
                                                "(docs/planner.md)",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", help="optimus-cc (default build/optimus-cc)")
    ap.add_argument("--out", help="also write the tables to this file")
    ap.set_defaults(func=main)


def main(args):
    args.bin = engine.binary(args.bin)
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        lines.append("| model | precision | SP | optimizer | baseline ms | DP-only PowerSGD | full Optimus-CC | "
                     "auto plan | its flags | activations GiB/rank | weights+grads+Adam GiB/rank |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for model, shape in MODELS.items():
            for precision in ("fp32", "bf16"):
                for sp in (False, True):
                    for opt_name, opt in OPTIMIZERS.items():
                        flags = COMMON + shape + PRECISIONS[precision] + opt + (["--sequence-parallel"] if sp else [])
                        base = plan(args.bin, flags, tmp)
                        dp = plan(args.bin, flags + DP_ONLY, tmp)
                        full = plan(args.bin, flags + FULL, tmp)
                        auto = plan(args.bin, flags + ["--auto"], tmp)
                        b = base["iteration_ms"]
                        lines.append(
                            f"| GPT-{model} | {PRECISION_NAMES[precision]} | {'on' if sp else 'off'} | {opt_name} | "
                            f"{b:.0f} | {cell(dp['iteration_ms'], b)} | {cell(full['iteration_ms'], b)} | "
                            f"{cell(auto['iteration_ms'], b)} | `{auto['train_flags']}` | "
                            f"{max(base['activation_gib']):.2f} | {max(base['model_state_gib']):.2f} |")
                        print(lines[-1], flush=True)
        lines.append("")
        lines.append("| model | precision | baseline ms | full Optimus-CC |")
        lines.append("|---|---|---|---|")
        for model, shape in MODELS.items():
            flags = COMMON + shape + PRECISIONS["fp32-noTF32"]
            b = plan(args.bin, flags, tmp)["iteration_ms"]
            f = plan(args.bin, flags + FULL, tmp)["iteration_ms"]
            lines.append(f"| GPT-{model} | {PRECISION_NAMES['fp32-noTF32']} | {b:.0f} | {cell(f, b)} |")
            print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0
