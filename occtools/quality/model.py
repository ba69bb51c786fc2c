"""The model and data of the quality experiments (`quality`, `compressors`, `diloco-quality`),
defined once: a ~5.8 M-parameter GPT (6 layers, hidden 256, 8 heads, seq 128) on the bundled
corpus (KJV, a 4096-token SentencePiece model), P2 (x D2 on 4 ranks), micro-batch 4, global batch 32.
`compressors --corpus gcide` trains the same model on a second corpus nobody tuned on: Debian's
GCIDE dictionary (`extract-gcide`), tokenized the same way (its own 4096-token model)."""

import os

from occtools.common import engine

RANKS = 4
CORPORA = ("kjv", "gcide")


def prepare(out, exe, corpus="kjv"):
    """The corpus tokenized once into OUT/data; returns its prefix."""
    prefix = os.path.join(out, "data", corpus)
    if corpus == "kjv":
        return engine.preprocess(exe, prefix, 4096, env=engine.rank_env())
    if corpus != "gcide":
        from occtools.common.errors import Failure
        raise Failure(f"corpus {corpus!r}: use one of {', '.join(CORPORA)}")
    source = prefix + ".jsonl.zst"
    if not os.path.isfile(prefix + ".idx") and not os.path.isfile(source):
        from occtools import extract
        os.makedirs(os.path.dirname(source), exist_ok=True)
        extract.gcide(source)
    return engine.preprocess(exe, prefix, 4096, source=source, env=engine.rank_env())


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
