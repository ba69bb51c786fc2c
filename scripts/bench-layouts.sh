#!/usr/bin/env bash
# Iteration time and per-phase breakdown of one model on 4 ranks in four
# layouts (T1P1D4, T1P2D2, T2P2D1, T1P4D1), plus the CPU time the ranks used
# versus their wall time (how much of the waiting yields the core).
#   bash scripts/bench-layouts.sh [--iters N] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=12 OUT=bench-results
while (($#)); do case $1 in --iters) ITERS=$2; shift 2;; --out) OUT=$2; shift 2;; *) echo "unknown flag $1"; exit 2;; esac; done
bash scripts/setup.sh > /dev/null
mkdir -p "$OUT"
DATA=$OUT/data
[[ -f $DATA/kjv.idx ]] || { mkdir -p "$DATA"; build/optimus-cc preprocess --input data/kjv.txt.zst --output-prefix "$DATA/kjv" --vocab-size 4096 > /dev/null; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 4 --hidden-size 128
  --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 4 --global-batch-size 32
  --train-iters "$ITERS" --eval-iters 0 --log-interval 1000 --hidden-dropout 0 --attention-dropout 0)
for layout in "1 1" "1 2" "2 2" "1 4"; do
  set -- $layout
  rm -f "$OUT/layout_T$1P$2.jsonl"
  mpirun -np 4 --oversubscribe build/optimus-cc train "${MODEL[@]}" --tensor-model-parallel-size "$1" \
    --pipeline-model-parallel-size "$2" --metrics "$OUT/layout_T$1P$2.jsonl" > /dev/null
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = []
phases = ["forward", "backward", "pp_wait", "tp_allreduce", "tp_allgather", "dp_allreduce", "emb_allreduce", "optimizer"]
lines = ["| layout | ms/iter median | best | " + " | ".join(phases) + " | CPU/wall |", "|" + "---|" * (len(phases) + 4)]
for t, p in [(1, 1), (1, 2), (2, 2), (1, 4)]:
    its = [json.loads(l) for l in open(f"{out}/layout_T{t}P{p}.jsonl")][2:]  # skip warm-up
    ms = [j["ms"] for j in its]
    mean = lambda k: statistics.mean(statistics.mean(r["timers"][k] for r in j["ranks"]) for j in its)
    cpu = statistics.mean(sum(r["timers"]["cpu"] for r in j["ranks"]) / sum(r["timers"]["iteration"] for r in j["ranks"]) for j in its)
    d = 4 // (t * p)
    lines.append(f"| T{t}P{p}D{d} | {statistics.median(ms):.1f} | {min(ms):.1f} | " +
                 " | ".join(f"{mean(k):.1f}" for k in phases) + f" | {cpu:.2f} |")
text = "\n".join(lines)
print(text)
open(f"{out}/layouts.md", "w").write(text + "\n\nPhase columns: mean milliseconds per rank per iteration. CPU/wall: CPU time used by all ranks / their wall time (4 ranks on the machine's cores).\n")
PY
