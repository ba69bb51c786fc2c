#!/usr/bin/python3
"""Llama-style vs GPT-2 on the bundled corpus, and the communication compressors on each.

Usage: scripts/experiment_llama.py OUT_DIR ITERS [--bin build/optimus-cc]

Two models of about the same parameter count on the same tokens (the corpus tokenized with a
512-token SentencePiece model, seq 64, global batch 32, P2 x D2 on 4 MPI ranks):
  gpt2:  4 layers, hidden 128, 4 heads, LayerNorm, GeLU MLP 512, learned positions, tied, biases
  llama: 4 layers, hidden 128, 4 heads in 2 query groups, RMSNorm, SwiGLU 352, RoPE, untied,
         no linear biases (the SwiGLU width makes the parameter counts match within ~1%)
Each trains ITERS iterations as a baseline and with three compressors: CB + LEP + EC
(pipeline backward PowerSGD rank 8 with lazy error propagation, epilogue only), int8
activations forward, and DP PowerSGD rank 8 with error feedback; the loss cost of each is
its final validation loss minus its own model's baseline. Every number comes from the runs'
metrics (train --metrics) and logs. Writes OUT_DIR/llama-vs-gpt2.json (with each run's exact
command) and keeps the runs' metrics and logs there; a finished run is not redone.
docs/results/llama-vs-gpt2.{md,json} are its results (ITERS 200).
"""
import json
import os
import subprocess
import sys

ARCH = {
    "gpt2": [],
    "llama": ["--normalization", "RMSNorm", "--swiglu", "--ffn-hidden-size", "352", "--position-embedding-type", "rope",
              "--group-query-attention", "--num-query-groups", "2", "--untie-embeddings-and-output-weights",
              "--disable-bias-linear"],
}
CB = ["--inter-grad-comp"]
VARIANTS = {
    "baseline": [],
    "cb_lep_ec": CB + ["--inter-grad-comp-rank", "8", "--use-error-feedback", "--inter-grad-comp-epilogue-only"],
    "act_int8": ["--activation-comp-method", "int8"],
    "dp_powersgd8": ["--grad-comp", "--grad-comp-error-feedback", "--grad-comp-warm-up", "0.1", "--grad-comp-rank", "8"],
}


def main(argv):
    out, iters = argv[0], int(argv[1])
    binary = argv[argv.index("--bin") + 1] if "--bin" in argv else "build/optimus-cc"
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    data = os.path.join(out, "data", "kjv")
    if not os.path.exists(data + ".idx"):
        os.makedirs(os.path.dirname(data), exist_ok=True)
        subprocess.run([binary, "preprocess", "--input", "data/kjv.txt.zst", "--output-prefix", data,
                        "--vocab-size", "512"], check=True, env=env, stdout=subprocess.DEVNULL)
    common = ["--data-path", data, "--tokenizer-model", data + ".model", "--num-layers", "4", "--hidden-size", "128",
              "--num-attention-heads", "4", "--seq-length", "64", "--max-position-embeddings", "64",
              "--micro-batch-size", "4", "--global-batch-size", "32", "--train-iters", str(iters), "--lr", "2e-3",
              "--min-lr", "1e-4", "--lr-warmup-fraction", "0.05", "--weight-decay", "0.1", "--clip-grad", "1.0",
              "--hidden-dropout", "0.1", "--attention-dropout", "0.1", "--eval-interval", str(iters), "--eval-iters",
              "8", "--log-interval", "1000", "--seed", "1234", "--pipeline-model-parallel-size", "2"]
    results = {"iters": iters, "layout": "P2 x D2 (4 MPI ranks, 1 thread each)", "runs": {}}
    for model, arch in ARCH.items():
        for variant, flags in VARIANTS.items():
            name = f"{model}_{variant}"
            metrics, log = os.path.join(out, name + ".jsonl"), os.path.join(out, name + ".log")
            cmd = ["mpirun", "-np", "4", "--oversubscribe", binary, "train"] + common + arch + flags + [
                "--metrics", metrics]
            if not os.path.exists(metrics) or sum(1 for _ in open(metrics)) < iters:
                with open(log, "w") as f:
                    subprocess.run(cmd, check=True, env=env, stdout=f, stderr=subprocess.STDOUT)
            rows = [json.loads(line) for line in open(metrics)]
            params = next(line for line in open(log) if line.startswith("model: ")).split()[1]
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
    with open(os.path.join(out, "llama-vs-gpt2.json"), "w") as f:
        json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
