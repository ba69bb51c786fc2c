#!/usr/bin/env bash
# labels: parallel
# The classifier (LM head + cross-entropy + their gradients) runs in chunks of at most
# --debug-classifier-values logits, so that a training forward never holds [tokens,
# vocabulary] logits; the test models are small enough to fit one chunk. Here they are cut
# into several uneven ones (the last chunk shorter): single process and vocab-parallel T2
# (the chunked all-reduces of max, sum-exp and target logit), with dropout, must reproduce
# the one-chunk run within relative 1e-5 per iteration (only the order in which the LM
# head's weight gradient sums its rows changes), and also with --bf16 (rounding as before:
# the chunks see the same values).
source "$(dirname "$0")/fixture/lib.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1
MODEL=("${TINY[@]}" --train-iters 4 --hidden-dropout 0.1 --attention-dropout 0.1 --adam-eps 1e-3 --seed 9)
# 2 samples x 32 tokens = 64 rows of 4096 (T1) or 2048 (T2) logits: 5 rows per chunk at T1
# (13 chunks, the last of 4 rows), 10 at T2 (7 chunks, the last of 4).
CHUNK=(--debug-classifier-values 20480)
train_run one 1 && train_run chunks 1 "${CHUNK[@]}" && compare_losses one chunks
train_run t2_chunks 2 --tensor-model-parallel-size 2 "${CHUNK[@]}" && compare_losses one t2_chunks
train_run bf16_one 1 --bf16 && train_run bf16_chunks 1 --bf16 "${CHUNK[@]}" && compare_losses bf16_one bf16_chunks 2e-3
finish
