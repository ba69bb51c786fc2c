"""python3 -m occtools llama-vs-gpt2: a Llama-style model against GPT-2 on the bundled corpus, and
the communication compressors on each (docs/results/llama-vs-gpt2.md: --iters 200).

Two models of about the same parameter count on the same tokens (the corpus tokenized with a
512-token SentencePiece model, seq 64, global batch 32, P2 x D2 on 4 MPI ranks):
  gpt2:  4 layers, hidden 128, 4 heads, LayerNorm, GeLU MLP 512, learned positions, tied, biases
  llama: 4 layers, hidden 128, 4 heads in 2 query groups, RMSNorm, SwiGLU 352, RoPE, untied, no
         linear biases (the SwiGLU width makes the parameter counts match within ~1 %)
Each trains ITERS iterations as a baseline and with three compressors: CB + LEP + EC (pipeline
backward PowerSGD rank 8 with lazy error propagation, epilogue only), int8 activations forward,
and DP PowerSGD rank 8 with error feedback; the loss cost of each is its final validation loss
minus its own model's baseline. Every number comes from the runs' metrics and logs. Writes
OUT/llama-vs-gpt2.json (with each run's exact command) and keeps the runs' metrics and logs
there; a finished run is not redone.
"""

import argparse
import json
import os

from occtools.common import engine, metrics
from occtools.common.errors import Failure, positive_int

ARCH = {
    "gpt2": [],
    "llama": ["--normalization", "RMSNorm", "--swiglu", "--ffn-hidden-size", "352", "--position-embedding-type", "rope",
              "--group-query-attention", "--num-query-groups", "2", "--untie-embeddings-and-output-weights",
              "--disable-bias-linear"],
}
VARIANTS = {
    "baseline": [],
    "cb_lep_ec": ["--inter-grad-comp", "--inter-grad-comp-rank", "8", "--use-error-feedback",
                  "--inter-grad-comp-epilogue-only"],
    "act_int8": ["--activation-comp-method", "int8"],
    "dp_powersgd8": ["--grad-comp", "--grad-comp-error-feedback", "--grad-comp-warm-up", "0.1", "--grad-comp-rank", "8"],
}


def add_parser(sub):
    p = sub.add_parser("llama-vs-gpt2", help="Llama-style vs GPT-2, and the compressors on each (docs/results/llama-vs-gpt2.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="bench-results/llama-vs-gpt2", help="default bench-results/llama-vs-gpt2")
    p.add_argument("--iters", type=positive_int, default=200, help="iterations per run (default 200)")
    p.add_argument("--bin", help="optimus-cc (default build/optimus-cc)")
    p.set_defaults(func=main)


def main(a):
    exe = engine.binary(a.bin)
    os.makedirs(a.out, exist_ok=True)
    env = engine.rank_env()
    data = engine.preprocess(exe, os.path.join(a.out, "data", "kjv"), 512, env=env)
    it = str(a.iters)
    common = ["--data-path", data, "--tokenizer-model", data + ".model", "--num-layers", "4", "--hidden-size", "128",
              "--num-attention-heads", "4", "--seq-length", "64", "--max-position-embeddings", "64",
              "--micro-batch-size", "4", "--global-batch-size", "32", "--train-iters", it, "--lr", "2e-3",
              "--min-lr", "1e-4", "--lr-warmup-fraction", "0.05", "--weight-decay", "0.1", "--clip-grad", "1.0",
              "--hidden-dropout", "0.1", "--attention-dropout", "0.1", "--eval-interval", it, "--eval-iters",
              "8", "--log-interval", "1000", "--seed", "1234", "--pipeline-model-parallel-size", "2"]
    results = {"iters": a.iters, "layout": "P2 x D2 (4 MPI ranks, 1 thread each)", "runs": {}}
    for model, arch in ARCH.items():
        for variant, flags in VARIANTS.items():
            name = f"{model}_{variant}"
            path, log = os.path.join(a.out, name + ".jsonl"), os.path.join(a.out, name + ".log")
            cmd = engine.mpirun(4, [exe, "train"] + common + arch + flags + ["--metrics", path])
            rows = metrics.read_run(path)
            if not rows or len(rows) < a.iters:
                if os.path.exists(log):
                    os.remove(log)
                if rows is not None:
                    os.remove(path)
                f = engine.train(exe, common + arch + flags, path, log, np=4, env=env)
                if not f.ok:
                    raise Failure(f"{name} failed ({f.why()}): see {log}", 1)
                rows = metrics.read_run(path)
            with open(log, errors="replace") as f:
                params = next(line for line in f if line.startswith("model: ")).split()[1]
            val = [r["val_loss"] for r in rows if "val_loss" in r]
            tps = sorted(r["tokens_per_s"] for r in rows[1:])
            results["runs"][name] = {
                "model": model, "variant": variant, "parameters": int(params), "final_train_loss": rows[-1]["loss"],
                "val_loss": val[-1], "median_tokens_per_s": tps[len(tps) // 2],
                "command": " ".join(["OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1"] + cmd)}
            print(f"{name}: params {params} val {val[-1]:.4f} tokens/s {tps[len(tps) // 2]:.0f}", flush=True)
    for model in ARCH:
        base = results["runs"][f"{model}_baseline"]["val_loss"]
        for variant in VARIANTS:
            r = results["runs"][f"{model}_{variant}"]
            r["loss_cost_vs_own_baseline"] = r["val_loss"] - base
    with open(os.path.join(a.out, "llama-vs-gpt2.json"), "w") as f:
        json.dump(results, f, indent=2)
    return 0
