#!/usr/bin/env bash
# The main job: set up, tokenize the bundled King James Bible, train a small
# GPT on it with the full Optimus-CC configuration on 4 MPI ranks (pipeline 2 x
# data 2: CB + LEP + EC on pipeline gradients, FE, DP PowerSGD with SC),
# printing validation loss as it falls and the traffic compression saved, then
# sample text from the final checkpoint. It installs and builds only what it
# uses (OCC_SETUP=main: no test packages, no tests, no CUDA backend on a new build
# folder); scripts/test.sh installs and builds the rest.
#   OCC_RUN_DIR  where data, checkpoints and metrics go (default: runs/kjv)
#   OCC_RANKS    MPI ranks (default 4; the config's pipeline size is 2)
#   extra arguments are passed to `optimus-cc train` (they override the config)
set -euo pipefail
cd "$(dirname "$0")/.."
OCC_SETUP=main bash scripts/setup.sh
RUN=${OCC_RUN_DIR:-runs/kjv}
mkdir -p "$RUN"
if [[ ! -f $RUN/kjv.idx || ! -f $RUN/kjv.model ]]; then
  build/optimus-cc preprocess --input data/kjv.txt.zst --output-prefix "$RUN/kjv" --vocab-size 4096
fi
# Several ranks share the cores: one thread each, and waits yield the core.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$RUN/checkpoints" "$RUN/metrics.jsonl" "$RUN/tensorboard"
mpirun -np "${OCC_RANKS:-4}" --oversubscribe build/optimus-cc train --config configs/kjv-optimus-cc.json \
  --data-path "$RUN/kjv" --tokenizer-model "$RUN/kjv.model" \
  --save "$RUN/checkpoints" --metrics "$RUN/metrics.jsonl" --tensorboard-dir "$RUN/tensorboard" "$@"
echo
echo "sample:"
build/optimus-cc generate --load "$RUN/checkpoints" --tokenizer-model "$RUN/kjv.model" \
  --prompt "And God said" --max-new-tokens 60
