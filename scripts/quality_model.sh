# The model and data of the quality experiments (scripts/experiment-quality.sh and
# scripts/experiment-compressors.sh), defined once: a ~5.8 M-parameter GPT (6 layers,
# hidden 256, 8 heads, seq 128) on the bundled corpus, P2 (x D2 on 4 ranks), micro-batch 4,
# global batch 32. Source this file, then `quality_model OUT ITERS EVAL` builds the
# project (scripts/setup.sh), preprocesses the corpus into OUT/data once, exports the
# multi-rank environment (one BLAS/OpenMP thread per rank; Open MPI as root) and sets
#   MODEL  the train flags (data, model, optimizer, schedule, evaluation)
quality_model() {
  local out=$1 iters=$2 eval=$3
  local data=$out/data
  bash scripts/setup.sh > /dev/null
  mkdir -p "$out"
  export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
  if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  [[ -f $data/kjv.idx ]] || { mkdir -p "$data"; build/optimus-cc preprocess --input data/kjv.txt.zst --output-prefix "$data/kjv" --vocab-size 4096; }
  MODEL=(--data-path "$data/kjv" --tokenizer-model "$data/kjv.model" --num-layers 6 --hidden-size 256
    --num-attention-heads 8 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 4 --global-batch-size 32
    --train-iters "$iters" --lr 1e-3 --min-lr 1e-4 --lr-warmup-fraction 0.05 --weight-decay 0.1 --clip-grad 1.0
    --hidden-dropout 0.1 --attention-dropout 0.1 --eval-interval "$eval" --eval-iters 8 --log-interval 1000
    --pipeline-model-parallel-size 2)
}
