"""The model and data of the quality experiments (`quality`, `compressors`, `diloco-quality`),
defined once: a ~5.8 M-parameter GPT (6 layers, hidden 256, 8 heads, seq 128) on the bundled
corpus (KJV, a 4096-token SentencePiece model), P2 (x D2 on 4 ranks), micro-batch 4, global batch 32."""

import os

from occtools.common import engine

RANKS = 4


def prepare(out, exe):
    """The corpus tokenized once into OUT/data; returns its prefix."""
    return engine.preprocess(exe, os.path.join(out, "data", "kjv"), 4096, env=engine.rank_env())


def flags(data, iters, eval_interval, pipeline=2):
    """The train flags: data, model, optimizer, schedule, evaluation."""
    return ["--data-path", data, "--tokenizer-model", data + ".model", "--num-layers", "6", "--hidden-size", "256",
            "--num-attention-heads", "8", "--seq-length", "128", "--max-position-embeddings", "128",
            "--micro-batch-size", "4", "--global-batch-size", "32", "--train-iters", str(iters), "--lr", "1e-3",
            "--min-lr", "1e-4", "--lr-warmup-fraction", "0.05", "--weight-decay", "0.1", "--clip-grad", "1.0",
            "--hidden-dropout", "0.1", "--attention-dropout", "0.1", "--eval-interval", str(eval_interval),
            "--eval-iters", "8", "--log-interval", "1000", "--pipeline-model-parallel-size", str(pipeline)]


def check_iters(iters, eval_interval):
    from occtools.common.errors import Failure
    if iters < eval_interval or iters % eval_interval:
        raise Failure(f"--iters {iters}: use a positive multiple of {eval_interval} (the evaluation interval)")
